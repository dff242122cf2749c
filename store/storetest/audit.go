package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/guard"
)

// Exec runs raw SQL against a store's database, to tamper with the log.
type Exec func(t testing.TB, s airlock.Store, query string)

// RunAudit checks sealing, verification and tamper detection, and the
// log's archive and purge (RunRetention).
func RunAudit(t *testing.T, newStore NewStore, exec Exec) {
	ctx := context.Background()
	fill := func(t *testing.T, s airlock.Store, n int) {
		t.Helper()
		var events []*airlock.AuditEvent
		for i := range n {
			events = append(events, &airlock.AuditEvent{
				At: time.Now().UTC().Truncate(time.Microsecond), Kind: airlock.EventCompleted, RunID: "run-1",
				Key: fmt.Sprintf("k%d", i), Tool: "approve_withdrawal", Args: json.RawMessage(`{"record_id":"WD-1"}`),
				Result: json.RawMessage(`{"approved":true}`), Actor: "agent-1",
			})
		}
		must(t, s.AppendAudit(ctx, events))
		for {
			k, err := s.SealAudit(ctx, 3) // several rounds: the chain continues across them
			must(t, err)
			if k == 0 {
				break
			}
		}
	}
	t.Run("CleanLogVerifies", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, 7)
		must(t, s.AppendAudit(ctx, []*airlock.AuditEvent{{At: time.Now(), Kind: airlock.EventClaimed, Actor: "x"}}))
		r, err := audit.Verify(ctx, s)
		must(t, err)
		if !r.OK || r.Events != 7 || r.Unsealed != 1 {
			t.Fatalf("clean log: %+v", r)
		}
	})
	for _, tc := range []struct {
		name, kind string
		seq        int64
		sql        []string
	}{
		{"EditedResult", "edited", 3, []string{`UPDATE airlock_audit SET result = '{"approved":false}' WHERE seq = 3`}},
		{"EditedActor", "edited", 5, []string{`UPDATE airlock_audit SET actor = 'someone-else' WHERE seq = 5`}},
		{"DeletedEvent", "deleted", 2, []string{`DELETE FROM airlock_audit WHERE seq = 2`}},
		{"SwappedEvents", "inserted_or_reordered", 2, []string{
			`UPDATE airlock_audit SET seq = -1 WHERE seq = 2`,
			`UPDATE airlock_audit SET seq = 2 WHERE seq = 3`,
			`UPDATE airlock_audit SET seq = 3 WHERE seq = -1`,
		}},
		{"InsertedEvent", "", 4, []string{
			`UPDATE airlock_audit SET seq = seq + 100 WHERE seq >= 4`,
			`UPDATE airlock_audit SET seq = seq - 99 WHERE seq >= 100`,
			`INSERT INTO airlock_audit (seq, at, kind, actor, prev_hash, hash) SELECT 4, at, 'completed', 'mallory', hash, 'x' FROM airlock_audit WHERE seq = 3`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			fill(t, s, 7)
			for _, q := range tc.sql {
				exec(t, s, q)
			}
			r, err := audit.Verify(ctx, s)
			must(t, err)
			if r.OK || r.Problem == nil || (tc.kind != "" && r.Problem.Kind != tc.kind) || r.Problem.Seq != tc.seq {
				t.Fatalf("tampering not found as %s at %d: %+v %+v", tc.kind, tc.seq, r, r.Problem)
			}
		})
	}
	// Deleting the tail, or all of it, or rewriting the tail and sealing it
	// again leaves a chain that verifies alone; the head recorded before
	// (Report.Head, the seal's log line, the head metric) finds it.
	for _, tc := range []struct {
		name   string
		sql    []string
		reseal bool
	}{
		{"TruncatedLastEvent", []string{`DELETE FROM airlock_audit WHERE seq = 12`}, false},
		{"TruncatedLastTen", []string{`DELETE FROM airlock_audit WHERE seq > 2`}, false},
		{"DeletedEverything", []string{`DELETE FROM airlock_audit`}, false},
		{"RewrittenTailSealedAgain", []string{
			`UPDATE airlock_audit SET seq = NULL, prev_hash = NULL, hash = NULL WHERE seq >= 10`,
			`UPDATE airlock_audit SET actor = 'someone-else' WHERE seq IS NULL`,
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			fill(t, s, 12)
			before, err := audit.Verify(ctx, s)
			must(t, err)
			if !before.OK || before.Head.Seq != 12 || len(before.Head.Hash) != 64 {
				t.Fatalf("before: %+v", before)
			}
			if head, err := s.AuditHead(ctx); err != nil || head != before.Head {
				t.Fatalf("AuditHead %+v %v, verify's head %+v", head, err, before.Head)
			}
			for _, q := range tc.sql {
				exec(t, s, q)
			}
			if tc.reseal {
				for {
					n, err := s.SealAudit(ctx, 100)
					must(t, err)
					if n == 0 {
						break
					}
				}
			}
			wants := []audit.Expect{{Head: before.Head.Hash}, {Head: before.Head.Hash[:12]}, {Count: before.Head.Seq}}
			if tc.reseal {
				wants = wants[:2] // as many events as before: only the head tells
			}
			for _, want := range wants {
				r, err := audit.VerifyExpecting(ctx, s, want)
				must(t, err)
				if r.OK || r.Problem == nil || r.Problem.Kind != "truncated" {
					t.Fatalf("expecting %+v: %+v %+v; want truncated", want, r, r.Problem)
				}
			}
			// Without the record, the shortened chain verifies: why the
			// head must be kept outside the database.
			if r, err := audit.Verify(ctx, s); err != nil || !r.OK {
				t.Fatalf("the tampered chain alone: %+v %v", r, err)
			}
		})
	}
	// An unsealed row older than the sealed head was not written by
	// airlock's insert: one inserted with an id of its choosing, or an
	// edited row whose seal was removed, is never sealed into the chain.
	for _, tc := range []struct {
		name, sql string
		ok        bool // the chain still verifies (only the forged row is extra)
	}{
		{"ForgedRowWithAnOldID", `INSERT INTO airlock_audit (id, at, kind, actor) SELECT -1, at, 'decided', 'mallory' FROM airlock_audit WHERE seq = 1`, true},
		{"EditedRowUnsealed", `UPDATE airlock_audit SET actor = 'mallory', seq = NULL, prev_hash = NULL, hash = NULL WHERE seq = 3`, false},
	} {
		t.Run("RowsOlderThanTheHeadAreNeverSealed/"+tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			fill(t, s, 5)
			exec(t, s, tc.sql)
			fill(t, s, 2) // later events are sealed; the old row is not
			if n, err := s.UnsealedAudit(ctx); err != nil || n != 1 {
				t.Fatalf("unsealed rows after sealing: %d %v; want the old row alone", n, err)
			}
			r, err := audit.Verify(ctx, s)
			must(t, err)
			if r.OK != tc.ok || (r.OK && r.Events != 7) || (!r.OK && (r.Problem == nil || r.Problem.Seq != 3)) {
				t.Fatalf("verify: %+v %+v", r, r.Problem)
			}
		})
	}
	// Writers commit in another order than their ids; a sealer running
	// meanwhile must still seal every event and strand none below the head.
	t.Run("ConcurrentWritersAreAllSealed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const writers, rounds, burst = 8, 40, 50
		stop := make(chan struct{})
		sealed := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					sealed <- nil
					return
				default:
				}
				if _, err := s.SealAudit(ctx, 1000); err != nil {
					sealed <- err
					return
				}
			}
		}()
		var wg sync.WaitGroup
		now := time.Now().UTC().Truncate(time.Microsecond)
		for w := range writers {
			wg.Go(func() {
				for i := range rounds {
					var err error
					if i%2 == 0 {
						// A burst: its ids are taken one by one while
						// other writers take theirs and commit.
						events := make([]*airlock.AuditEvent, burst)
						for j := range events {
							events[j] = &airlock.AuditEvent{At: now, Kind: airlock.EventRepeat, RunID: "r", Key: fmt.Sprint("e", w, i, j), Actor: "a"}
						}
						err = s.AppendAudit(ctx, events)
					} else {
						_, _, err = s.Claim(ctx, claimOf(Key("sealrace"), "o", now, time.Minute))
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		must(t, <-sealed)
		for {
			n, err := s.SealAudit(ctx, 100)
			must(t, err)
			if n == 0 {
				break
			}
		}
		r, err := audit.Verify(ctx, s)
		must(t, err)
		want := int64(writers * (rounds/2*1 + (rounds+1)/2*burst))
		if !r.OK || r.Unsealed != 0 || r.Events != want {
			t.Fatalf("after concurrent writes: %+v %+v; want %d events, all sealed", r, r.Problem, want)
		}
	})
	t.Run("ExpectationsOfAnIntactChainHold", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, 5)
		first, err := audit.Verify(ctx, s)
		must(t, err)
		fill(t, s, 5) // the chain grows past the recorded head
		r, err := audit.VerifyExpecting(ctx, s, audit.Expect{Head: first.Head.Hash, Count: first.Head.Seq})
		must(t, err)
		if !r.OK || r.Head.Seq != 10 {
			t.Fatalf("a chain that grew from the recorded head: %+v %+v", r, r.Problem)
		}
		if _, err := audit.VerifyExpecting(ctx, s, audit.Expect{Head: "abc"}); airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
			t.Fatalf("a too short head: %v", err)
		}
	})
	t.Run("Retention", func(t *testing.T) { t.Parallel(); RunRetention(t, newStore, exec) })
}

