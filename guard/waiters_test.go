package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// A repeat that waits for a running first call is woken by its completion,
// listens again, finds the record final and returns: it leaves no wait
// registered behind (the one it stops is the one registered last).
func TestAWaitedRepeatLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	g := guard.New(openSQLite(t), nil)
	t.Cleanup(g.Close)
	tool := &airlock.Tool{Name: "note", Kind: airlock.KindWrite,
		NaturalKey: []airlock.KeyField{{Field: "id"}}, Window: &airlock.Window{Kind: airlock.WindowForever}}
	call := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"N-1"}`)}
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), call, func(context.Context, string) airlock.Outcome {
			close(started)
			<-release
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: []byte(`{"ok":true}`)}
		})
		first <- err
	}()
	<-started
	repeat := make(chan *airlock.Answer, 1)
	go func() {
		a, _ := g.Do(context.Background(), call, func(context.Context, string) airlock.Outcome {
			t.Error("the repeat ran the side effect")
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded}
		})
		repeat <- a
	}()
	// The repeat is waiting once it has registered for the record's change.
	for deadline := time.Now().Add(10 * time.Second); guard.Waiters(g) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the repeat never waited for the running call")
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if a := <-repeat; a == nil || !a.Repeat || a.Status != airlock.StatusSucceeded {
		t.Fatalf("the repeat: %+v; want the first result, marked a repeat", a)
	}
	if n := guard.Waiters(g); n != 0 {
		t.Fatalf("%d waits left registered after the repeat returned", n)
	}
}
