package guard_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// writeTool is a side-effecting tool keyed by id, run by its caller or by
// airlock, honouring keys or not, whose repeats wait 1ms for a running
// claim.
func writeTool(name string, byCaller, honorsKey bool) *airlock.Tool {
	wait := airlock.NewDuration(time.Millisecond)
	t := &airlock.Tool{Name: name, Kind: airlock.KindWrite, HonorsKey: honorsKey, RepeatWait: &wait,
		NaturalKey: []airlock.KeyField{{Field: "id"}}, Window: &airlock.Window{Kind: airlock.WindowForever}}
	if byCaller {
		t.Upstream = &airlock.ToolUpstream{Caller: true, HonorsIdempotencyKey: honorsKey}
	}
	return t
}

// vanished claims call's key as a holder that vanished: its lease ended a
// second ago and no reaper has run.
func vanished(t *testing.T, g *guard.Guard, s airlock.Store, c *airlock.Call) string {
	t.Helper()
	d, err := g.Derive(c)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, ok, err := s.Claim(context.Background(), &airlock.Claim{Key: d.Key, Tool: c.Tool.Name, WindowID: "forever", Args: c.Args.JSON(),
		ArgsHash: d.ArgsHash(c.Tool, c.Args), Owner: "vanished", Now: now.Add(-time.Minute), LeaseUntil: now.Add(-time.Second)}); err != nil || !ok {
		t.Fatalf("claim as the vanished holder: %v %v", ok, err)
	}
	return d.Key
}

// TestOnlyToolsThatHonourKeysAreTakenOver: a repeat that finds an expired
// claim (its holder vanished, the reaper has not run) takes it over and
// runs the work again only for a tool run by its caller that honours keys;
// any other tool's work may have happened, so the repeat runs nothing and
// the record waits for the reaper to put it in doubt.
func TestOnlyToolsThatHonourKeysAreTakenOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		byCaller, honorsKey bool
		takeOver            bool
	}{
		{"run by its caller, honouring keys", true, true, true},
		{"run by its caller, not honouring keys", true, false, false},
		{"run by airlock, honouring keys", false, true, false},
		{"run by airlock, not honouring keys", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			g := guard.New(s, nil)
			t.Cleanup(g.Close)
			ctx := context.Background()
			tool := writeTool("pay", tc.byCaller, tc.honorsKey)
			c := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"P-1"}`)}
			key := vanished(t, g, s, c)
			ran := 0
			var held *guard.Held
			var a *airlock.Answer
			var err error
			if tc.byCaller {
				held, a, err = g.Claim(ctx, c, guard.Holder{Principal: "agent-2"})
			} else {
				a, err = g.Do(ctx, c, func(context.Context, string) airlock.Outcome {
					ran++
					return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
				})
				if err == nil && a.Status == airlock.StatusSucceeded {
					held = &guard.Held{} // it ran
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			rec, rerr := s.Get(ctx, key)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if !tc.takeOver {
				if held != nil || ran != 0 || rec.Owner != "vanished" || rec.Attempts != 1 {
					t.Fatalf("a repeat took over the expired claim of a tool that may not run twice (held %v, answer %+v, runs %d, record owner %q attempts %d): only a tool run by its caller that honours keys is taken over",
						held != nil, a, ran, rec.Owner, rec.Attempts)
				}
				if a == nil || a.Status != airlock.StatusInProgress || !a.Repeat {
					t.Fatalf("the repeat's answer: %+v, want in progress", a)
				}
				st, err := guard.NewReaper(g, nil).Reap(ctx)
				if err != nil || st.InDoubt != 1 {
					t.Fatalf("the reaper after the repeat: %+v %v, want the record put in doubt", st, err)
				}
				return
			}
			if held == nil || rec.Owner == "vanished" || rec.Attempts != 2 {
				t.Fatalf("the expired claim of a caller's tool that honours keys was not taken over: answer %+v, record %+v", a, rec)
			}
		})
	}
}

// TestReaperRedrivesOnlyToolsThatHonourKeys: the reaper re-drives an
// expired claim only when its tool honours keys, whatever its Redrive
// says; otherwise the record goes in doubt and nothing runs again.
func TestReaperRedrivesOnlyToolsThatHonourKeys(t *testing.T) {
	t.Parallel()
	for _, honorsKey := range []bool{true, false} {
		t.Run(map[bool]string{true: "honours keys", false: "does not honour keys"}[honorsKey], func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			g := guard.New(s, nil)
			t.Cleanup(g.Close)
			ctx := context.Background()
			tool := writeTool("pay", false, honorsKey)
			c := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"P-1"}`)}
			key := vanished(t, g, s, c)
			ran := make(chan struct{}, 4)
			r := guard.NewReaper(g, &guard.ReaperConfig{Redrive: func(*airlock.Record) (*airlock.Tool, airlock.SideEffect, bool) {
				// A re-driver that says yes to everything: the reaper
				// itself must check the tool.
				return tool, func(context.Context, string) airlock.Outcome {
					ran <- struct{}{}
					return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
				}, true
			}})
			st, err := r.Reap(ctx)
			if err != nil {
				t.Fatal(err)
			}
			g.Wait()
			rec, err := s.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if honorsKey {
				if st.Redriven != 1 || len(ran) != 1 || rec.State != airlock.StateSucceeded {
					t.Fatalf("a tool that honours keys: %+v, runs %d, record %s; want re-driven once", st, len(ran), rec.State)
				}
				return
			}
			if st.Redriven != 0 || len(ran) != 0 || rec.State != airlock.StateInDoubt || st.InDoubt != 1 {
				t.Fatalf("the reaper re-drove a tool that does not honour keys (stats %+v, runs %d, record %s): it must go in doubt", st, len(ran), rec.State)
			}
		})
	}
}

// TestALeftClaimGoesInDoubtAfterItsWindow: the reaper leaves an expired
// claim its Leave names running for TakeOverWindow past its lease (for its
// caller to take over with the same key), and no longer: then it goes in
// doubt like any other.
func TestALeftClaimGoesInDoubtAfterItsWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ended   time.Duration // how long ago the lease ended
		inDoubt bool
	}{
		{"within the window", time.Second, false},
		{"past the window", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			g := guard.New(s, nil)
			t.Cleanup(g.Close)
			ctx := context.Background()
			tool := writeTool("pay", true, true)
			c := &airlock.Call{Tool: tool, Args: airlock.MustArgs(`{"id":"P-1"}`)}
			d, err := g.Derive(c)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if _, ok, err := s.Claim(ctx, &airlock.Claim{Key: d.Key, Tool: tool.Name, WindowID: "forever", Args: c.Args.JSON(),
				ArgsHash: d.ArgsHash(tool, c.Args), Owner: "vanished", Now: now.Add(-2 * time.Hour), LeaseUntil: now.Add(-tc.ended)}); err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			r := guard.NewReaper(g, &guard.ReaperConfig{TakeOverWindow: time.Minute, Leave: func(*airlock.Record) bool { return true }})
			st, err := r.Reap(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(ctx, d.Key)
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.State == airlock.StateInDoubt; got != tc.inDoubt || st.InDoubt != map[bool]int{true: 1}[tc.inDoubt] {
				t.Fatalf("a left claim whose lease ended %s ago, window 1m: %s (stats %+v); want in doubt %v: a claim is left for its caller only for TakeOverWindow",
					tc.ended, rec.State, st, tc.inDoubt)
			}
		})
	}
}
