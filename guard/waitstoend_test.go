package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// TestWaitsToEnd: a call whose caller waits to the end (Call.WaitsToEnd)
// runs its side effect on the caller's goroutine: a caller that gives up
// midway still gets the outcome when the side effect ends, never in
// progress, and the side effect is not cancelled; without WaitsToEnd the
// same call answers in progress at once. respond_within still answers in
// progress at its time.
func TestWaitsToEnd(t *testing.T) {
	t.Parallel()
	tool := func(name string, respondWithin time.Duration) *airlock.Tool {
		t := &airlock.Tool{Name: name, Kind: airlock.KindWrite,
			NaturalKey: []airlock.KeyField{{Field: "id"}}, Window: &airlock.Window{Kind: airlock.WindowForever}}
		if respondWithin > 0 {
			d := airlock.Duration{Duration: respondWithin}
			t.RespondWithin = &d
		}
		return t
	}
	for _, tc := range []struct {
		name          string
		waitsToEnd    bool
		respondWithin time.Duration
		want          airlock.Status
		// viaGiveUp: the caller gives up by Call.GiveUp, its context going on.
		viaGiveUp bool
	}{
		{"waits to the end", true, 0, airlock.StatusSucceeded, false},
		{"answered when the caller gives up", false, 0, airlock.StatusInProgress, false},
		{"respond_within still answers", true, 50 * time.Millisecond, airlock.StatusInProgress, false},
		{"answered when the caller gives up by GiveUp", false, 0, airlock.StatusInProgress, true},
		{"GiveUp keeps the wait even where the caller waits to the end", true, 0, airlock.StatusInProgress, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := guard.New(openSQLite(t), nil)
			t.Cleanup(g.Close)
			ctx, giveUp := context.WithCancel(context.Background())
			defer giveUp()
			release := make(chan struct{})
			effectErr := make(chan error, 1)
			call := &airlock.Call{Tool: tool("note", tc.respondWithin), Args: airlock.MustArgs(`{"id":"N-1"}`), WaitsToEnd: tc.waitsToEnd}
			gone := make(chan struct{})
			if tc.viaGiveUp {
				call.GiveUp = gone
			}
			answered := make(chan *airlock.Answer, 1)
			go func() {
				a, err := g.Do(ctx, call, func(ectx context.Context, _ string) airlock.Outcome {
					switch {
					case tc.viaGiveUp:
						close(gone)
					case tc.respondWithin == 0:
						giveUp() // the caller gives up while the work runs
					}
					<-release
					effectErr <- ectx.Err()
					return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: []byte(`{"ok":true}`)}
				})
				if err != nil {
					t.Error(err)
				}
				answered <- a
			}()
			var a *airlock.Answer
			if tc.want == airlock.StatusInProgress {
				a = <-answered // before the side effect may end
				close(release)
			} else {
				close(release)
				a = <-answered
			}
			if a == nil || a.Status != tc.want || a.Repeat {
				t.Fatalf("answer %+v, want %s", a, tc.want)
			}
			if tc.want == airlock.StatusSucceeded && string(a.Result) != `{"ok":true}` {
				t.Fatalf("result %s", a.Result)
			}
			if err := <-effectErr; err != nil {
				t.Fatalf("the side effect's context ended: %v", err)
			}
			g.Wait()
			again, err := g.Do(context.Background(), call, nil)
			if err != nil || again.Status != airlock.StatusSucceeded || !again.Repeat {
				t.Fatalf("the repeat: %+v %v", again, err)
			}
		})
	}
}
