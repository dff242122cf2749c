package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const declaredManifest = `version: 1
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
upstreams:
  payments: {http: "PAYMENTS"}
tools:
  - name: get_account
    kind: read
    input_schema: {type: object, properties: {accountId: {type: string}}, required: [accountId]}
    upstream: {name: payments, path: /accounts/get}
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {accountId: {type: string}}, required: [accountId]}
    natural_key: [{field: accountId}]
    window: forever
    upstream: {name: payments, path: /payouts}
    answers: {undo: "No.", approver: "Rules, then people.", on_repeat: "The first payout."}
    approval:
      lookup: {tool: get_account, args: {accountId: "args.accountId"}}
      rules:
        - {name: small, when: "facts.amount < 100", decide: auto}
        - {name: people, when: "true", decide: human}
  - name: credit
    kind: write
    input_schema: {type: object, properties: {accountId: {type: string}, memo: {type: object, properties: {text: {type: string}}}, extra: {type: object}}, required: [accountId]}
    natural_key: [{field: accountId}]
    window: forever
    upstream: {name: payments, path: /credits}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first credit."}
  - name: save
    kind: write
    input_schema: {type: object, properties: {accountId: {type: string}}, required: [accountId]}
    natural_key: [{field: accountId}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first save."}
`

// A side-effecting tool takes only the arguments its input_schema declares
// (issue 45): a Go service decoding with encoding/json would take
// "accountid" as "accountId", so a plan looked up, ruled on and shown for
// ACC-SMALL would pay ACC-BIG. The exploit is refused on every front door
// before anything is keyed, looked up or sent, naming the argument.
func TestOnlyDeclaredArgumentsReachTheService(t *testing.T) {
	t.Parallel()
	var paid atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			AccountID string `json:"accountId"` // encoding/json: any case matches
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		if r.URL.Path == "/accounts/get" {
			amount := 900000
			if in.AccountID == "ACC-SMALL" {
				amount = 50
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"accountId": in.AccountID, "amount": amount})
			return
		}
		paid.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"paid": in.AccountID})
	}))
	t.Cleanup(payments.Close)
	hash := gateway.HashToken(agentToken)
	m, err := manifest.Parse([]byte(strings.NewReplacer("PAYMENTS", payments.URL, "HASH", fmt.Sprintf("%x", hash[:])).Replace(declaredManifest)), "declared.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.TokensFromManifest(m.Auth.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	url := serveApp(t, &app.Config{Manifest: m, Tokens: tokens}).URL

	// What the service would read of the exploit: the undeclared member.
	var read struct {
		AccountID string `json:"accountId"`
	}
	_ = json.Unmarshal([]byte(`{"accountId":"ACC-SMALL","accountid":"ACC-BIG"}`), &read)
	if read.AccountID != "ACC-BIG" {
		t.Fatalf("the service read %q; the test assumes encoding/json takes the last case-insensitive match", read.AccountID)
	}

	post := func(path string, body string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agentToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	mcpCall := func(tool string, args string) (int, string) {
		return post("/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+
			`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
			"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", tool)
	}
	exploit := `{"accountId":"ACC-SMALL","accountid":"ACC-BIG"}`
	for _, c := range []struct {
		door  string
		send  func() (int, string)
		field string
	}{
		{"plan over /v1/calls", func() (int, string) {
			return post("/v1/calls", `{"tool":"plan_pay_out","args":`+exploit+`,"run_id":"r1"}`)
		}, "accountid"},
		{"plan over MCP", func() (int, string) { return mcpCall("plan_pay_out", exploit) }, "accountid"},
		{"write over /v1/calls", func() (int, string) {
			return post("/v1/calls", `{"tool":"credit","args":`+exploit+`,"run_id":"r1"}`)
		}, "accountid"},
		{"write over MCP", func() (int, string) { return mcpCall("credit", exploit) }, "accountid"},
		{"a nested undeclared member", func() (int, string) {
			return post("/v1/calls", `{"tool":"credit","args":{"accountId":"ACC-SMALL","memo":{"text":"hi","Text":"pay ACC-BIG"}},"run_id":"r1"}`)
		}, "memo.Text"},
		{"the claims API", func() (int, string) {
			return post("/v1/claims", `{"tool":"save","args":`+exploit+`,"run_id":"r1"}`)
		}, "accountid"},
	} {
		status, body := c.send()
		if !strings.Contains(body, `unknown field \"`+c.field+`\"`) && !strings.Contains(body, `unknown field "`+c.field+`"`) {
			t.Errorf("%s: %d %s; want the undeclared argument %s refused", c.door, status, body, c.field)
		}
	}
	// A free-form object declares no members, but two a lenient reader
	// takes for one are refused all the same.
	for _, extra := range []string{`{"to":"ACC-SMALL","TO":"ACC-BIG"}`, `{"to":"ACC-SMALL","t\u200bo":"ACC-BIG"}`} {
		status, body := post("/v1/calls", `{"tool":"credit","args":{"accountId":"ACC-SMALL","extra":`+extra+`},"run_id":"r1"}`)
		if status != http.StatusBadRequest || !strings.Contains(body, "differ only by case") || !strings.Contains(body, `"field":"extra.`) {
			t.Errorf("a free-form object with %s: %d %s; want 400 naming the member", extra, status, body)
		}
	}
	if n := paid.Load(); n != 0 {
		t.Fatalf("the service was paid %d times; want never", n)
	}
	// The declared arguments alone still work.
	if status, body := post("/v1/calls", `{"tool":"credit","args":{"accountId":"ACC-SMALL","memo":{"text":"hi"}},"run_id":"r1"}`); status != http.StatusOK || !bytes.Contains([]byte(body), []byte(`"ACC-SMALL"`)) {
		t.Fatalf("a declared call: %d %s", status, body)
	}
}
