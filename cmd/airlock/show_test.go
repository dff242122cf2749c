package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

// plans show in text: labelled fields, money formatted beside its raw
// value, the agent's note, big numbers as sent, no expiry once decided.
func TestPrintPlan(t *testing.T) {
	t.Parallel()
	tool := &airlock.Tool{Name: "pay", Kind: airlock.KindIrreversible, Display: &airlock.Display{
		Money: []airlock.MoneyField{{Amount: "facts.amount_minor", Currency: "facts.currency"}}, Note: "args.note"}}
	p := &airlock.Plan{ID: "pl_1", Tool: "pay", Status: airlock.PlanRejected, Rule: "everything_else", Decision: "human",
		ProposedBy: "agent-1", CreatedAt: time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC),
		DecidedBy: "alice\x1b[2J\u202eecila", DecidedAt: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC), DecisionReason: "no",
		Args:  json.RawMessage(`{"record_id":"WD-24813","note":"customer called","ref":{"id":9007199254740993}}`),
		Facts: json.RawMessage(`{"amount_minor":250000,"currency":"USD"}`)}
	var b strings.Builder
	printPlan(&b, p, tool)
	out := b.String()
	for _, want := range []string{
		`(?m)^status\s+rejected$`, `(?m)^args\.record_id\s+WD-24813$`, `(?m)^args\.ref\.id\s+9007199254740993$`,
		`(?m)^facts\.amount_minor\s+2,500\.00 USD \(250000\)$`, `(?m)^agent's note\s+customer called$`, `(?m)^decided\s+by alice\[U\+001B\]\[2J\[U\+202E\]ecila at 2026-12-07T10:00:00Z: no$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("plans show lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "expires") {
		t.Errorf("a decided plan shows an expiry:\n%s", out)
	}
	// Without its tool (a server's plan, no --config): the raw values.
	b.Reset()
	printPlan(&b, p, nil)
	if !regexp.MustCompile(`(?m)^facts\.amount_minor\s+250000$`).MatchString(b.String()) {
		t.Errorf("without the tool:\n%s", b.String())
	}
}
