package plan_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

// quickPlans is a plan service over SQLite without a queue (the test runs
// each commit), whose withdrawals service answers approve_withdrawal with
// outcome, and whose guard does not re-drive unknown outcomes.
func quickPlans(t *testing.T, outcome airlock.OutcomeKind) (*plan.Service, *airlock.Tool, *atomic.Int64) {
	t.Helper()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := guard.New(s, &guard.Config{UnknownRetries: -1})
	t.Cleanup(func() { g.Close(); _ = s.Close() })
	var runs atomic.Int64
	callers := func(*airlock.Tool) (upstream.Caller, bool) {
		return upstream.Func(func(_ context.Context, req *upstream.Request) airlock.Outcome {
			if req.Tool.Name == "get_withdrawal" {
				return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"amount_minor":250000,"currency":"USD","kyc_complete":true}`)}
			}
			runs.Add(1)
			switch outcome {
			case airlock.OutcomeUnknown:
				return airlock.Outcome{Kind: outcome, Err: errors.New("connection reset after sending")}
			case airlock.OutcomeFailed:
				return airlock.Outcome{Kind: outcome, Result: json.RawMessage(`{"error":"insufficient funds"}`)}
			}
			return airlock.Outcome{Kind: outcome, Result: json.RawMessage(`{"approved":true}`)}
		}), true
	}
	svc, err := plan.New(plan.Config{Manifest: m, Store: s, Guard: g, Callers: callers})
	if err != nil {
		t.Fatal(err)
	}
	return svc, m.Tool("approve_withdrawal"), &runs
}

// TestACommitEndsAsItsRecord: an approved plan's commit leaves the plan as
// its record says — committed, failed (the service refused), or in doubt
// when the outcome is unknown: work that may have happened is never
// called failed, and committing again runs nothing.
func TestACommitEndsAsItsRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outcome airlock.OutcomeKind
		want    airlock.PlanStatus
	}{
		{airlock.OutcomeSucceeded, airlock.PlanCommitted},
		{airlock.OutcomeFailed, airlock.PlanFailed},
		{airlock.OutcomeUnknown, airlock.PlanInDoubt},
	} {
		t.Run(string(tc.want), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			svc, tool, runs := quickPlans(t, tc.outcome)
			p, _, err := svc.Propose(ctx, tool, args("WD-9"), "run-1")
			if err != nil || p.Status != airlock.PlanAwaitingApproval {
				t.Fatalf("propose: %+v %v", p, err)
			}
			if _, err := svc.Decide(ctx, decision(p.ID, true, "checked", p.DecisionHash)); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := svc.Commit(ctx, p.ID); err != nil {
					t.Fatal(err)
				}
			}
			got, err := svc.Get(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.want {
				t.Fatalf("a commit whose outcome was %s left the plan %s, want %s (an unknown outcome may have happened: the plan is in doubt, never failed)", tc.outcome, got.Status, tc.want)
			}
			if runs.Load() != 1 {
				t.Fatalf("the work ran %d times, want once", runs.Load())
			}
		})
	}
}

// TestADecisionHashOfOtherWorkIsRefused: an approval is bound to the
// plan's exact arguments and facts. A hash of other arguments, or of
// other facts — a real hash, as long as the plan's — is refused naming
// decision_hash, and the plan still awaits approval.
func TestADecisionHashOfOtherWorkIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, tool, runs := quickPlans(t, airlock.OutcomeSucceeded)
	p, _, err := svc.Propose(ctx, tool, args("WD-10"), "run-1")
	if err != nil || p.Status != airlock.PlanAwaitingApproval {
		t.Fatalf("propose: %+v %v", p, err)
	}
	other, _, err := svc.Propose(ctx, tool, args("WD-11"), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, hash string }{
		{"another plan's", other.DecisionHash},
		{"other arguments", airlock.DecisionHash(tool.Name, json.RawMessage(`{"record_id":"WD-99"}`), p.Facts)},
		{"other facts", airlock.DecisionHash(tool.Name, p.Args, json.RawMessage(`{"amount_minor":1,"currency":"USD","kyc_complete":true}`))},
		{"another tool", airlock.DecisionHash("add_note", p.Args, p.Facts)},
	} {
		if len(tc.hash) != len(p.DecisionHash) || tc.hash == p.DecisionHash {
			t.Fatalf("%s: not a different hash of the same length", tc.name)
		}
		for _, approve := range []bool{true, false} {
			_, err := svc.Decide(ctx, decision(p.ID, approve, "checked", tc.hash))
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != airlock.CodeConflict || e.Field != "decision_hash" {
				t.Fatalf("deciding (approve %v) with the decision hash of %s: %v; want state_conflict naming decision_hash", approve, tc.name, err)
			}
		}
	}
	if got, _ := svc.Get(ctx, p.ID); got.Status != airlock.PlanAwaitingApproval || runs.Load() != 0 {
		t.Fatalf("a refused decision changed the plan (%s) or ran the work (%d)", got.Status, runs.Load())
	}
	if _, err := svc.Decide(ctx, decision(p.ID, true, "checked", p.DecisionHash)); err != nil {
		t.Fatalf("the plan's own hash: %v", err)
	}
}
