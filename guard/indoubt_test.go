package guard_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/store/sqlite"
)

// TestInDoubtMessageIsTrue: a model is told that a check is under way only
// when the tool has one (reconcile_with); otherwise that a person settles
// it. The first call and its repeat say the same.
func TestInDoubtMessageIsTrue(t *testing.T) {
	t.Parallel()
	g := guard.New(openSQLite(t), nil)
	t.Cleanup(g.Close)
	for _, tc := range []struct {
		name, reconcileWith, want string
	}{
		{"no check", "", airlock.MessageInDoubtPerson},
		{"a reconciliation", "get_payment", airlock.MessageInDoubt},
	} {
		tool := &airlock.Tool{Name: "pay_" + tc.name, Kind: airlock.KindWrite, ReconcileWith: tc.reconcileWith,
			NaturalKey: []airlock.KeyField{{Field: "id"}}, Window: &airlock.Window{Kind: airlock.WindowForever}}
		call := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"P-1"}`)}
		for i := range 2 {
			a, err := g.Do(context.Background(), call, func(context.Context, string) airlock.Outcome {
				return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: errors.New("connection reset")}
			})
			if err != nil || a.Status != airlock.StatusInDoubt || a.Message != tc.want || a.Repeat != (i == 1) {
				t.Fatalf("%s, call %d: %+v %v; want in doubt saying %q", tc.name, i+1, a, err, tc.want)
			}
		}
	}
}

// openSQLite is a migrated SQLite store in the test's directory.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
