package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const textManifest = `version: 1
upstreams:
  payments: {http: "http://127.0.0.1:1"}
tools:
  - name: approve_withdrawal
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, additionalProperties: false}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /approve}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first approval."}
    approval: {rules: [{name: people, when: "true", decide: human}]}
`

// The CLI writes no agent-made character raw that a terminal would act on
// or hide (docs/hardening.md, "text that cannot disguise itself"): in
// plans list an escape, a carriage return, a bidi override and a
// zero-width space show as [U+XXXX] and a long value is cut with its
// length said; plans show writes the same JSON values with \u escapes.
func TestCLITextCannotDisguiseItself(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(config, []byte(textManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse([]byte(textManifest), config)
	if err != nil {
		t.Fatal(err)
	}
	dsn := "sqlite:" + filepath.Join(dir, "a.db")
	ctx := context.Background()
	a, err := app.New(ctx, &app.Config{Manifest: m, DSN: dsn, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	var shown *airlock.Plan
	for _, c := range []struct{ recordID, run string }{
		{"WD-24813\u200b", "run-1"},
		{"WD-\u2067\u202e3184\u2069", "run-1"},
		{"WD-1", "1-tnega yb desoporp\u202e"},
		{"WD-LONG-" + strings.Repeat("9", 5000), "run-1"},
		{"WD-<7>&", "run-1"},
	} {
		raw, _ := json.Marshal(map[string]string{"record_id": c.recordID})
		p, _, err := a.Plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("approve_withdrawal"), airlock.MustArgs(string(raw)), c.run)
		if err != nil {
			t.Fatal(err)
		}
		if shown == nil {
			shown = p
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}

	raw := func(what, out string) {
		t.Helper()
		for i, r := range out {
			if airlock.Invisible(r) && r != '\n' {
				t.Fatalf("%s writes U+%04X raw at byte %d:\n%s", what, r, i, out)
			}
		}
	}
	r := runCLI(t, "plans", "list", "--db", dsn, "--config", config)
	raw("plans list", r.stdout)
	for _, want := range []string{`WD-24813[U+200B]`, `WD-[U+2067][U+202E]3184[U+2069]`, `1-tnega yb desoporp[U+202E]`, "bytes in all)"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("plans list (%d) does not show %s:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	if n := strings.Count(r.stdout, "\n"); n != 6 {
		t.Fatalf("plans list: %d lines, want a heading and 5 plans:\n%s", n, r.stdout)
	}
	if r := runCLI(t, "plans", "list", "--db", dsn, "--config", config, "--format", "json"); !strings.Contains(r.stdout, `WD-<7>&`) {
		t.Fatalf("plans list as JSON escapes < and & as a page would (\\u003c): %s", r.stdout)
	}
	// In text, labelled fields, the invisible character revealed; in JSON,
	// the same value, escaped.
	r = runCLI(t, "plans", "show", shown.ID, "--db", dsn, "--config", config)
	raw("plans show", r.stdout)
	if r.code != 0 || !regexp.MustCompile(`(?m)^args\.record_id\s+WD-24813\[U\+200B\]$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^status\s+awaiting_approval$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "expires") {
		t.Fatalf("plans show as text: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "plans", "show", shown.ID, "--db", dsn, "--config", config, "--format", "json")
	raw("plans show --format json", r.stdout)
	var got struct {
		Args struct {
			RecordID string `json:"record_id"`
		} `json:"args"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Args.RecordID != "WD-24813\u200b" || !strings.Contains(r.stdout, `WD-24813\u200b`) {
		t.Fatalf("plans show: %v; want the same value, escaped:\n%s", err, r.stdout)
	}
}
