// Package storetest is the conformance suite every airlock store driver
// passes: the store's own contract and the guarded call's behaviours
// (docs/concepts.md, "The guarded call") on top of it. A driver's tests call Run with a function
// that makes a fresh, migrated, empty store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

// NewStore returns a fresh, migrated, empty store; it is closed by the test's cleanup.
type NewStore func(t testing.TB) airlock.Store

// Run runs the whole suite.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Store", func(t *testing.T) { t.Parallel(); runStore(t, newStore) })
	t.Run("Guard", func(t *testing.T) { t.Parallel(); runGuard(t, newStore) })
	t.Run("Claims", func(t *testing.T) { t.Parallel(); runClaims(t, newStore) })
	t.Run("Leases", func(t *testing.T) { t.Parallel(); runLeases(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); runConcurrency(t, newStore) })
	t.Run("Plans", func(t *testing.T) { t.Parallel(); runPlans(t, newStore) })
	t.Run("AuditEvents", func(t *testing.T) { t.Parallel(); RunAuditEvents(t, newStore) })
	t.Run("Figures", func(t *testing.T) { t.Parallel(); RunFigures(t, newStore) })
	t.Run("Sessions", func(t *testing.T) { t.Parallel(); RunSessions(t, newStore) })
	t.Run("Tasks", func(t *testing.T) { t.Parallel(); RunTasks(t, newStore) })
}

var keySeq atomic.Int64

// Key returns a key unique within this process.
func Key(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), keySeq.Add(1))
}

func claimOf(key, owner string, now time.Time, lease time.Duration) *airlock.Claim {
	return &airlock.Claim{
		Key: key, Tool: "approve_withdrawal", RunID: "run-1", WindowID: "forever",
		Args: json.RawMessage(`{"record_id":"WD-1"}`), ArgsHash: "h1", Owner: owner,
		Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour),
	}
}

