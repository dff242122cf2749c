package manifest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/manifest"
)

func TestExampleLoads(t *testing.T) {
	t.Parallel()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	tool := m.Tool("approve_withdrawal")
	if tool == nil || tool.Kind != airlock.KindIrreversible || !tool.HonorsKey {
		t.Fatalf("approve_withdrawal: %+v", tool)
	}
	if m.Files == nil {
		t.Fatal("Files not set")
	}
}

const good = `version: 1
calendar: {timezone: America/New_York, cutoff: "17:00"}
tools:
  - name: get_withdrawal
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
  - name: approve_withdrawal
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id, normalize: [trim, upper]}]
    window: business_day
    answers:
      undo: "No."
      approver: "Automatic."
      on_repeat: "The first result."
`

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		old   string // replaced in good
		new   string
		place string // expected Place
		want  []string
	}{
		{"missing undo answer", `      undo: "No."` + "\n", "", "test.yaml:13:7",
			[]string{"tools[1].answers.undo", "approve_withdrawal", `"can it be undone"`}},
		{"missing approver answer", `      approver: "Automatic."` + "\n", "", "test.yaml:",
			[]string{"approve_withdrawal", `"who approves it"`}},
		{"missing on_repeat answer", `      on_repeat: "The first result."` + "\n", "", "test.yaml:",
			[]string{"approve_withdrawal", `"what happens if it repeats"`}},
		{"unknown field", "    window: business_day\n", "    window: business_day\n    windw: 1h\n", "test.yaml:12:5",
			[]string{`unknown field "windw"`, "a tool"}},
		{"unknown top-level field", "version: 1\n", "version: 1\nvesion: 2\n", "test.yaml:2:1",
			[]string{`unknown field "vesion"`}},
		{"bad duration", "    window: business_day\n", "    window: business_day\n    grace: 10 minutes\n", "test.yaml:12:12",
			[]string{"tools[1].grace", "10 minutes"}},
		{"bad window", "window: business_day", "window: fortnightly", "test.yaml:11:13",
			[]string{"tools[1].window", "fortnightly"}},
		{"unknown normalizer", "[trim, upper]", "[trim, uppercase]", "test.yaml:10:56",
			[]string{"tools[1].natural_key[0].normalize[1]", `"uppercase" is not a normalizer`, "trim, upper"}},
		{"natural key field not in schema", "natural_key: [{field: record_id", "natural_key: [{field: recordid", "test.yaml:10:27",
			[]string{"tools[1].natural_key[0].field", `"recordid" is not in the input schema`}},
		{"bad cutoff", `cutoff: "17:00"`, `cutoff: "5pm"`, "test.yaml:2:",
			[]string{"calendar.cutoff", "5pm"}},
		{"bad timezone", "America/New_York", "Mars/Olympus", "test.yaml:2:",
			[]string{"calendar.timezone", "Mars/Olympus"}},
		{"wrong type", "version: 1", "version: one", "test.yaml:1",
			[]string{"wrong type", "whole number"}},
		{"bad kind", "kind: write", "kind: dangerous", "test.yaml:8:11",
			[]string{"tools[1].kind", "read, write or irreversible"}},
		{"syntax", "tools:\n", "tools: [\n", "test.yaml:",
			[]string{"YAML syntax"}},
		{"missing window", "    window: business_day\n", "", "test.yaml:7:5",
			[]string{"tools[1].window", "required"}},
		{"bad retention", "tools:\n", "retention: {audit: ninety days}\ntools:\n", "test.yaml:3:",
			[]string{"retention.audit", "ninety days", "90d"}},
		{"retention too short", "tools:\n", "retention: {audit: 2h}\ntools:\n", "test.yaml:3:",
			[]string{"retention.audit", "at least 1d", "2h0m0s"}},
		{"zero record retention", "tools:\n", "retention: {records: 0d}\ntools:\n", "test.yaml:3:",
			[]string{"retention.records", "at least 1m0s"}},
		{"unknown retention field", "tools:\n", "retention: {events: 30d}\ntools:\n", "test.yaml:3:",
			[]string{`unknown field "events"`, "retention (records, audit, figures)"}},
		{"bad request limit", "tools:\n", "limits: {request_bytes: lots}\ntools:\n", "test.yaml:3:",
			[]string{"limits.request_bytes", `"lots" is not a size`, "4MiB"}},
		{"request limit too small", "tools:\n", "limits: {request_bytes: 100}\ntools:\n", "test.yaml:3:",
			[]string{"limits.request_bytes", "from 1KiB to 64MiB, not 100 bytes"}},
		{"request limit too large", "tools:\n", "limits: {request_bytes: 1GiB}\ntools:\n", "test.yaml:3:",
			[]string{"limits.request_bytes", "from 1KiB to 64MiB"}},
		{"unknown limit", "tools:\n", "limits: {session_bytes: 10}\ntools:\n", "test.yaml:3:",
			[]string{`unknown field "session_bytes"`, "limits (request_bytes, run_id_bytes, cache_bytes, mcp_session_idle, mcp_sessions_per_token, connections, body_timeout, upstream_answer_bytes)"}},
		{"run id limit too small", "tools:\n", "limits: {run_id_bytes: 8}\ntools:\n", "test.yaml:3:",
			[]string{"limits.run_id_bytes", "from 16 bytes to 4KiB, not 8 bytes"}},
		{"bad trusted proxy", "tools:\n", "auth: {trusted_proxies: [10.0.0.0/8, proxy.internal]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.trusted_proxies[1]", `"proxy.internal" is not an IP address or a CIDR prefix`}},
		{"oidc http issuer", "tools:\n", "auth: {oidc: {issuer: \"http://idp.example.com\"}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.issuer", "not an https URL (http only on a loopback host)"}},
		{"oidc without client", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\"}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.client_id", "required"}},
		{"oidc without secret", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\"}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.client_secret_env", "environment variable"}},
		{"oidc without roles", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\"}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.roles", "values of the groups claim"}},
		{"oidc bad callback", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\", redirect_url: \"https://a.example.com/callback\"}}\ntools:\n", "test.yaml:3:",
			[]string{`auth.oidc.redirect_url: "https://a.example.com/callback" is not an http(s) URL ending in /ui/oidc/callback`}},
		{"oidc agent role", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\", roles: {ops: agent}}}\ntools:\n", "test.yaml:3:",
			[]string{`auth.oidc.roles["ops"]`, `"agent" is not a role the page has: want approver or admin`}},
		{"oidc recheck too short", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\", recheck: 10s}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.recheck", "from 1m to 8h, not 10s"}},
		{"oidc recheck not a duration", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\", recheck: often}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.recheck"}},
		{"issuers without resource", "tools:\n", "auth: {issuers: [{issuer: \"https://idp.example.com\", role: agent}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.resource", "required with auth.issuers"}},
		{"issuer without roles", "tools:\n", "auth: {resource: \"https://a.example.com/mcp\", issuers: [{issuer: \"https://idp.example.com\"}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.issuers[0].roles", "values of the roles claim"}},
		{"issuer bad role", "tools:\n", "auth: {resource: \"https://a.example.com/mcp\", issuers: [{issuer: \"https://idp.example.com\", roles: {x: root}}]}\ntools:\n", "test.yaml:3:",
			[]string{`auth.issuers[0].roles["x"]`, `"root" is not a role`}},
		{"issuer bad skew", "tools:\n", "auth: {resource: \"https://a.example.com/mcp\", issuers: [{issuer: \"https://idp.example.com\", role: agent, clock_skew: 1h}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.issuers[0].clock_skew", "from 0 to 10m"}},
		{"http resource", "tools:\n", "auth: {resource: \"http://a.example.com/mcp\"}\ntools:\n", "test.yaml:3:",
			[]string{"auth.resource", "not an https URL"}},
		{"oidc unknown field", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com\", group_claim: g}}\ntools:\n", "test.yaml:3:",
			[]string{`unknown field "group_claim"`}},
		{"session idle too short", "tools:\n", "limits: {mcp_session_idle: 10ms}\ntools:\n", "test.yaml:3:",
			[]string{"limits.mcp_session_idle", "from 1s to 7d, not 10ms"}},
		{"sessions per token negative", "tools:\n", "limits: {mcp_sessions_per_token: -1}\ntools:\n", "test.yaml:3:",
			[]string{"limits.mcp_sessions_per_token", "from 1 to 100000"}},
		{"cache limit too small", "tools:\n", "limits: {cache_bytes: 1KiB}\ntools:\n", "test.yaml:3:",
			[]string{"limits.cache_bytes", "from 1MiB to 16GiB"}},
		{"prefix without resources or prompts", "tools:\n", "upstreams: {docs: {mcp: {url: \"http://127.0.0.1:9/mcp\", prefix: docs}}}\ntools:\n", "test.yaml:3:",
			[]string{"upstreams.docs.mcp.prefix", "resources: true or prompts: true"}},
		{"bad prefix", "tools:\n", "upstreams: {docs: {mcp: {url: \"http://127.0.0.1:9/mcp\", prompts: true, prefix: \"my docs\"}}}\ntools:\n", "test.yaml:3:",
			[]string{"upstreams.docs.mcp.prefix", `"my docs" is not a prefix`}},
		{"unknown mcp field", "tools:\n", "upstreams: {docs: {mcp: {url: \"http://127.0.0.1:9/mcp\", resource: true}}}\ntools:\n", "test.yaml:3:",
			[]string{`unknown field "resource"`, "mcp (command, url, resources, prompts, prefix, sessions)"}},
		{"bad sessions", "tools:\n", "upstreams: {docs: {mcp: {url: \"http://127.0.0.1:9/mcp\", sessions: per_call}}}\ntools:\n", "test.yaml:3:",
			[]string{"upstreams.docs.mcp.sessions", `"per_call": want shared (the default) or per_agent`}},
		{"two tokens, one sha256", "tools:\n", "auth: {tokens: [{name: alice, role: approver, sha256: \"" + strings.Repeat("ab", 32) + "\"}, {name: root, role: admin, sha256: \"" + strings.Repeat("AB", 32) + "\"}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.tokens[1]", "tokens alice and root have one secret"}},
		{"two tokens, one variable", "tools:\n", "auth: {tokens: [{name: alice, role: approver, env: T}, {name: root, role: admin, env: T}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.tokens[1]", "tokens alice and root have one secret (the same env variable T)"}},
		{"a colon in a token name", "tools:\n", "auth: {tokens: [{name: \"jwt:x\", role: agent, env: T}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.tokens[0].name", "may not contain ':'"}},
		{"approvals on an auto rule", "    kind: write\n", "    kind: irreversible\n    approval: {rules: [{name: r, when: \"true\", decide: auto, approvals: 2}]}\n", "test.yaml:",
			[]string{"rules[0].approvals", "decide: human"}},
		{"too many approvals", "    kind: write\n", "    kind: irreversible\n    approval: {rules: [{name: r, when: \"true\", decide: human, approvals: 11}]}\n", "test.yaml:",
			[]string{"rules[0].approvals", "from 1 to 10"}},
		{"an empty approver", "    kind: write\n", "    kind: irreversible\n    approval: {approvers: [\"group:\"], rules: [{name: r, when: \"true\", decide: human}]}\n", "test.yaml:",
			[]string{"approval.approvers[0]", "group:NAME"}},
		{"more approvals than named approvers", "    kind: write\n", "    kind: irreversible\n    approval: {approvers: [alice], rules: [{name: two_people, when: \"true\", decide: human, approvals: 2}]}\n", "test.yaml:",
			[]string{"rules[0].approvals", `rule "two_people" asks for 2 distinct approvers`, "names only 1 (alice)", "could never be approved"}},
		{"an issuer with a fragment", "tools:\n", "auth: {resource: \"https://a.example.com/mcp\", issuers: [{issuer: \"http://127.0.0.1:9\", role: agent}, {issuer: \"http://127.0.0.1:9#x\", role: agent}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.issuers[1].issuer", "query or a fragment", "ambiguous"}},
		{"an issuer with a query", "tools:\n", "auth: {resource: \"https://a.example.com/mcp\", issuers: [{issuer: \"https://idp.example.com/?tenant=a\", role: agent}]}\ntools:\n", "test.yaml:3:",
			[]string{"auth.issuers[0].issuer", "query or a fragment"}},
		{"an oidc issuer with a fragment", "tools:\n", "auth: {oidc: {issuer: \"https://idp.example.com#a\"}}\ntools:\n", "test.yaml:3:",
			[]string{"auth.oidc.issuer", "query or a fragment"}},
		{"bad on_mismatch", "    window: business_day\n", "    window: business_day\n    on_mismatch: ignore\n", "test.yaml:12:18",
			[]string{"on_mismatch", "replay or reject"}},
		{"a caller's tool naming an upstream", "    window: business_day\n", "    window: business_day\n    upstream: {caller: true, name: payments}\n", "test.yaml:",
			[]string{"tools[1].upstream", "names no upstream"}},
		{"a read tool run by its caller", "    input_schema: {type: object, properties: {record_id: {type: string}}}\n  - name: approve", "    input_schema: {type: object, properties: {record_id: {type: string}}}\n    upstream: {caller: true}\n  - name: approve", "test.yaml:",
			[]string{"tools[0].upstream.caller", "a read tool has nothing to guard"}},
		{"a token named as airlock's own actor", "tools:\n", "auth: {tokens: [{name: system, role: agent, sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"}]}\ntools:\n", "test.yaml:",
			[]string{"auth.tokens[0].name", "airlock's own actor"}},
		{"workers on a write tool", "    window: business_day\n", "    window: business_day\n    upstream: {caller: true, workers: [payments-worker]}\n", "test.yaml:",
			[]string{"tools[1].upstream.workers", "irreversible tool run by its caller"}},
		{"a worker without a name", "    kind: write\n", "    kind: irreversible\n    upstream: {caller: true, workers: [\" \"]}\n", "test.yaml:",
			[]string{"tools[1].upstream.workers[0]", "not a principal's name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := good
			if !strings.Contains(src, tc.old) {
				t.Fatalf("test case does not apply: %q not in the manifest", tc.old)
			}
			src = strings.Replace(src, tc.old, tc.new, 1)
			_, err := manifest.Parse([]byte(src), "test.yaml")
			var ve *airlock.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, airlock.ErrInvalidManifest) {
				t.Fatalf("got %v, want a ValidationError", err)
			}
			found := false
			for _, p := range ve.Problems {
				s := p.String()
				all := strings.HasPrefix(p.Place, tc.place)
				for _, w := range tc.want {
					all = all && strings.Contains(s, w)
				}
				found = found || all
			}
			if !found {
				t.Fatalf("no problem at %s containing %q in:\n%v", tc.place, tc.want, err)
			}
		})
	}
}

