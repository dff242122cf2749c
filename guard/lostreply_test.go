package guard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// lostReplyStore commits the first completion and then reports the
// connection lost, as a database that fails over between the commit and its
// reply does.
type lostReplyStore struct {
	airlock.GuardStore
	completes atomic.Int32
}

func (s *lostReplyStore) Complete(ctx context.Context, c *airlock.Completion) error {
	err := s.GuardStore.Complete(ctx, c)
	if s.completes.Add(1) == 1 && err == nil {
		return fmt.Errorf("%w: connection reset by peer", airlock.ErrStoreUnavailable)
	}
	return err
}

// TestCompletionWhoseReplyWasLostIsRecognised: the guard retries a
// completion whose reply was lost; the retry finds the record no longer
// running, and the guard recognises the committed completion as its own, so
// the caller gets the result, not in_doubt.
func TestCompletionWhoseReplyWasLostIsRecognised(t *testing.T) {
	t.Parallel()
	store := &lostReplyStore{GuardStore: openSQLite(t)}
	g := guard.New(store, nil)
	t.Cleanup(g.Close)
	tool := &airlock.Tool{Name: "add_note", Kind: airlock.KindWrite,
		NaturalKey: []airlock.KeyField{{Field: "id"}}, Window: &airlock.Window{Kind: airlock.WindowForever}}
	call := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"N-1"}`)}
	var runs atomic.Int32
	for i := range 2 {
		a, err := g.Do(context.Background(), call, func(context.Context, string) airlock.Outcome {
			runs.Add(1)
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: []byte(`{"note":"N-1"}`)}
		})
		if err != nil || a.Status != airlock.StatusSucceeded || a.Repeat != (i == 1) || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("call %d: %+v %v; want succeeded with the first result", i+1, a, err)
		}
	}
	if n := store.completes.Load(); n != 2 {
		t.Fatalf("the store was asked to complete %d times; want 2 (the lost reply and its retry)", n)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the side effect ran %d times; want 1", n)
	}
}
