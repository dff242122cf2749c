package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/maintenance"
	"github.com/jonboulle/clockwork"
)

// Tool returns a write tool for tests: natural key record_id (trim, upper),
// the given window.
func Tool(name, window string) *airlock.Tool {
	var w airlock.Window
	_ = w.UnmarshalText([]byte(window))
	return &airlock.Tool{
		Name: name, Kind: airlock.KindWrite, Window: &w,
		NaturalKey: []airlock.KeyField{{Field: "record_id", Normalize: []string{"trim", "upper"}}},
		OnMismatch: airlock.MismatchReplay,
		Answers:    airlock.Answers{Undo: "yes", Approver: "nobody", OnRepeat: "first result"},
	}
}

type bundle struct {
	store  airlock.Store
	guard  *guard.Guard
	reaper *guard.Reaper // not started: tests run its passes
	ctx    context.Context
}

func setup(t *testing.T, newStore NewStore, cfg *guard.Config) *bundle {
	t.Helper()
	s := newStore(t)
	g := guard.New(s, cfg)
	t.Cleanup(g.Close)
	return &bundle{store: s, guard: g, reaper: guard.NewReaper(g, nil), ctx: context.Background()}
}

// counter is a side effect that counts its executions.
type counter struct {
	n       atomic.Int64
	delay   time.Duration
	outcome airlock.Outcome
}

func (c *counter) fn(ctx context.Context, key string) airlock.Outcome {
	n := c.n.Add(1)
	if c.delay > 0 {
		select {
		case <-time.After(c.delay):
		case <-ctx.Done():
			return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: ctx.Err()}
		}
	}
	if c.outcome.Kind != 0 {
		return c.outcome
	}
	return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(fmt.Sprintf(`{"execution":%d,"key_seen":%t}`, n, key != ""))}
}

func call(tool *airlock.Tool, args, run string) *airlock.Call {
	return &airlock.Call{Tool: tool, Args: airlock.MustArgs(args), RunID: run}
}

func runGuard(t *testing.T, newStore NewStore) {
	for _, cache := range []struct {
		name string
		size int
	}{{"Cached", 0}, {"Uncached", -1}} {
		t.Run(cache.name, func(t *testing.T) {
			t.Parallel()
			runGuardTable(t, newStore, cache.size)
		})
	}
	runGuardLifecycle(t, newStore)
}

