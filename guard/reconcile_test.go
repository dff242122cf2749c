package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// verdicts is a Reconciler that answers each record's tool with a verdict.
type verdicts map[string]airlock.Verdict

func (v verdicts) Automatic(string) bool { return true }
func (v verdicts) Asks(string) bool      { return true }

func (v verdicts) Reconcile(_ context.Context, rec *airlock.Record) (*airlock.Reconciliation, error) {
	verdict, ok := v[rec.Tool]
	if !ok {
		return nil, errors.New("the read tool failed")
	}
	return &airlock.Reconciliation{Verdict: verdict, Tool: "get_" + rec.Tool, Answer: json.RawMessage(`{"seen":true}`)}, nil
}

// TestReconciliationSettlesOnlyWhatItsAnswerSays: an answer that says the
// work happened settles the record as succeeded, one that says it did not
// frees the key; an answer that says neither (unknown), or a read that
// failed, leaves the record in doubt: the work may have happened and must
// not run again.
func TestReconciliationSettlesOnlyWhatItsAnswerSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool  string
		want  airlock.State // after the pass; "" = no record (the key is free)
		stats guard.ReconcileStats
	}{
		{"happened", airlock.StateSucceeded, guard.ReconcileStats{Asked: 1, Happened: 1}},
		{"not_happened", "", guard.ReconcileStats{Asked: 1, NotHappened: 1}},
		{"unknown", airlock.StateInDoubt, guard.ReconcileStats{Asked: 1, Failed: 1}},
		{"read_fails", airlock.StateInDoubt, guard.ReconcileStats{Asked: 1, Failed: 1}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			g := guard.New(s, nil)
			t.Cleanup(g.Close)
			ctx := context.Background()
			c := &airlock.Call{Tool: writeTool(tc.tool, false, false), Args: airlock.MustArgs(`{"id":"P-1"}`)}
			a, err := g.Do(ctx, c, func(context.Context, string) airlock.Outcome {
				return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: errors.New("connection reset")}
			})
			if err != nil || a.Status != airlock.StatusInDoubt {
				t.Fatalf("first call: %+v %v, want in doubt", a, err)
			}
			r := guard.NewReaper(g, &guard.ReaperConfig{Reconciler: verdicts{
				"happened": airlock.VerdictHappened, "not_happened": airlock.VerdictNotHappened, "unknown": airlock.VerdictUnknown}})
			st, err := r.Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := g.Derive(c)
			rec, err := s.Get(ctx, d.Key)
			switch {
			case tc.want == "" && !errors.Is(err, airlock.ErrNotFound):
				t.Fatalf("an answer saying the work did not happen left the record: %+v %v", rec, err)
			case tc.want != "" && (err != nil || rec.State != tc.want):
				t.Fatalf("a reconciliation whose answer is %s: record %+v %v, want %s (an answer that says nothing must leave the record in doubt, never free the key)", tc.tool, rec, err, tc.want)
			}
			if st != tc.stats {
				t.Fatalf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}
}