func runStore(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)

	t.Run("ClaimIsUnique", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("claim")
		rec, claimed, err := s.Claim(ctx, claimOf(key, "o1", now, time.Minute))
		must(t, err)
		if !claimed || rec.State != airlock.StateRunning || rec.Owner != "o1" {
			t.Fatalf("first claim: claimed=%v rec=%+v", claimed, rec)
		}
		rec, claimed, err = s.Claim(ctx, claimOf(key, "o2", now, time.Minute))
		must(t, err)
		if claimed || rec.Owner != "o1" || rec.State != airlock.StateRunning {
			t.Fatalf("second claim: claimed=%v rec=%+v", claimed, rec)
		}
		got, err := s.Get(ctx, key)
		must(t, err)
		if string(got.Args) != `{"record_id":"WD-1"}` || got.ArgsHash != "h1" || got.RunID != "run-1" || got.Tool != "approve_withdrawal" {
			t.Fatalf("Get: %+v", got)
		}
		if !got.LeaseUntil.Equal(now.Add(time.Minute)) || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("times: lease %v expires %v", got.LeaseUntil, got.ExpiresAt)
		}
	})

	t.Run("ClaimsKeepEveryCharacter", func(t *testing.T) {
		t.Parallel()
		// Concurrent claims share one statement (the drivers write their
		// text columns as arrays): every character must come back as sent.
		s := newStore(t)
		odd := []string{``, `NULL`, `"`, `\`, `\"`, `a,b`, `{x}`, `{"a":"b\\c"}`, ` lead and trail `, "line\nbreak\ttab",
			`'single'`, `Zoë €5 😀`, `\N`, `}{`, `""`, `$1`}
		prefix := Key("odd")
		var wg sync.WaitGroup
		for i, v := range odd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				args, _ := json.Marshal(map[string]string{"v": v})
				c := &airlock.Claim{Key: fmt.Sprintf("%s-%d%s", prefix, i, v), Tool: "tool" + v, RunID: v, WindowID: "w" + v,
					Args: args, ArgsHash: v, Owner: "owner" + v, Actor: "actor" + v, Now: now, LeaseUntil: now.Add(time.Minute)}
				if _, claimed, err := s.Claim(ctx, c); err != nil || !claimed {
					t.Errorf("claim %q: claimed=%v err=%v", v, claimed, err)
					return
				}
				got, err := s.Get(ctx, c.Key)
				if err != nil {
					t.Errorf("get %q: %v", v, err)
					return
				}
				if got.Tool != c.Tool || got.RunID != c.RunID || got.WindowID != c.WindowID || string(got.Args) != string(args) ||
					got.ArgsHash != c.ArgsHash || got.Owner != c.Owner {
					t.Errorf("value %q came back as %+v", v, got)
				}
			}()
		}
		wg.Wait()
		events, err := s.AuditSince(ctx, &airlock.AuditSinceParams{Since: now.Add(-time.Second), Limit: 1000})
		must(t, err)
		actors := map[string]string{}
		for _, e := range events {
			if e.Kind == airlock.EventClaimed && strings.HasPrefix(e.Key, prefix) {
				actors[e.Key] = e.Actor
			}
		}
		for i, v := range odd {
			if key := fmt.Sprintf("%s-%d%s", prefix, i, v); actors[key] != "actor"+v {
				t.Errorf("claimed event of %q: actor %q, want %q", key, actors[key], "actor"+v)
			}
		}
	})

	t.Run("OneFailingWriteDoesNotFailItsBatch", func(t *testing.T) {
		t.Parallel()
		// Concurrent writes share a transaction (group commit). A write the
		// database refuses (here a state its CHECK constraint rejects) must
		// fail alone: the writes beside it commit and are answered ok.
		s := newStore(t)
		const n = 48
		for round := range 5 {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = Key(fmt.Sprintf("batch%d", round))
				_, _, err := s.Claim(ctx, claimOf(keys[i], "o-"+keys[i], now, time.Minute))
				must(t, err)
			}
			bad := n / 2
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, k := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					state := airlock.StateSucceeded
					if i == bad {
						state = "no_such_state"
					}
					<-start
					errs[i] = s.Complete(ctx, &airlock.Completion{Key: k, Owner: "o-" + k, State: state, Result: json.RawMessage(`{"ok":true}`), Now: now})
				}()
			}
			close(start)
			wg.Wait()
			if errs[bad] == nil {
				t.Fatalf("round %d: a completion with an invalid state was accepted", round)
			}
			for i, err := range errs {
				if i == bad {
					continue
				}
				if err != nil {
					t.Fatalf("round %d: completion %d failed beside the bad one: %v", round, i, err)
				}
				rec, err := s.Get(ctx, keys[i])
				must(t, err)
				if rec.State != airlock.StateSucceeded {
					t.Fatalf("round %d: record %d is %s, want succeeded", round, i, rec.State)
				}
			}
			if rec, err := s.Get(ctx, keys[bad]); err != nil || rec.State != airlock.StateRunning {
				t.Fatalf("round %d: the refused completion changed its record: %+v %v", round, rec, err)
			}
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if _, err := s.Get(ctx, Key("none")); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	})

	t.Run("CompleteIsConditionalOnOwner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("complete")
		_, _, err := s.Claim(ctx, claimOf(key, "o1", now, time.Minute))
		must(t, err)
		err = s.Complete(ctx, &airlock.Completion{Key: key, Owner: "intruder", State: airlock.StateSucceeded, Result: json.RawMessage(`1`), Now: now})
		if !errors.Is(err, airlock.ErrLeaseLost) {
			t.Fatalf("complete by another owner: %v, want ErrLeaseLost", err)
		}
		must(t, s.Complete(ctx, &airlock.Completion{Key: key, Owner: "o1", State: airlock.StateSucceeded, Result: json.RawMessage(`{"ok":true}`), Now: now}))
		err = s.Complete(ctx, &airlock.Completion{Key: key, Owner: "o1", State: airlock.StateFailed, Now: now})
		if !errors.Is(err, airlock.ErrLeaseLost) {
			t.Fatalf("second complete: %v, want ErrLeaseLost", err)
		}
		got, err := s.Get(ctx, key)
		must(t, err)
		if got.State != airlock.StateSucceeded || string(got.Result) != `{"ok":true}` {
			t.Fatalf("after complete: %+v", got)
		}
	})

	t.Run("ReleaseFreesTheKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("release")
		_, _, err := s.Claim(ctx, claimOf(key, "o1", now, time.Minute))
		must(t, err)
		if err := s.Release(ctx, &airlock.ReleaseParams{Key: key, Owner: "o2"}); !errors.Is(err, airlock.ErrLeaseLost) {
			t.Fatalf("release by another owner: %v", err)
		}
		at := now.Add(7 * time.Second)
		must(t, s.Release(ctx, &airlock.ReleaseParams{Key: key, Owner: "o1", At: at}))
		_, claimed, err := s.Claim(ctx, claimOf(key, "o3", now, time.Minute))
		must(t, err)
		if !claimed {
			t.Fatal("key not free after release")
		}
		// Its audit event is at the caller's time, on both drivers (the
		// database's clock, or the process's, is not the guard's).
		events, err := s.AuditSince(ctx, &airlock.AuditSinceParams{Since: now.Add(-time.Second), Limit: 1000})
		must(t, err)
		found := false
		for _, e := range events {
			if e.Key == key && e.Kind == airlock.EventReleased {
				found = true
				if !e.At.Equal(at) {
					t.Fatalf("the release's event is at %v, want the caller's %v", e.At, at)
				}
			}
		}
		if !found {
			t.Fatal("no released event")
		}
	})

	t.Run("HeartbeatExtendsTheLease", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("beat")
		_, _, err := s.Claim(ctx, claimOf(key, "o1", now, time.Second))
		must(t, err)
		must(t, s.Heartbeat(ctx, &airlock.HeartbeatParams{Key: key, Owner: "o1", LeaseUntil: now.Add(time.Hour)}))
		if err := s.Heartbeat(ctx, &airlock.HeartbeatParams{Key: key, Owner: "o2", LeaseUntil: now.Add(time.Hour)}); !errors.Is(err, airlock.ErrLeaseLost) {
			t.Fatalf("heartbeat by another owner: %v", err)
		}
		recs, err := s.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: now.Add(time.Minute), Limit: 10})
		must(t, err)
		for _, r := range recs {
			if r.Key == key {
				t.Fatal("a heartbeated lease is listed as expired")
			}
		}
	})

	t.Run("ExpiredLeasesAndReaping", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("expire")
		_, _, err := s.Claim(ctx, claimOf(key, "dead", now, time.Second))
		must(t, err)
		ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: key, Now: now, Note: "too early"})
		must(t, err)
		if ok {
			t.Fatal("a live lease was expired")
		}
		later := now.Add(time.Minute)
		recs, err := s.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: later, Limit: 1000})
		must(t, err)
		if !containsKey(recs, key) {
			t.Fatal("expired lease not listed")
		}
		// Two replicas reap at once: exactly one wins.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: key, Now: later, Note: "lease expired"})
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d reapers won, want 1", wins.Load())
		}
		got, err := s.Get(ctx, key)
		must(t, err)
		if got.State != airlock.StateInDoubt || got.Note != "lease expired" {
			t.Fatalf("after reaping: %+v", got)
		}
		// The record the reaper marked is in the count of records in
		// doubt (the gauge and the report read it; no answer counted it).
		byTool, err := s.InDoubtByTool(ctx)
		must(t, err)
		if byTool["approve_withdrawal"] != 1 {
			t.Fatalf("records in doubt by tool: %v, want the reaped one counted", byTool)
		}
	})

	// A holder whose lease ended is late, not wrong: while nobody has
	// reaped or taken its record, nobody else can have run the work, so its
	// outcome is the truth and is kept (decision 71). Once the reaper
	// marked the record in doubt, or another owner took it, the late
	// outcome changes nothing.
	t.Run("ALateOutcomeIsKeptUntilTheRecordIsReapedOrTaken", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		later := now.Add(time.Minute)
		kept, reaped, taken := Key("late-kept"), Key("late-reaped"), Key("late-taken")
		for _, key := range []string{kept, reaped, taken} {
			_, _, err := s.Claim(ctx, claimOf(key, "slow", now, time.Second))
			must(t, err)
		}
		ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: reaped, Now: later, Note: "lease expired"})
		must(t, err)
		_, tookOver, err := s.TakeOver(ctx, &airlock.TakeOverParams{Key: taken, Owner: "redriver", Now: later, LeaseUntil: later.Add(time.Minute)})
		must(t, err)
		if !ok || !tookOver {
			t.Fatalf("reaped %v, taken over %v", ok, tookOver)
		}
		late := func(key string) error {
			return s.Complete(ctx, &airlock.Completion{Key: key, Owner: "slow", State: airlock.StateSucceeded, Result: json.RawMessage(`{"late":true}`), Now: later})
		}
		must(t, late(kept))
		for _, key := range []string{reaped, taken} {
			if err := late(key); !errors.Is(err, airlock.ErrLeaseLost) {
				t.Fatalf("%s: a late outcome after the record was reaped or taken: %v, want ErrLeaseLost", key, err)
			}
		}
		for key, want := range map[string]airlock.State{kept: airlock.StateSucceeded, reaped: airlock.StateInDoubt, taken: airlock.StateRunning} {
			got, err := s.Get(ctx, key)
			must(t, err)
			if got.State != want {
				t.Fatalf("%s: %s, want %s", key, got.State, want)
			}
		}
		recs, err := s.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: later.Add(time.Minute), Limit: 1000})
		must(t, err)
		if containsKey(recs, kept) {
			t.Fatal("a completed record is listed as an expired lease")
		}
		if ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: kept, Now: later.Add(time.Minute), Note: "lease expired"}); err != nil || ok {
			t.Fatalf("the reaper after the late outcome: %v %v", ok, err)
		}
	})

	t.Run("InDoubtPagesWithACursor", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// 11 records go in doubt, some at the same instant (the cursor's
		// key breaks the tie); one stays running and one completes.
		want := map[string]bool{}
		for i := range 11 {
			key := Key(fmt.Sprintf("doubt-%d", i))
			_, _, err := s.Claim(ctx, claimOf(key, "dead", now, time.Second))
			must(t, err)
			ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: key, Now: now.Add(time.Duration(i/3)*time.Minute + time.Hour), Note: "lease expired"})
			must(t, err)
			if !ok {
				t.Fatal("not expired")
			}
			want[key] = true
		}
		_, _, err := s.Claim(ctx, claimOf(Key("running"), "alive", now, time.Hour))
		must(t, err)
		f := airlock.RecordFilter{State: airlock.StateInDoubt, Limit: 3}
		var prev *airlock.Record
		got := 0
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("the pages do not end")
			}
			recs, err := s.ListRecords(ctx, f)
			must(t, err)
			for _, r := range recs {
				if !want[r.Key] || r.State != airlock.StateInDoubt {
					t.Fatalf("listed %s (%s), not one of the in-doubt records, or twice", r.Key, r.State)
				}
				delete(want, r.Key)
				if prev != nil && (r.UpdatedAt.After(prev.UpdatedAt) || (r.UpdatedAt.Equal(prev.UpdatedAt) && r.Key > prev.Key)) {
					t.Fatalf("%s (%s) listed after %s (%s): not newest first", r.Key, r.UpdatedAt, prev.Key, prev.UpdatedAt)
				}
				prev = r
				got++
			}
			if len(recs) < 3 {
				break
			}
			f.After = airlock.RecordCursor(recs[len(recs)-1])
		}
		if got != 11 || len(want) != 0 {
			t.Fatalf("%d listed, missing %v", got, want)
		}
		for _, bad := range []struct {
			f     airlock.RecordFilter
			field string
		}{
			{airlock.RecordFilter{State: airlock.StateSucceeded}, "state"},
			{airlock.RecordFilter{State: "doubtful"}, "state"},
			{airlock.RecordFilter{State: airlock.StateInDoubt, Limit: 1_000_000_000}, "limit"},
			{airlock.RecordFilter{State: airlock.StateInDoubt, After: "not-a-cursor!"}, "after"},
		} {
			_, err := s.ListRecords(ctx, bad.f)
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != bad.field {
				t.Errorf("%+v: %v, want invalid_argument naming %s", bad.f, err, bad.field)
			}
		}
	})

	t.Run("TakeOverOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("takeover")
		_, _, err := s.Claim(ctx, claimOf(key, "dead", now, time.Second))
		must(t, err)
		if _, ok, err := s.TakeOver(ctx, &airlock.TakeOverParams{Key: key, Owner: "early", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil || ok {
			t.Fatalf("take over a live lease: ok=%v err=%v", ok, err)
		}
		later := now.Add(time.Minute)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, ok, err := s.TakeOver(ctx, &airlock.TakeOverParams{Key: key, Owner: fmt.Sprintf("r%d", i), Now: later, LeaseUntil: later.Add(time.Minute)})
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
					if rec.Attempts != 2 {
						t.Errorf("attempts after take-over = %d, want 2", rec.Attempts)
					}
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d take-overs won, want 1", wins.Load())
		}
	})

	t.Run("Settle", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		doubt := func() string {
			key := Key("settle")
			_, _, err := s.Claim(ctx, claimOf(key, "o", now, time.Minute))
			must(t, err)
			must(t, s.Complete(ctx, &airlock.Completion{Key: key, Owner: "o", State: airlock.StateInDoubt, Note: "timeout", Now: now}))
			return key
		}
		k1 := doubt()
		rec, err := s.Settle(ctx, &airlock.Settlement{Key: k1, Happened: true, Result: json.RawMessage(`{"id":7}`), Note: "alice: ledger shows it", Now: now})
		must(t, err)
		if rec.State != airlock.StateSucceeded || string(rec.Result) != `{"id":7}` {
			t.Fatalf("settled happened: %+v", rec)
		}
		if _, err := s.Settle(ctx, &airlock.Settlement{Key: k1, Happened: false, Now: now}); !errors.Is(err, airlock.ErrStateConflict) {
			t.Fatalf("settle a succeeded record: %v, want ErrStateConflict", err)
		}
		k2 := doubt()
		rec, err = s.Settle(ctx, &airlock.Settlement{Key: k2, Happened: false, Note: "bob: not in ledger", Now: now})
		must(t, err)
		if rec.State != airlock.StateReleased {
			t.Fatalf("settled not happened: state %s", rec.State)
		}
		if _, err := s.Get(ctx, k2); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("a record settled as not happened still exists: %v", err)
		}
		if _, err := s.Settle(ctx, &airlock.Settlement{Key: Key("nope"), Now: now}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("settle a missing record: %v, want ErrNotFound", err)
		}
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		done, running, forever := Key("old"), Key("running"), Key("forever")
		for _, k := range []string{done, running} {
			_, _, err := s.Claim(ctx, claimOf(k, "o", now, time.Minute))
			must(t, err)
		}
		c := claimOf(forever, "o", now, time.Minute)
		c.ExpiresAt = time.Time{}
		_, _, err := s.Claim(ctx, c)
		must(t, err)
		for _, k := range []string{done, forever} {
			must(t, s.Complete(ctx, &airlock.Completion{Key: k, Owner: "o", State: airlock.StateSucceeded, Result: json.RawMessage(`1`), Now: now}))
		}
		n, err := s.Purge(ctx, &airlock.PurgeParams{Now: now.Add(2 * time.Hour), Limit: 100})
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
		if _, err := s.Get(ctx, done); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatal("expired record not purged")
		}
		for _, k := range []string{running, forever} {
			if _, err := s.Get(ctx, k); err != nil {
				t.Fatalf("record %s purged: %v", k, err)
			}
		}
	})

	t.Run("SubscribeReportsCompletions", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("sub")
		got := make(chan string, 16)
		cancel := s.Subscribe(func(k string) {
			if k == key {
				got <- k
			}
		})
		defer cancel()
		_, _, err := s.Claim(ctx, claimOf(key, "o", now, time.Minute))
		must(t, err)
		// Give a listener connection time to start.
		time.Sleep(200 * time.Millisecond)
		must(t, s.Complete(ctx, &airlock.Completion{Key: key, Owner: "o", State: airlock.StateSucceeded, Result: json.RawMessage(`1`), Now: now}))
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no notification of the completion")
		}
	})

	t.Run("MigrateTwiceAndPing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		must(t, s.Migrate(ctx))
		must(t, s.Ping(ctx))
		must(t, s.ProbeWrite(ctx))
		must(t, s.ProbeWrite(ctx)) // the row is there: written again
	})
}

func containsKey(recs []*airlock.Record, key string) bool {
	for _, r := range recs {
		if r.Key == key {
			return true
		}
	}
	return false
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