// runGuardTable covers each row of the table in docs/concepts.md, "The guarded call".
func runGuardTable(t *testing.T, newStore NewStore, cacheSize int) {
	cfg := func() *guard.Config { return &guard.Config{CacheSize: cacheSize} }

	t.Run("FirstCallThenRepeat", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		var c counter
		id := Key("WD")
		a1, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","note":"x"}`, "r1"), c.fn)
		must(t, err)
		if a1.Status != airlock.StatusSucceeded || a1.Repeat || !strings.Contains(string(a1.Result), `"execution":1`) || a1.Key == "" {
			t.Fatalf("first answer: %+v", a1)
		}
		// Same work, other field order, whitespace and case.
		a2, err := b.guard.Do(b.ctx, call(tool, `{ "note":"x", "record_id":"  `+strings.ToLower(id)+` " }`, "r2"), c.fn)
		must(t, err)
		if a2.Status != airlock.StatusSucceeded || !a2.Repeat || string(a2.Result) != string(a1.Result) {
			t.Fatalf("repeat answer: %+v", a2)
		}
		if a2.Conflict != nil {
			t.Fatalf("a record_id that normalizes alike is the same work, not a conflict: %+v", a2.Conflict)
		}
		// Another value of a field outside the key is a conflict.
		a3, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","note":"y"}`, "r3"), c.fn)
		must(t, err)
		if !a3.Repeat || a3.Conflict == nil || strings.Join(a3.Conflict.Fields, ",") != "note" {
			t.Fatalf("repeat with another note should name it: %+v", a3.Conflict)
		}
		if n := c.n.Load(); n != 1 {
			t.Fatalf("executions = %d, want 1", n)
		}
		rec, err := b.store.Get(b.ctx, a1.Key)
		must(t, err)
		if rec.State != airlock.StateSucceeded {
			t.Fatalf("record state %s", rec.State)
		}
	})

	t.Run("ExactRepeatHasNoConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		var c counter
		args := `{"record_id":"` + Key("WD") + `","amount":"10"}`
		_, err := b.guard.Do(b.ctx, call(tool, args, "r1"), c.fn)
		must(t, err)
		a, err := b.guard.Do(b.ctx, call(tool, args, "r1"), c.fn)
		must(t, err)
		if !a.Repeat || a.Conflict != nil {
			t.Fatalf("exact repeat: %+v", a)
		}
	})

	t.Run("DefinitiveFailureIsReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		c := counter{outcome: airlock.Outcome{Kind: airlock.OutcomeFailed, Result: json.RawMessage(`{"error":"insufficient funds"}`)}}
		args := `{"record_id":"` + Key("WD") + `"}`
		a1, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		a2, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a1.Status != airlock.StatusFailed || a1.Repeat || a2.Status != airlock.StatusFailed || !a2.Repeat ||
			string(a2.Result) != `{"error":"insufficient funds"}` || c.n.Load() != 1 {
			t.Fatalf("failure: first %+v, repeat %+v, executions %d", a1, a2, c.n.Load())
		}
	})

	t.Run("RunningRepeatWaitsForTheResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		c := counter{delay: 300 * time.Millisecond}
		args := `{"record_id":"` + Key("WD") + `"}`
		first := make(chan *airlock.Answer, 1)
		go func() {
			a, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
			if err != nil {
				t.Error(err)
			}
			first <- a
		}()
		waitExecutions(t, &c, 1)
		a2, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		a1 := <-first
		if a2.Status != airlock.StatusSucceeded || !a2.Repeat || string(a2.Result) != string(a1.Result) || c.n.Load() != 1 {
			t.Fatalf("waiting repeat: %+v (first %+v), executions %d", a2, a1, c.n.Load())
		}
	})

	t.Run("RunningRepeatPastRepeatWaitIsInProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		wait := airlock.NewDuration(50 * time.Millisecond)
		tool.RepeatWait = &wait
		c := counter{delay: 700 * time.Millisecond}
		args := `{"record_id":"` + Key("WD") + `"}`
		go func() { _, _ = b.guard.Do(b.ctx, call(tool, args, "r"), c.fn) }()
		waitExecutions(t, &c, 1)
		a, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusInProgress || !a.Repeat || a.Message != airlock.MessageInProgress {
			t.Fatalf("answer past repeat_wait: %+v", a)
		}
		// A repeat with other arguments is not told it was identical.
		other := strings.Replace(args, "}", `,"amount":5}`, 1)
		a, err = b.guard.Do(b.ctx, call(tool, other, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusInProgress || a.Conflict == nil || a.Message != airlock.MessageInProgressOther || strings.Contains(a.Message, "identical") {
			t.Fatalf("a repeat with other arguments past repeat_wait: %+v", a)
		}
		b.guard.Wait()
		a, err = b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || !a.Repeat || c.n.Load() != 1 {
			t.Fatalf("after completion: %+v, executions %d", a, c.n.Load())
		}
	})

	t.Run("OutcomeUnknownGoesInDoubt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever") // does not honour keys
		c := counter{outcome: airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: errors.New("upstream timed out")}}
		args := `{"record_id":"` + Key("WD") + `"}`
		a1, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		a2, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a1.Status != airlock.StatusInDoubt || a2.Status != airlock.StatusInDoubt || !a2.Repeat || !strings.Contains(a2.Message, "Do not retry") {
			t.Fatalf("in doubt: first %+v, repeat %+v", a1, a2)
		}
		if c.n.Load() != 1 {
			t.Fatalf("an in-doubt call was retried: executions %d", c.n.Load())
		}
		rec, err := b.store.Get(b.ctx, a1.Key)
		must(t, err)
		if rec.State != airlock.StateInDoubt || !strings.Contains(rec.Note, "upstream timed out") {
			t.Fatalf("record: %+v", rec)
		}
	})

	t.Run("OutcomeUnknownIsRedrivenWhenKeysAreHonoured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, &guard.Config{CacheSize: cacheSize, RetryBackoff: time.Millisecond})
		tool := Tool("approve", "forever")
		tool.HonorsKey = true
		var n atomic.Int64
		keys := make(chan string, 8)
		fn := func(ctx context.Context, key string) airlock.Outcome {
			keys <- key
			if n.Add(1) < 3 {
				return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: errors.New("503")}
			}
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`"done"`)}
		}
		a, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+Key("WD")+`"}`, "r"), fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || n.Load() != 3 {
			t.Fatalf("re-driven: %+v after %d attempts", a, n.Load())
		}
		close(keys)
		for k := range keys {
			if k != a.Key {
				t.Fatalf("re-drive used key %q, want the same key %q", k, a.Key)
			}
		}
	})

	t.Run("NotSentReleasesTheClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		args := `{"record_id":"` + Key("WD") + `"}`
		c := counter{outcome: airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: errors.New("connection refused")}}
		_, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		if !errors.Is(err, airlock.ErrNotSent) || !strings.Contains(err.Error(), "Nothing was done") {
			t.Fatalf("not sent: %v", err)
		}
		var ok counter
		a, err := b.guard.Do(b.ctx, call(tool, args, "r"), ok.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || a.Repeat || ok.n.Load() != 1 {
			t.Fatalf("after not sent, the next call must run: %+v", a)
		}
	})

	t.Run("WaiterOnAReleasedClaimDoesTheWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		args := `{"record_id":"` + Key("WD") + `"}`
		started := make(chan struct{})
		release := make(chan struct{})
		first := func(context.Context, string) airlock.Outcome {
			close(started)
			<-release
			return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: errors.New("connection refused")}
		}
		errc := make(chan error, 1)
		go func() {
			_, err := b.guard.Do(b.ctx, call(tool, args, "r"), first)
			errc <- err
		}()
		<-started
		var second counter
		done := make(chan *airlock.Answer, 1)
		go func() {
			a, err := b.guard.Do(b.ctx, call(tool, args, "r"), second.fn) // waits on the running claim
			if err != nil {
				t.Error(err)
			}
			done <- a
		}()
		time.Sleep(50 * time.Millisecond)
		close(release)
		if err := <-errc; !errors.Is(err, airlock.ErrNotSent) {
			t.Fatalf("first: %v", err)
		}
		a := <-done
		if a == nil || a.Status != airlock.StatusSucceeded || second.n.Load() != 1 {
			t.Fatalf("the waiter on a released claim must do the work: %+v, executions %d", a, second.n.Load())
		}
	})

	t.Run("MismatchReplayNamesTheFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		var c counter
		id := Key("WD")
		a1, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","amount":100,"payee":{"account":"1","name":"A"}}`, "r"), c.fn)
		must(t, err)
		a2, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","amount":900,"payee":{"account":"1","name":"B"},"memo":"x"}`, "r"), c.fn)
		must(t, err)
		if !a2.Repeat || string(a2.Result) != string(a1.Result) || a2.Conflict == nil ||
			strings.Join(a2.Conflict.Fields, ",") != "amount,memo,payee.name" || c.n.Load() != 1 {
			t.Fatalf("mismatch: %+v conflict %+v", a2, a2.Conflict)
		}
	})

	t.Run("MismatchReject", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		tool.OnMismatch = airlock.MismatchReject
		var c counter
		id := Key("WD")
		_, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","amount":100}`, "r"), c.fn)
		must(t, err)
		_, err = b.guard.Do(b.ctx, call(tool, `{"record_id":"`+id+`","amount":900}`, "r"), c.fn)
		var e *airlock.Error
		if !errors.As(err, &e) || e.Code != airlock.CodeArgumentsMismatch || e.Field != "amount" || c.n.Load() != 1 {
			t.Fatalf("reject: %v", err)
		}
	})

	t.Run("CallerGivingUpDoesNotCancelTheSideEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		c := counter{delay: 300 * time.Millisecond}
		args := `{"record_id":"` + Key("WD") + `"}`
		// The caller gives up once its side effect has begun (a timer
		// could end it before the claim, on a loaded machine).
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		a, err := b.guard.Do(ctx, call(tool, args, "r"), func(ctx context.Context, key string) airlock.Outcome {
			cancel()
			return c.fn(ctx, key)
		})
		must(t, err)
		if a.Status != airlock.StatusInProgress || a.Repeat || a.Message != airlock.MessageStillRunning {
			t.Fatalf("caller timeout: %+v", a)
		}
		b.guard.Wait()
		a, err = b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || !a.Repeat || c.n.Load() != 1 {
			t.Fatalf("after the caller gave up: %+v, executions %d", a, c.n.Load())
		}
	})

	t.Run("MCPContentIsKeptForRepeats", func(t *testing.T) {
		t.Parallel()
		content := `{"content":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"structuredContent":{"ok":true}}`
		for _, kind := range []airlock.OutcomeKind{airlock.OutcomeSucceeded, airlock.OutcomeFailed} {
			b := setup(t, newStore, cfg())
			tool := Tool("approve", "forever")
			c := counter{outcome: airlock.Outcome{Kind: kind, Result: json.RawMessage(`{"ok":true}`), Content: json.RawMessage(content)}}
			args := `{"record_id":"` + Key("WD") + `"}`
			first, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
			must(t, err)
			// A fresh guard has no cache: the repeat reads the record.
			fresh := guard.New(b.store, nil)
			repeat, err := fresh.Do(b.ctx, call(tool, args, "r"), c.fn)
			fresh.Close()
			must(t, err)
			for _, a := range []*airlock.Answer{first, repeat} {
				if string(a.Content) != content || string(a.Result) != `{"ok":true}` {
					t.Errorf("%v: answer content %s result %s", kind, a.Content, a.Result)
				}
			}
			if !repeat.Repeat || c.n.Load() != 1 {
				t.Errorf("%v: repeat %+v after %d executions", kind, repeat, c.n.Load())
			}
			rec, err := b.store.Get(b.ctx, first.Key)
			must(t, err)
			if string(rec.Content) != content {
				t.Errorf("%v: the record's content %s", kind, rec.Content)
			}
		}
	})

	t.Run("RespondWithin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		rw := airlock.NewDuration(50 * time.Millisecond)
		tool.RespondWithin = &rw
		c := counter{delay: 300 * time.Millisecond}
		args := `{"record_id":"` + Key("WD") + `"}`
		start := time.Now()
		a, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusInProgress || a.Message != airlock.MessageStillRunning || time.Since(start) > 250*time.Millisecond {
			t.Fatalf("respond_within: %+v after %v", a, time.Since(start))
		}
		b.guard.Wait()
		a, err = b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || !a.Repeat || c.n.Load() != 1 {
			t.Fatalf("after respond_within: %+v", a)
		}
	})

	t.Run("BadInputRunsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, cfg())
		tool := Tool("approve", "forever")
		runTool := Tool("approve_run", "run")
		var c counter
		for _, tc := range []struct {
			name  string
			tool  *airlock.Tool
			args  string
			run   string
			code  airlock.Code
			field string
		}{
			{"missing field", tool, `{"amount":1}`, "r", airlock.CodeMissingField, "record_id"},
			{"empty field", tool, `{"record_id":"   "}`, "r", airlock.CodeMissingField, "record_id"},
			{"null field", tool, `{"record_id":null}`, "r", airlock.CodeMissingField, "record_id"},
			{"object field", tool, `{"record_id":{"a":1}}`, "r", airlock.CodeInvalidArgument, "record_id"},
			{"malformed JSON", tool, `{"record_id":`, "r", airlock.CodeInvalidArgument, "args"},
			{"not an object", tool, `[1,2]`, "r", airlock.CodeInvalidArgument, "args"},
			{"run window without run", runTool, `{"record_id":"A"}`, "", airlock.CodeMissingField, "run_id"},
		} {
			// Malformed arguments are refused where they are parsed (the
			// edge); the rest by the guard.
			args, err := airlock.NewArgs([]byte(tc.args))
			if err == nil {
				_, err = b.guard.Do(b.ctx, &airlock.Call{Tool: tc.tool, Args: args, RunID: tc.run}, c.fn)
			}
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field || !strings.Contains(e.Message, "nothing was executed") && tc.field != "args" {
				t.Errorf("%s: got %v (%+v), want code %s field %s", tc.name, err, e, tc.code, tc.field)
			}
		}
		if c.n.Load() != 0 {
			t.Fatalf("bad input executed %d times", c.n.Load())
		}
	})
}