// RunAuditEvents checks that state changes write their events.
func RunAuditEvents(t *testing.T, newStore NewStore) {
	t.Run("ConcurrentCallsWriteEachEventOnce", func(t *testing.T) {
		t.Parallel()
		// Concurrent calls share write batches, whose events the drivers
		// insert together (SQLite in chunks of 1, 2, 4 … rows): every call
		// must still have exactly one claimed and one completed event.
		s := newStore(t)
		g := guard.New(s, nil)
		tool := Tool("approve", "forever")
		prefix := Key("WD")
		const calls = 157
		keys := make(chan string, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var c counter
				a, err := g.Do(context.Background(), call(tool, fmt.Sprintf(`{"record_id":"%s-%d"}`, prefix, i), "r"), c.fn)
				if err != nil {
					t.Error(err)
					return
				}
				keys <- a.Key
			}()
		}
		wg.Wait()
		g.Close()
		close(keys)
		want := map[string]bool{}
		for k := range keys {
			want[k] = true
		}
		for {
			n, err := s.SealAudit(context.Background(), 1000)
			must(t, err)
			if n == 0 {
				break
			}
		}
		events, err := s.AuditLog(context.Background(), &airlock.AuditLogParams{After: 0, Limit: 10 * calls})
		must(t, err)
		seen := map[string]int{}
		for _, e := range events {
			if want[e.Key] {
				seen[e.Kind+" "+e.Key]++
			}
		}
		for k := range want {
			if seen[airlock.EventClaimed+" "+k] != 1 || seen[airlock.EventCompleted+" "+k] != 1 {
				t.Fatalf("key %s: %d claimed and %d completed events, want one each",
					k, seen[airlock.EventClaimed+" "+k], seen[airlock.EventCompleted+" "+k])
			}
		}
		if len(want) != calls {
			t.Fatalf("%d calls answered, want %d", len(want), calls)
		}
	})

	t.Run("ARepeatBurstWritesEveryEvent", func(t *testing.T) {
		t.Parallel()
		// Repeats served from memory come far faster than a store writes
		// their events; a full buffer makes the callers wait for room, so
		// none is lost. The buffer here is tiny, so that it is full all
		// the time.
		s := newStore(t)
		// AuditWait is long: a loaded machine (the race detector on two
		// cores) may stall one write for longer than the default second,
		// and what is tested here is that callers wait, not for how long.
		g := guard.New(s, &guard.Config{AuditBuffer: 8, AuditWait: time.Minute})
		tool := Tool("approve", "forever")
		prefix := Key("WD")
		const keys, callers, repeatsEach = 10, 16, 250
		var c counter
		for k := range keys {
			_, err := g.Do(context.Background(), call(tool, fmt.Sprintf(`{"record_id":"%s-%d"}`, prefix, k), "r"), c.fn)
			must(t, err)
		}
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range repeatsEach {
					a, err := g.Do(context.Background(), call(tool, fmt.Sprintf(`{"record_id":"%s-%d"}`, prefix, (i+j)%keys), "r"), c.fn)
					if err != nil || !a.Repeat {
						t.Errorf("repeat: %+v, %v", a, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		g.Close()
		if n := g.AuditDropped(); n != 0 {
			t.Fatalf("%d events lost", n)
		}
		events, err := s.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Now().Add(-time.Hour), Limit: 100 * callers * repeatsEach})
		must(t, err)
		served := 0
		for _, e := range events {
			if e.Kind == airlock.EventRepeat && e.Tool == tool.Name && e.RunID == "r" {
				served++
			}
		}
		if served != callers*repeatsEach {
			t.Fatalf("%d repeat_served events written, want %d", served, callers*repeatsEach)
		}
	})

	t.Run("PoisonedRepeatsRefusedAndTheirNeighboursLogged", func(t *testing.T) {
		t.Parallel()
		// Every 100th repeat carries a run id no text column can hold (a
		// NUL, invalid UTF-8) or too long: each is refused before anything
		// is claimed or buffered, and every other repeat's event is
		// written — one agent cannot take the others' events down.
		s := newStore(t)
		g := guard.New(s, &guard.Config{AuditWait: time.Minute})
		tool := Tool("approve", "forever")
		args := fmt.Sprintf(`{"record_id":"%s"}`, Key("WD"))
		var c counter
		_, err := g.Do(context.Background(), call(tool, args, "r"), c.fn)
		must(t, err)
		poison := []string{"bad\x00run", "bad\xffrun", strings.Repeat("r", 257)}
		refused := 0
		for i := range 1000 {
			run := "r"
			if i%100 == 99 {
				run = poison[i/100%len(poison)]
			}
			a, err := g.Do(context.Background(), call(tool, args, run), c.fn)
			if run != "r" {
				var e *airlock.Error
				if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "run_id" {
					t.Fatalf("poisoned run id %q: %+v, %v; want invalid_argument naming run_id", run[:min(len(run), 12)], a, err)
				}
				refused++
				continue
			}
			if err != nil || !a.Repeat {
				t.Fatalf("repeat %d: %+v, %v", i, a, err)
			}
		}
		g.Close()
		if n := g.AuditDropped(); n != 0 {
			t.Fatalf("%d events lost", n)
		}
		events, err := s.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Now().Add(-time.Hour), Limit: 10000})
		must(t, err)
		served := 0
		for _, e := range events {
			if e.Kind == airlock.EventRepeat && e.Tool == tool.Name {
				if e.RunID != "r" {
					t.Fatalf("an event with run id %q was written", e.RunID)
				}
				served++
			}
		}
		if served != 1000-refused || c.n.Load() != 1 {
			t.Fatalf("%d repeat_served events for %d repeats; %d executions", served, 1000-refused, c.n.Load())
		}
	})

	t.Run("ChangesWriteTheirEvents", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		g := guard.New(s, nil)
		ctx := airlock.WithActor(context.Background(), "agent-1")
		tool := Tool("approve", "forever")
		var c counter
		args := `{"record_id":"` + Key("WD") + `"}`
		a, err := g.Do(ctx, call(tool, args, "run-9"), c.fn)
		must(t, err)
		_, err = g.Do(ctx, call(tool, args, "run-9"), c.fn) // a repeat: its event is written in the background
		must(t, err)
		g.Close() // flushes the buffered events
		for {
			n, err := s.SealAudit(context.Background(), 100)
			must(t, err)
			if n == 0 {
				break
			}
		}
		events, err := s.AuditLog(context.Background(), &airlock.AuditLogParams{After: 0, Limit: 100})
		must(t, err)
		var kinds []string
		for _, e := range events {
			if e.Key != a.Key {
				continue
			}
			kinds = append(kinds, e.Kind)
			if e.Actor != "agent-1" || e.RunID != "run-9" || e.Tool != tool.Name {
				t.Fatalf("event without its fields: %+v", e)
			}
			if e.Kind == airlock.EventClaimed && len(e.Args) == 0 || e.Kind == airlock.EventCompleted && string(e.Result) != string(a.Result) {
				t.Fatalf("event without arguments or result: %+v", e)
			}
		}
		if fmt.Sprint(kinds) != "[claimed completed repeat_served]" {
			t.Fatalf("events %v, want [claimed completed repeat_served]", kinds)
		}
		recent, err := s.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Now().Add(-time.Minute), Limit: 100})
		must(t, err)
		old, err := s.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Now().Add(time.Minute), Limit: 100})
		must(t, err)
		if len(recent) < 3 || len(old) != 0 {
			t.Fatalf("AuditSince: %d events in the last minute, %d in the future", len(recent), len(old))
		}
		trail, err := s.AuditTrail(context.Background(), airlock.AuditFilter{Key: a.Key})
		must(t, err)
		if len(trail) != 3 || trail[0].Kind != airlock.EventClaimed {
			t.Fatalf("the key's trail: %d events", len(trail))
		}
		page, err := s.AuditTrail(context.Background(), airlock.AuditFilter{Key: a.Key, After: trail[0].ID, Limit: 1})
		must(t, err)
		if len(page) != 1 || page[0].ID != trail[1].ID {
			t.Fatalf("a page after the first event: %+v", page)
		}
		for _, f := range []airlock.AuditFilter{{}, {Key: a.Key, Limit: 1_000_000_000}, {Key: a.Key, After: -1}} {
			if _, err := s.AuditTrail(context.Background(), f); airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
				t.Fatalf("filter %+v: %v, want invalid_argument", f, err)
			}
		}
	})

	t.Run("CompletionsCarryTheirOutcome", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		g := guard.New(s, nil)
		tool := Tool("approve", "forever")
		tool.Timeout = &airlock.Duration{Duration: 50 * time.Millisecond}
		ok := call(tool, `{"record_id":"`+Key("OK")+`"}`, "run-1")
		slow := call(tool, `{"record_id":"`+Key("SLOW")+`"}`, "run-1")
		_, err := g.Do(context.Background(), ok, func(context.Context, string) airlock.Outcome {
			time.Sleep(5 * time.Millisecond)
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}
		})
		must(t, err)
		a, err := g.Do(context.Background(), slow, func(ctx context.Context, _ string) airlock.Outcome {
			<-ctx.Done() // the upstream never answers within the timeout
			return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: ctx.Err()}
		})
		must(t, err)
		if a.Status != airlock.StatusInDoubt {
			t.Fatalf("a timed-out call: %+v", a)
		}
		g.Close()
		_, err = s.SealAudit(context.Background(), 100)
		must(t, err)
		events, err := s.AuditLog(context.Background(), &airlock.AuditLogParams{After: 0, Limit: 100})
		must(t, err)
		var done []*airlock.AuditEvent
		for _, e := range events {
			if e.Kind == airlock.EventCompleted || e.Kind == airlock.EventInDoubt {
				done = append(done, e)
			}
		}
		if len(done) != 2 {
			t.Fatalf("completions: %+v", done)
		}
		first, second := done[0], done[1]
		if first.Outcome != airlock.OutcomeTextSucceeded || first.TimedOut || first.DurationUS < 5000 {
			t.Errorf("a call that succeeded: %+v", first)
		}
		if second.Outcome != airlock.OutcomeTextUnknown || !second.TimedOut || second.DurationUS < 50000 {
			t.Errorf("a call that timed out: %+v", second)
		}
		// The fields are in the chain: changing one breaks verification.
		if first.ChainHash(first.PrevHash) != first.Hash {
			t.Errorf("hash of a sealed completion does not verify")
		}
		changed := *first
		changed.TimedOut = true
		if changed.ChainHash(first.PrevHash) == first.Hash {
			t.Errorf("timed_out is not covered by the chain")
		}
	})
}
