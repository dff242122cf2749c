package policy_test

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/policy"
)

func tool(rules ...airlock.Rule) *airlock.Tool {
	return &airlock.Tool{Name: "approve_withdrawal", Kind: airlock.KindIrreversible, Approval: &airlock.Approval{Rules: rules}}
}

var rules = []airlock.Rule{
	{Name: "under_limit", When: `facts.amount_minor < 50000 && facts.currency == "USD" && facts.kyc_complete`, Decide: "auto"},
	{Name: "everything_else", When: "true", Decide: "human"},
}

func TestCompileErrorsNameTheRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, when, want string }{
		{"unknown variable", "fact.amount < 5", "undeclared reference"},
		{"syntax", "facts.amount <", "Syntax error"},
		{"not a bool", "facts.amount_minor + 1", "want a bool"},
		{"string not bool", `"yes"`, "want a bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errs := policy.Compile(tool(airlock.Rule{Name: "broken", When: tc.when, Decide: "auto"}), 3)
			if len(errs) != 1 || errs[0].Rule != "broken" || errs[0].Path != "tools[3].approval.rules[0].when" ||
				!strings.Contains(errs[0].Error(), tc.want) || !strings.Contains(errs[0].Error(), `rule "broken"`) {
				t.Fatalf("got %v, want one error naming rule broken containing %q", errs, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p, errs := policy.Compile(tool(rules...), 0)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		name         string
		facts        map[string]any
		rule, decide string
	}{
		{"small, USD, KYC", map[string]any{"amount_minor": 25000, "currency": "USD", "kyc_complete": true}, "under_limit", "auto"},
		{"float facts from JSON", map[string]any{"amount_minor": 25000.0, "currency": "USD", "kyc_complete": true}, "under_limit", "auto"},
		{"at the limit", map[string]any{"amount_minor": 50000, "currency": "USD", "kyc_complete": true}, "everything_else", "human"},
		{"no KYC", map[string]any{"amount_minor": 1, "currency": "USD", "kyc_complete": false}, "everything_else", "human"},
		{"missing fact never approves", map[string]any{"currency": "USD", "kyc_complete": true}, "under_limit", "human"},
		{"no facts never approves", nil, "under_limit", "human"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := p.Decide(policy.Input{Args: map[string]any{"record_id": "WD-1", "amount_minor": 1}, Facts: tc.facts, Tool: "approve_withdrawal"})
			if d.Rule != tc.rule || d.Decision != tc.decide {
				t.Fatalf("got %s/%s (%+v), want %s/%s", d.Rule, d.Decision, d.Evaluated, tc.rule, tc.decide)
			}
		})
	}
}

func TestNoRuleHoldsMeansHuman(t *testing.T) {
	t.Parallel()
	p, _ := policy.Compile(tool(airlock.Rule{Name: "never", When: "false", Decide: "auto"}), 0)
	if d := p.Decide(policy.Input{}); d.Decision != "human" || d.Rule != "" {
		t.Fatalf("%+v", d)
	}
}

func TestLookupArgs(t *testing.T) {
	t.Parallel()
	got, err := policy.LookupArgs(map[string]string{"record_id": "args.record_id", "n": "args.n + 1"}, map[string]any{"record_id": "WD-1", "n": 2}, "t")
	if err != nil || got["record_id"] != "WD-1" || got["n"] != int64(3) {
		t.Fatalf("%v %#v", err, got)
	}
	if _, err := policy.LookupArgs(map[string]string{"x": "args.missing"}, map[string]any{}, "t"); err == nil {
		t.Fatal("a missing argument must be an error")
	}
}