func waitExecutions(t *testing.T, c *counter, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.n.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("side effect did not start")
		}
		time.Sleep(time.Millisecond)
	}
}

func runGuardLifecycle(t *testing.T, newStore NewStore) {
	t.Run("StoreDownRefusesAndRunsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		g := guard.New(s, nil)
		defer g.Close()
		must(t, s.Close())
		var c counter
		_, err := g.Do(context.Background(), call(Tool("approve", "forever"), `{"record_id":"A"}`, "r"), c.fn)
		if !errors.Is(err, airlock.ErrStoreUnavailable) || c.n.Load() != 0 {
			t.Fatalf("store down: err %v, executions %d", err, c.n.Load())
		}
	})

	t.Run("ExpiredLeaseGoesInDoubtThenSettle", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := Tool("approve", "forever")
		for _, happened := range []bool{true, false} {
			args := `{"record_id":"` + Key("WD") + `"}`
			d, err := b.guard.Derive(call(tool, args, "r"))
			must(t, err)
			// A process claimed and died: its lease ran out a second ago.
			now := time.Now()
			_, _, err = b.store.Claim(b.ctx, &airlock.Claim{Key: d.Key, Tool: tool.Name, RunID: "r", WindowID: "forever",
				Args: json.RawMessage(args), ArgsHash: airlock.ArgsHash([]byte(args)), Owner: "dead", Now: now.Add(-time.Minute), LeaseUntil: now.Add(-time.Second)})
			must(t, err)
			st, err := b.reaper.Reap(b.ctx)
			must(t, err)
			if st.InDoubt < 1 {
				t.Fatalf("reaper: %+v", st)
			}
			var c counter
			a, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
			must(t, err)
			if a.Status != airlock.StatusInDoubt || !a.Repeat || c.n.Load() != 0 {
				t.Fatalf("repeat of an in-doubt record: %+v, executions %d", a, c.n.Load())
			}
			// Only an admin (or airlock's own reconciliation) settles, whatever
			// the front end; a refused settlement changes nothing.
			for _, role := range []string{airlock.RoleAgent, airlock.RoleApprover, ""} {
				_, err := b.guard.Settle(b.ctx, airlock.SettleRequest{Key: d.Key, Happened: happened, Note: "checked", By: "mallory", Role: role})
				if airlock.ErrorCode(err) != airlock.CodeForbidden {
					t.Fatalf("settling as %q: %v, want forbidden", role, err)
				}
				if rec, err := b.store.Get(b.ctx, d.Key); err != nil || rec.State != airlock.StateInDoubt {
					t.Fatalf("after a refused settlement: %+v, %v", rec, err)
				}
			}
			rec, err := b.guard.Settle(b.ctx, airlock.SettleRequest{Key: d.Key, Happened: happened, Result: json.RawMessage(`{"settled":true}`), Note: "checked the ledger", By: "alice", Role: airlock.RoleAdmin})
			must(t, err)
			a, err = b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
			must(t, err)
			if happened {
				if rec.State != airlock.StateSucceeded || a.Status != airlock.StatusSucceeded || !a.Repeat || string(a.Result) != `{"settled":true}` || c.n.Load() != 0 {
					t.Fatalf("settled as happened: %+v, executions %d", a, c.n.Load())
				}
			} else if a.Status != airlock.StatusSucceeded || a.Repeat || c.n.Load() != 1 {
				t.Fatalf("settled as not happened, the next call must run: %+v, executions %d", a, c.n.Load())
			}
		}
	})

	t.Run("ALostReplyIsNotALostWrite", func(t *testing.T) {
		t.Parallel()
		// The database commits a claim, then a completion, but the reply
		// is lost each time and the store, retrying, finds the key taken
		// and then the record no longer running: the call must still run
		// once and end succeeded, not wait for itself or go in doubt.
		s := &lostReplies{Store: newStore(t)}
		g := guard.New(s, nil)
		t.Cleanup(g.Close)
		ctx := context.Background()
		tool := Tool("approve", "forever")
		args := `{"record_id":"` + Key("WD") + `"}`
		var c counter
		a, err := g.Do(ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || a.Repeat || c.n.Load() != 1 || !s.claimLost.Load() || !s.completeLost.Load() {
			t.Fatalf("first call with lost replies: %+v, executions %d, replies lost: claim %v completion %v",
				a, c.n.Load(), s.claimLost.Load(), s.completeLost.Load())
		}
		rec, err := s.Get(ctx, a.Key)
		must(t, err)
		if rec.State != airlock.StateSucceeded {
			t.Fatalf("record: %+v", rec)
		}
		a, err = g.Do(ctx, call(tool, args, "r"), c.fn)
		must(t, err)
		if a.Status != airlock.StatusSucceeded || !a.Repeat || c.n.Load() != 1 {
			t.Fatalf("repeat: %+v, executions %d", a, c.n.Load())
		}
	})

	t.Run("HeartbeatsKeepALongCallsLease", func(t *testing.T) {
		t.Parallel()
		// The side effect runs for four leases of the guard's clock; a
		// reaper of another replica sweeps at every step. Heartbeats must
		// keep the record running, and the call end succeeded with one
		// execution. The clock is advanced by hand and the test waits on
		// what the store holds, never on a sleep.
		const lease, step = 3 * time.Second, 500 * time.Millisecond // the keeper looks every lease/6
		clock := clockwork.NewFakeClockAt(time.Now())
		b := setup(t, newStore, &guard.Config{Lease: lease, Clock: clock})
		other := guard.New(b.store, &guard.Config{Lease: lease, Clock: clock})
		t.Cleanup(other.Close)
		reaper := guard.NewReaper(other, nil)
		tool := Tool("approve", "forever")
		args := `{"record_id":"` + Key("WD") + `"}`
		d, err := b.guard.Derive(call(tool, args, "r"))
		must(t, err)
		var runs atomic.Int64
		started, finish := make(chan struct{}), make(chan struct{})
		var finished sync.Once
		end := func() { finished.Do(func() { close(finish) }) }
		defer end() // a failing step must not leave the call (and Close) waiting
		fn := func(ctx context.Context, _ string) airlock.Outcome {
			runs.Add(1)
			close(started)
			<-finish
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}
		}
		done := make(chan *airlock.Answer, 1)
		go func() {
			a, err := b.guard.Do(b.ctx, call(tool, args, "r"), fn)
			if err != nil {
				t.Error(err)
			}
			done <- a
		}()
		<-started
		// Waiters on the clock: two audit buffers' flush tickers, the
		// tool's timeout and the lease keeper's ticker.
		wctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		must(t, clock.BlockUntilContext(wctx, 4))
		claimed := clock.Now()
		leaseUntil := func() time.Time {
			rec, err := b.store.Get(b.ctx, d.Key)
			must(t, err)
			if rec.State != airlock.StateRunning {
				t.Fatalf("record during the call: %+v", rec)
			}
			return rec.LeaseUntil
		}
		for k := 1; k <= int(4*lease/step); k++ {
			clock.Advance(step)
			if k%2 == 0 {
				// A renewal was due (lease/3 after the last): wait for it.
				want := claimed.Add(time.Duration(k) * step).Add(lease)
				for !leaseUntil().Equal(want.Truncate(time.Microsecond)) {
					if wctx.Err() != nil {
						t.Fatalf("step %d: lease until %v, want %v (renewed at the clock's time)", k, leaseUntil(), want)
					}
					runtime.Gosched()
				}
			}
			st, err := reaper.Reap(b.ctx)
			must(t, err)
			if st.InDoubt != 0 || st.Redriven != 0 {
				t.Fatalf("step %d: the reaper took a record whose owner was heartbeating: %+v", k, st)
			}
		}
		end()
		a := <-done
		if a == nil || a.Status != airlock.StatusSucceeded || runs.Load() != 1 {
			t.Fatalf("long call: %+v, executions %d", a, runs.Load())
		}
		rec, err := b.store.Get(b.ctx, d.Key)
		must(t, err)
		if rec.State != airlock.StateSucceeded {
			t.Fatalf("record after a long call: %+v", rec)
		}
	})

	t.Run("ReaperRunsOnTheGuardsClockUntilStopped", func(t *testing.T) {
		t.Parallel()
		// Started, the reaper passes every Interval of the guard's clock:
		// nothing happens until the clock moves, and after Stop nothing more.
		clock := clockwork.NewFakeClockAt(time.Now())
		b := setup(t, newStore, &guard.Config{Clock: clock})
		r := guard.NewReaper(b.guard, &guard.ReaperConfig{Interval: time.Minute})
		tool := Tool("approve", "forever")
		claimDead := func() string {
			args := `{"record_id":"` + Key("WD") + `"}`
			d, err := b.guard.Derive(call(tool, args, "r"))
			must(t, err)
			now := clock.Now()
			_, _, err = b.store.Claim(b.ctx, &airlock.Claim{Key: d.Key, Tool: tool.Name, RunID: "r", WindowID: "forever",
				Args: json.RawMessage(args), ArgsHash: airlock.ArgsHash([]byte(args)), Owner: "dead", Now: now.Add(-time.Minute), LeaseUntil: now.Add(-time.Second)})
			must(t, err)
			return d.Key
		}
		state := func(key string) airlock.State {
			rec, err := b.store.Get(b.ctx, key)
			must(t, err)
			return rec.State
		}
		first := claimDead()
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		must(t, r.Start(ctx))
		if err := r.Start(ctx); !errors.Is(err, maintenance.ErrStarted) {
			t.Fatalf("a second Start: %v, want ErrStarted", err)
		}
		must(t, clock.BlockUntilContext(ctx, 2)) // the audit buffer's ticker and the reaper's
		if got := state(first); got != airlock.StateRunning {
			t.Fatalf("before the interval passed: %s, want running", got)
		}
		clock.Advance(time.Minute)
		for state(first) != airlock.StateInDoubt {
			if ctx.Err() != nil {
				t.Fatalf("the started reaper did not pass: %s", state(first))
			}
			runtime.Gosched()
		}
		r.Stop()
		r.Stop() // stopping again is nothing
		second := claimDead()
		clock.Advance(2 * time.Minute) // Stop returned once its loop had: no pass can follow
		if got := state(second); got != airlock.StateRunning {
			t.Fatalf("after Stop: %s, want running", got)
		}
	})

	t.Run("ReaperRedrivesWhenKeysAreHonoured", func(t *testing.T) {
		t.Parallel()
		tool := Tool("approve", "forever")
		tool.HonorsKey = true
		var c counter
		b := setup(t, newStore, nil)
		b.reaper = guard.NewReaper(b.guard, &guard.ReaperConfig{Redrive: func(rec *airlock.Record) (*airlock.Tool, airlock.SideEffect, bool) {
			return tool, c.fn, rec.Tool == tool.Name
		}})
		args := `{"record_id":"` + Key("WD") + `"}`
		d, err := b.guard.Derive(call(tool, args, "r"))
		must(t, err)
		now := time.Now()
		_, _, err = b.store.Claim(b.ctx, &airlock.Claim{Key: d.Key, Tool: tool.Name, RunID: "r", WindowID: "forever",
			Args: json.RawMessage(args), ArgsHash: airlock.ArgsHash([]byte(args)), Owner: "dead", Now: now, LeaseUntil: now.Add(-time.Second)})
		must(t, err)
		st, err := b.reaper.Reap(b.ctx)
		must(t, err)
		b.guard.Wait()
		rec, err := b.store.Get(b.ctx, d.Key)
		must(t, err)
		if st.Redriven != 1 || rec.State != airlock.StateSucceeded || rec.Attempts != 2 || c.n.Load() != 1 {
			t.Fatalf("re-drive: stats %+v record %+v executions %d", st, rec, c.n.Load())
		}
	})

	t.Run("ManyReapersAtOnce", func(t *testing.T) {
		t.Parallel()
		tool := Tool("approve", "forever")
		tool.HonorsKey = true
		s := newStore(t)
		ctx := context.Background()
		for _, redrive := range []bool{false, true} {
			var c counter
			cfg := &guard.ReaperConfig{}
			if redrive {
				cfg.Redrive = func(rec *airlock.Record) (*airlock.Tool, airlock.SideEffect, bool) { return tool, c.fn, true }
			}
			const replicas = 8
			guards := make([]*guard.Guard, replicas)
			reapers := make([]*guard.Reaper, replicas)
			for i := range guards {
				guards[i] = guard.New(s, nil)
				defer guards[i].Close()
				reapers[i] = guard.NewReaper(guards[i], cfg)
			}
			args := `{"record_id":"` + Key("WD") + `"}`
			d, err := guards[0].Derive(call(tool, args, "r"))
			must(t, err)
			now := time.Now()
			_, _, err = s.Claim(ctx, &airlock.Claim{Key: d.Key, Tool: tool.Name, RunID: "r", WindowID: "forever",
				Args: json.RawMessage(args), ArgsHash: airlock.ArgsHash([]byte(args)), Owner: "dead", Now: now, LeaseUntil: now.Add(-time.Second)})
			must(t, err)
			var inDoubt, redriven atomic.Int64
			var wg sync.WaitGroup
			for _, r := range reapers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := r.Reap(ctx)
					if err != nil {
						t.Error(err)
					}
					inDoubt.Add(int64(st.InDoubt))
					redriven.Add(int64(st.Redriven))
				}()
			}
			wg.Wait()
			for _, g := range guards {
				g.Wait()
			}
			rec, err := s.Get(ctx, d.Key)
			must(t, err)
			if redrive {
				if redriven.Load() != 1 || inDoubt.Load() != 0 || c.n.Load() != 1 || rec.State != airlock.StateSucceeded {
					t.Fatalf("%d reapers re-driving: redriven %d, in doubt %d, executions %d, record %s", replicas, redriven.Load(), inDoubt.Load(), c.n.Load(), rec.State)
				}
			} else if inDoubt.Load() != 1 || rec.State != airlock.StateInDoubt {
				t.Fatalf("%d reapers: in doubt %d, record %s; want exactly one move to in_doubt", replicas, inDoubt.Load(), rec.State)
			}
		}
	})

	t.Run("MaxCallsPerRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := Tool("note", "forever")
		tool.MaxCallsPerRun = 3
		var c counter
		run := Key("run")
		for i := range 3 {
			a, err := b.guard.Do(b.ctx, call(tool, fmt.Sprintf(`{"record_id":"%s-%d"}`, run, i), run), c.fn)
			must(t, err)
			if a.Repeat {
				t.Fatalf("call %d: %+v", i, a)
			}
		}
		_, err := b.guard.Do(b.ctx, call(tool, fmt.Sprintf(`{"record_id":"%s-3"}`, run), run), c.fn)
		if airlock.ErrorCode(err) != airlock.CodeBudgetExceeded || !strings.Contains(err.Error(), "max_calls_per_run") {
			t.Fatalf("fourth call: %v, want budget_exceeded", err)
		}
		// A repeat of an earlier call is not refused.
		a, err := b.guard.Do(b.ctx, call(tool, fmt.Sprintf(`{"record_id":"%s-1"}`, run), run), c.fn)
		must(t, err)
		if !a.Repeat || c.n.Load() != 3 {
			t.Fatalf("repeat past the budget: %+v, executions %d", a, c.n.Load())
		}
		// Another run has its own budget.
		_, err = b.guard.Do(b.ctx, call(tool, fmt.Sprintf(`{"record_id":"%s-9"}`, run), run+"-other"), c.fn)
		must(t, err)
	})

	t.Run("KeyedCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := Tool("http:POST /pay", "forever")
		tool.OnMismatch = airlock.MismatchReject
		var c counter
		key := Key("idem")
		for i := range 2 {
			a, err := b.guard.DoKeyed(b.ctx, &airlock.KeyedCall{Tool: tool, Key: key, Args: airlock.MustArgs(`{"amount":5}`)}, c.fn)
			must(t, err)
			if a.Repeat != (i == 1) || c.n.Load() != 1 {
				t.Fatalf("keyed call %d: %+v, executions %d", i, a, c.n.Load())
			}
		}
		_, err := b.guard.DoKeyed(b.ctx, &airlock.KeyedCall{Tool: tool, Key: key, Args: airlock.MustArgs(`{"amount":6}`)}, c.fn)
		if airlock.ErrorCode(err) != airlock.CodeArgumentsMismatch {
			t.Fatalf("other payload, same key: %v", err)
		}
	})

	t.Run("WindowBoundaryAndGrace", func(t *testing.T) {
		t.Parallel()
		ny, _ := time.LoadLocation("America/New_York")
		clock := clockwork.NewFakeClockAt(time.Date(2026, 9, 17, 16, 59, 59, 0, ny)) // Thursday
		b := setup(t, newStore, &guard.Config{Clock: clock})
		tool := Tool("approve", "business_day")
		cal := &airlock.Calendar{Timezone: airlock.NewTimezone("America/New_York"), Cutoff: &airlock.ClockTime{Minutes: 17 * 60}}
		var c counter
		id := Key("WD")
		do := func(at time.Time, run string) *airlock.Answer {
			clock.Advance(at.Sub(clock.Now()))
			a, err := b.guard.Do(b.ctx, &airlock.Call{Tool: tool, Calendar: cal, Args: airlock.MustArgs(`{"record_id":"` + id + `"}`), RunID: run}, c.fn)
			must(t, err)
			return a
		}
		first := do(time.Date(2026, 9, 17, 16, 59, 59, 0, ny), "run-a")
		if first.Repeat || c.n.Load() != 1 {
			t.Fatalf("first: %+v", first)
		}
		if a := do(time.Date(2026, 9, 17, 17, 0, 5, 0, ny), "run-a"); !a.Repeat || a.Key != first.Key {
			t.Fatalf("same run within grace after the cutoff must be a repeat: %+v", a)
		}
		if a := do(time.Date(2026, 9, 17, 17, 0, 6, 0, ny), "run-b"); a.Repeat {
			t.Fatalf("another run after the cutoff is new work: %+v", a)
		}
		if c.n.Load() != 2 {
			t.Fatalf("executions %d, want 2", c.n.Load())
		}
		if a := do(time.Date(2026, 9, 18, 10, 0, 0, 0, ny), "run-a"); !a.Repeat {
			t.Fatalf("run-a on Friday morning repeats run-b's Friday work: %+v", a)
		}
		if a := do(time.Date(2026, 9, 18, 17, 10, 1, 0, ny), "run-c"); a.Repeat || c.n.Load() != 3 {
			t.Fatalf("past grace, a new business day is new work: %+v", a)
		}
	})

	t.Run("ReapPurgesPastRetention", func(t *testing.T) {
		t.Parallel()
		clock := clockwork.NewFakeClockAt(time.Now())
		b := setup(t, newStore, &guard.Config{Clock: clock, Retention: time.Hour})
		tool := Tool("approve", "24h")
		var c counter
		a, err := b.guard.Do(b.ctx, call(tool, `{"record_id":"`+Key("WD")+`"}`, "r"), c.fn)
		must(t, err)
		clock.Advance(26 * time.Hour)
		st, err := b.reaper.Reap(b.ctx)
		must(t, err)
		if _, err := b.store.Get(b.ctx, a.Key); !errors.Is(err, airlock.ErrNotFound) || st.Purged < 1 {
			t.Fatalf("not purged: %v %+v", err, st)
		}
	})
}