func TestParseGood(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(good), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tool("approve_withdrawal").OnMismatch; got != airlock.MismatchReplay {
		t.Fatalf("on_mismatch default: %q", got)
	}
	if r := m.Retention; r.RecordsOr() != manifest.DefaultRecordRetention || r.AuditOr() != 0 || r.FiguresOr() != manifest.DefaultFigureRetention {
		t.Fatalf("retention defaults: %s %s %s", r.RecordsOr(), r.AuditOr(), r.FiguresOr())
	}
	m, err = manifest.Parse([]byte(strings.Replace(good, "tools:\n", "retention: {records: 36h, audit: 90d, figures: 400d}\ntools:\n", 1)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Limits.RequestBytesOr(); got != manifest.DefaultRequestBytes {
		t.Fatalf("limits.request_bytes default: %d", got)
	}
	for text, want := range map[string]int64{"4MiB": 4 << 20, "512KiB": 512 << 10, "2048": 2048, "3 MiB": 3 << 20} {
		lm, err := manifest.Parse([]byte(strings.Replace(good, "tools:\n", "limits: {request_bytes: "+text+"}\ntools:\n", 1)), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if got := lm.Limits.RequestBytesOr(); got != want {
			t.Errorf("limits.request_bytes %s: %d, want %d", text, got, want)
		}
	}
	if r := m.Retention; r.RecordsOr() != 36*time.Hour || r.AuditOr() != 90*24*time.Hour || r.FiguresOr() != 400*24*time.Hour {
		t.Fatalf("retention: %s %s %s", r.RecordsOr(), r.AuditOr(), r.FiguresOr())
	}
}

func TestParseEmpty(t *testing.T) {
	t.Parallel()
	if _, err := manifest.Parse(nil, "empty.yaml"); !errors.Is(err, airlock.ErrInvalidManifest) {
		t.Fatalf("empty: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("version: 1\ntools: [{name: x, kind: read}]\n"))
	f.Add([]byte("tools: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifest.Parse(data, "fuzz.yaml")
		if err == nil {
			if m == nil || m.Validate() != nil {
				t.Fatal("accepted manifest does not validate")
			}
			return
		}
		if !errors.Is(err, airlock.ErrInvalidManifest) {
			t.Fatalf("error is not ErrInvalidManifest: %v", err)
		}
	})
}

// A key given twice in one mapping — the manifest's own or in a JSON-style
// flow mapping such as an input_schema — is refused naming its line: a
// reader could otherwise take the other one.
func TestDuplicateKeysRefused(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"a tool's field":    "version: 1\ntools:\n  - name: get_x\n    name: get_y\n    kind: read\n    input_schema: {type: object}\n",
		"a schema property": "version: 1\ntools:\n  - name: get_x\n    kind: read\n    input_schema: {type: object, properties: {id: {type: string}, id: {type: number}}}\n",
	} {
		_, err := manifest.Parse([]byte(src), "test.yaml")
		if err == nil || !strings.Contains(err.Error(), "already defined") || !strings.Contains(err.Error(), "test.yaml:") {
			t.Errorf("%s twice: %v; want refused naming the line", name, err)
		}
	}
}

// Where the manifest lists its static tokens, an approver named without a
// ':' must be one of its approver or admin tokens, exactly: a name in
// another case, with a space or an invisible character, or an agent's
// token could never decide.
func TestApproversAreTokensThatDecide(t *testing.T) {
	t.Parallel()
	const src = `version: 1
auth:
  tokens:
    - {name: alice, role: approver, sha256: "` + "aa" + `"}
    - {name: root, role: admin, sha256: "bb"}
    - {name: agent1, role: agent, sha256: "cc"}
tools:
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {id: {type: string}}}
    natural_key: [{field: id}]
    window: forever
    answers: {undo: "No.", approver: "People.", on_repeat: "The first."}
    approval: {approvers: APPROVERS, rules: [{name: r, when: "true", decide: human}]}
`
	for approvers, bad := range map[string]string{
		`[alice, root]`: "",
		`[alice, "oidc:ana@x.example", "group:ops"]`: "",
		`[alice, ALICE]`:         `"ALICE"`,
		`[alice, "alice "]`:      `"alice "`,
		`[alice, "alice\u200b"]`: `"alice\u200b"`,
		`[alice, agent1]`:        `"agent1"`,
	} {
		text := strings.ReplaceAll(strings.Replace(src, "APPROVERS", approvers, 1), `sha256: "aa"`, `sha256: "`+strings.Repeat("a", 64)+`"`)
		text = strings.Replace(text, `sha256: "bb"`, `sha256: "`+strings.Repeat("b", 64)+`"`, 1)
		text = strings.Replace(text, `sha256: "cc"`, `sha256: "`+strings.Repeat("c", 64)+`"`, 1)
		_, err := manifest.Parse([]byte(text), "test.yaml")
		switch {
		case bad == "" && err != nil:
			t.Errorf("approvers %s: %v; want loaded", approvers, err)
		case bad != "" && (err == nil || !strings.Contains(err.Error(), "approvers[1]") || !strings.Contains(err.Error(), "could never decide")):
			t.Errorf("approvers %s: %v; want refused naming %s", approvers, err, bad)
		}
	}
}

// A tool that changes something takes only the arguments it declares: a
// schema that allows others, or two properties that differ only by case
// (which a service matching names without regard to case reads as one),
// is refused at load.
func TestSideEffectingToolsDeclareTheirArguments(t *testing.T) {
	t.Parallel()
	const src = `version: 1
tools:
  - name: pay
    kind: KIND
    input_schema: SCHEMA
    natural_key: [{field: id}]
    window: forever
    answers: {undo: "No.", approver: "People.", on_repeat: "The first."}
`
	for _, c := range []struct {
		kind, schema, want string
	}{
		{"write", `{type: object, properties: {id: {type: string}}, additionalProperties: true}`, "input_schema.additionalProperties"},
		{"write", `{type: object, properties: {id: {type: string}}, additionalProperties: {type: string}}`, "declare each in properties"},
		{"write", `{type: object, properties: {id: {type: string}, Id: {type: string}}}`, `"Id" and "id"`},
		{"write", `{type: object, properties: {id: {type: string}, payee: {type: object, properties: {account: {type: string}, ACCOUNT: {type: string}}}}}`, "of payee differ only by case"},
		{"write", `{type: object, properties: {id: {type: string}}, additionalProperties: false}`, ""},
		// Folded as a lenient reader folds: in full, by compatibility, without invisibles.
		{"write", `{type: object, properties: {id: {type: string}, straße: {type: string}, strasse: {type: string}}}`, `"strasse" and "straße"`},
		{"irreversible", "{type: object, properties: {id: {type: string}, \"account\u200bId\": {type: string}, accountId: {type: string}}}", "differ only by case"},
		// What the declared-arguments check cannot follow.
		{"irreversible", `{type: object, properties: {id: {type: string}, payout: {anyOf: [{type: object, properties: {accountId: {type: string}}}]}}}`, "payout uses anyOf"},
		{"write", `{type: object, properties: {id: {type: string}, payout: {$ref: "#/$defs/P"}}, $defs: {P: {type: object}}}`, "payout uses $ref"},
		{"write", `{type: object, properties: {id: {type: string}, pair: {type: array, prefixItems: [{type: object}]}}}`, "pair uses prefixItems"},
		{"write", `{type: object, properties: {id: {type: string}, pair: {type: array, items: [{type: object}]}}}`, "items as a list"},
		{"read", `{type: object, properties: {id: {type: string}, p: {anyOf: [{type: string}]}}}`, ""},
		{"read", `{type: object, properties: {id: {type: string}, Id: {type: string}}, additionalProperties: true}`, ""},
	} {
		text := strings.NewReplacer("KIND", c.kind, "SCHEMA", c.schema).Replace(src)
		if c.kind == "read" {
			text = strings.Replace(strings.Replace(text, "    natural_key: [{field: id}]\n    window: forever\n", "", 1), `    answers: {undo: "No.", approver: "People.", on_repeat: "The first."}`+"\n", "", 1)
		}
		_, err := manifest.Parse([]byte(text), "test.yaml")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v; want loaded", c.kind, c.schema, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v; want refused with %q", c.kind, c.schema, err, c.want)
		}
	}
}

// display: money and the agent's note name arguments the schema declares,
// facts the tool looks up, and a currency by reference or ISO code; each
// mistake is refused naming its place.
func TestDisplay(t *testing.T) {
	t.Parallel()
	const src = `version: 1
upstreams:
  p: {http: "http://127.0.0.1:9"}
tools:
  - name: get
    kind: read
    upstream: {name: p, path: /get}
  - name: pay
    kind: KIND
    input_schema: {type: object, properties: {id: {type: string}, amount: {type: integer}, cur: {type: string}, why: {type: string}}}
    natural_key: [{field: id}]
    window: forever
    upstream: {name: p, path: /pay}
    answers: {undo: "No.", approver: "People.", on_repeat: "The first."}
APPROVAL    display: DISPLAY
`
	const approval = "    approval:\n      lookup: {tool: get, args: {id: \"args.id\"}}\n      rules: [{name: all, when: \"true\", decide: human}]\n"
	for _, c := range []struct {
		kind, display, want string
	}{
		{"irreversible", `{money: [{amount: args.amount, currency: args.cur}, {amount: facts.amount_minor, currency: USD}], note: args.why}`, ""},
		{"write", `{money: [{amount: args.amount, currency: EUR}], note: args.why}`, ""},
		{"irreversible", `{money: [{amount: args.amout, currency: USD}]}`, `display.money[0].amount: tool pay: "amout" is not in the input schema`},
		{"irreversible", `{money: [{amount: amount, currency: USD}]}`, `"amount" is not a reference: want args.PATH or facts.PATH`},
		{"irreversible", `{money: [{amount: args.amount}]}`, "display.money[0].currency: tool pay: required"},
		{"irreversible", `{money: [{amount: args.amount, currency: usd}]}`, `"usd" is neither an ISO 4217 code`},
		{"irreversible", `{money: [{currency: USD}]}`, "display.money[0].amount: tool pay: required"},
		{"irreversible", `{money: [{amount: args.amount, currency: XYZ}]}`, `"XYZ" is not an ISO 4217 currency`},
		{"write", `{money: [{amount: facts.amount, currency: USD}]}`, "no approval.lookup"},
		{"irreversible", `{note: facts.why}`, `"facts.why" is not a reference: want args.PATH`},
		{"irreversible", `{note: args.who}`, `"who" is not in the input schema`},
		{"irreversible", `{nte: args.why}`, `unknown field "nte" in display (money, note)`},
		{"irreversible", `{money: [{amount: args.cur, currency: USD}]}`, `"cur" is string in the input schema; want integer`},
		{"irreversible", `{money: [{amount: args.amount, currency: args.amount}]}`, `"amount" is integer in the input schema; want string`},
		{"irreversible", `{note: args.amount}`, `"amount" is integer in the input schema; want string`},
		{"irreversible", `{money: [{amount: args.amount, currency: USD}, {amount: args.amount, currency: EUR}]}`, `"args.amount" is already money[0]`},
	} {
		ap := ""
		if c.kind == "irreversible" {
			ap = approval
		}
		text := strings.NewReplacer("KIND", c.kind, "DISPLAY", c.display, "APPROVAL", ap).Replace(src)
		_, err := manifest.Parse([]byte(text), "test.yaml")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v; want loaded", c.kind, c.display, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v; want refused with %q", c.kind, c.display, err, c.want)
		}
	}
	// A read tool has no display.
	_, err := manifest.Parse([]byte(strings.Replace(strings.NewReplacer("KIND", "write", "DISPLAY", "{note: args.why}", "APPROVAL", "").Replace(src),
		"    upstream: {name: p, path: /get}\n", "    upstream: {name: p, path: /get}\n    display: {note: args.x}\n", 1)), "test.yaml")
	if err == nil || !strings.Contains(err.Error(), "display is for tools that change something") {
		t.Errorf("display on a read tool: %v", err)
	}
}