func runConcurrency(t *testing.T, newStore NewStore) {
	t.Run("64GoroutinesOneKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := Tool("approve", "forever")
		c := counter{delay: 20 * time.Millisecond}
		args := `{"record_id":"` + Key("WD") + `"}`
		var wg sync.WaitGroup
		answers := make([]*airlock.Answer, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := b.guard.Do(b.ctx, call(tool, args, "r"), c.fn)
				if err != nil {
					t.Error(err)
					return
				}
				answers[i] = a
			}()
		}
		wg.Wait()
		if c.n.Load() != 1 {
			t.Fatalf("executions = %d, want 1", c.n.Load())
		}
		firsts := 0
		for _, a := range answers {
			if a == nil || a.Status != airlock.StatusSucceeded {
				t.Fatalf("answer %+v", a)
			}
			if !a.Repeat {
				firsts++
			}
		}
		if firsts != 1 {
			t.Fatalf("%d answers not marked repeat, want 1", firsts)
		}
	})

	t.Run("200KeysBy16Goroutines", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := Tool("approve", "forever")
		var mu sync.Mutex
		perKey := map[string]int{}
		fn := func(ctx context.Context, key string) airlock.Outcome {
			mu.Lock()
			perKey[key]++
			mu.Unlock()
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`1`)}
		}
		prefix := Key("K")
		var wg sync.WaitGroup
		for k := range 200 {
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := b.guard.Do(b.ctx, call(tool, fmt.Sprintf(`{"record_id":"%s-%d"}`, prefix, k), "r"), fn); err != nil {
						t.Error(err)
					}
				}()
			}
		}
		wg.Wait()
		if len(perKey) != 200 {
			t.Fatalf("%d keys executed, want 200", len(perKey))
		}
		for k, n := range perKey {
			if n != 1 {
				t.Fatalf("key %s executed %d times", k, n)
			}
		}
	})
}

// lostReplies is a store whose first claim and first completion are
// committed but answered as a store that lost the reply and retried would
// answer them: the key taken (by the claim itself), the record no longer
// running (completed by the completion itself). The database cannot be
// made to drop a reply on cue; this is what the drivers return when it does.
type lostReplies struct {
	airlock.Store
	claimLost, completeLost atomic.Bool
}

func (s *lostReplies) Claim(ctx context.Context, c *airlock.Claim) (*airlock.Record, bool, error) {
	rec, claimed, err := s.Store.Claim(ctx, c)
	if err != nil || !claimed || !s.claimLost.CompareAndSwap(false, true) {
		return rec, claimed, err
	}
	rec, err = s.Get(ctx, c.Key)
	return rec, false, err
}

func (s *lostReplies) Complete(ctx context.Context, c *airlock.Completion) error {
	err := s.Store.Complete(ctx, c)
	if err != nil || !s.completeLost.CompareAndSwap(false, true) {
		return err
	}
	return airlock.ErrLeaseLost
}
