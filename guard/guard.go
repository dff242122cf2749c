package guard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/jonboulle/clockwork"
)

// Config configures a Guard. A nil *Config means all defaults.
type Config struct {
	// Clock is the one time source of the guard and its maintenance: keys'
	// windows, leases and their renewal, respond_within, tool timeouts,
	// re-drive backoff and the waits of repeats. Default: the system clock
	// (clockwork.NewRealClock); tests pass a clockwork.FakeClock and
	// advance it.
	Clock clockwork.Clock
	// Lease is how long a claim holds without a heartbeat. Default 30s;
	// a running call renews it about every Lease/3 (at most Lease/2 apart).
	Lease time.Duration
	// CacheSize bounds the in-process cache of completed records that
	// serves repeats without a database read. Default 10000; negative disables.
	CacheSize int
	// CacheBytes bounds the same cache by the bytes its records hold
	// (arguments, results, identifiers). Default 64 MiB.
	CacheBytes int64
	// MaxRunIDBytes caps a call's run id. Default DefaultMaxRunIDBytes (256).
	MaxRunIDBytes int
	// Retention is how long records are kept after their window ends (run
	// windows: after the call). Default 7 days. Forever windows are kept.
	Retention time.Duration
	// UnknownRetries is how many times an outcome-unknown call is re-driven
	// with the same key when the upstream honours keys. Default 3.
	UnknownRetries int
	// RetryBackoff is the first wait before a re-drive, doubling. Default 200ms.
	RetryBackoff time.Duration
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Observer is told of every side-effect attempt (metrics). Default: none.
	Observer Observer
	// Tracer makes spans of the claim, the side effect, the completion and
	// a repeat served (package tracing). Default: none (no span work at all).
	Tracer airlock.Tracer
	// AuditBuffer is how many answer events (repeat served, conflict, …)
	// wait in memory to be written. Default 16384.
	AuditBuffer int
	// AuditWait is how long a call waits for room in a full AuditBuffer
	// before its event is given up and counted as lost. Default 1s.
	AuditWait time.Duration
}

// Observer watches side effects; package metrics implements it.
type Observer interface {
	// SideEffect reports one attempt: its outcome, how long it took, and
	// whether it ran into the tool's timeout.
	SideEffect(tool *airlock.Tool, out airlock.Outcome, took time.Duration, timedOut bool)
	// AuditLost reports n buffered audit events given up (the store failed
	// their write, or had no room for AuditWait).
	AuditLost(n int)
	// Settled reports an in-doubt record settled, by a person or by
	// reconciliation (by is ActorReconcile then).
	Settled(tool string, happened bool, by string)
}

// Guard runs side effects at most once per key.
type Guard struct {
	store airlock.GuardStore
	clock clockwork.Clock
	// systemClock: Config.Clock was nil, so timeouts are the standard
	// library's contexts (deadlines the upstream clients can see).
	systemClock bool
	lease       time.Duration
	retain      time.Duration
	retries     int
	backoff     time.Duration
	observer    Observer
	tracer      airlock.Tracer
	events      *eventBuffer
	log         *slog.Logger
	cache       *recordCache
	maxRunID    int
	hub         *hub
	unsub       func()
	leases      *leaseKeeper

	ownerPrefix string
	seq         atomic.Uint64
	inflight    sync.WaitGroup
}

// New makes a guard over a store.
func New(store airlock.GuardStore, cfg *Config) *Guard {
	if cfg == nil {
		cfg = &Config{}
	}
	g := &Guard{
		store:    store,
		clock:    cfg.Clock,
		lease:    cfg.Lease,
		retain:   cfg.Retention,
		retries:  cfg.UnknownRetries,
		backoff:  cfg.RetryBackoff,
		observer: cfg.Observer,
		tracer:   cfg.Tracer,
		log:      cfg.Logger,
		hub:      newHub(),
	}
	if g.clock == nil {
		g.clock, g.systemClock = clockwork.NewRealClock(), true
	}
	if g.lease <= 0 {
		g.lease = 30 * time.Second
	}
	g.leases = newLeaseKeeper(g)
	if g.retain <= 0 {
		g.retain = 7 * 24 * time.Hour
	}
	if g.retries == 0 {
		g.retries = 3
	}
	if g.retries < 0 {
		g.retries = 0
	}
	if g.backoff <= 0 {
		g.backoff = 200 * time.Millisecond
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	size := cfg.CacheSize
	if size == 0 {
		size = 10000
	}
	if size > 0 {
		cacheBytes := cfg.CacheBytes
		if cacheBytes <= 0 {
			cacheBytes = airlock.DefaultCacheBytes
		}
		g.cache = newRecordCache(size, cacheBytes)
	}
	g.maxRunID = cfg.MaxRunIDBytes
	if g.maxRunID <= 0 {
		g.maxRunID = airlock.DefaultMaxRunIDBytes
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	g.ownerPrefix = hex.EncodeToString(b[:])
	g.unsub = store.Subscribe(g.hub.notify)
	buffer, wait := cfg.AuditBuffer, cfg.AuditWait
	if buffer <= 0 {
		buffer = 16384
	}
	if wait <= 0 {
		wait = time.Second
	}
	var onLost func(int)
	if g.observer != nil {
		onLost = g.observer.AuditLost
	}
	g.events = newEventBuffer(store, g.clock, g.log, buffer, wait, onLost)
	return g
}

// Close stops listening for completions and waits for the side effects
// this guard started to finish and be recorded.
func (g *Guard) Close() {
	g.inflight.Wait()
	g.leases.close()
	g.unsub()
	g.events.close()
}

// Now is the time on the guard's clock (Config.Clock), for what keeps
// time beside it (the Idempotency-Key middleware's retention).
func (g *Guard) Now() time.Time { return g.clock.Now() }

// Wait waits for the side effects this guard started to finish.
func (g *Guard) Wait() { g.inflight.Wait() }

// Shutdown closes the guard once the side effects it started have
// finished, or returns ctx's error when ctx ends first. Then the guard
// stays open: a side effect still running writes its outcome through it,
// or its record stays running until the reaper of another process takes
// it (docs/operations.md, "Shutdown").
func (g *Guard) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
		g.Close()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("guard: side effects still running at the shutdown's deadline: %w", ctx.Err())
	}
}

// Derive derives the key of a call without running anything.
func (g *Guard) Derive(c *airlock.Call) (*airlock.Derivation, error) {
	if c.Tool == nil {
		return nil, airlock.Errorf(airlock.CodeUnknownTool, "no tool given")
	}
	if !c.Tool.Kind.SideEffecting() {
		return nil, airlock.Errorf(airlock.CodeNotCallable, "tool %s is a read tool; it has no key and is not guarded", c.Tool.Name)
	}
	return airlock.DeriveKey(airlock.KeyInput{Tool: c.Tool, Calendar: c.Calendar, Args: c.Args.Value(), At: g.clock.Now(), RunID: c.RunID})
}

// Do runs fn at most once for the call's key and answers as docs/concepts.md ("The guarded call")
// says: a first call gets its result; a repeat gets the first result with
// Repeat set; a running first call is waited for up to the tool's
// repeat_wait; an in-doubt record gets an in_doubt answer. Errors are for
// bad input (nothing ran), an unreachable store (nothing ran), a request
// that was never sent (nothing was done) and a rejected mismatch.
func (g *Guard) Do(ctx context.Context, c *airlock.Call, fn airlock.SideEffect) (*airlock.Answer, error) {
	if err := airlock.CheckRunID(c.RunID, g.maxRunID); err != nil {
		return nil, err // before anything is claimed or buffered
	}
	start := g.clock.Now()
	d, err := g.Derive(c)
	if err != nil {
		return nil, err
	}
	return g.do(ctx, &prepared{
		tool: c.Tool, key: d.Key, previous: d.Previous, runID: c.RunID, windowID: d.Parts.WindowID,
		args: c.Args, hash: d.ArgsHash(c.Tool, c.Args),
		expiresAt: g.expiresAt(d, start), start: start, waitsToEnd: c.WaitsToEnd, giveUp: c.GiveUp,
	}, fn)
}

// Lease is how long a claim holds without a renewal (Config.Lease).
func (g *Guard) Lease() time.Duration { return g.lease }

// MaxRunIDBytes is the guard's cap on run ids (Config.MaxRunIDBytes).
func (g *Guard) MaxRunIDBytes() int { return g.maxRunID }

// DoKeyed is Do for a call whose key is given rather than derived.
func (g *Guard) DoKeyed(ctx context.Context, kc *airlock.KeyedCall, fn airlock.SideEffect) (*airlock.Answer, error) {
	if kc.Tool == nil {
		return nil, airlock.Errorf(airlock.CodeUnknownTool, "no tool given")
	}
	if kc.Key == "" {
		return nil, airlock.FieldErrorf(airlock.CodeMissingField, "key", "the key is empty")
	}
	if len(kc.Key) > airlock.MaxKeyBytes {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "key", "is %d bytes; a key is at most %d bytes", len(kc.Key), airlock.MaxKeyBytes)
	}
	if err := airlock.CheckText("key", kc.Key); err != nil {
		return nil, err
	}
	if err := airlock.CheckRunID(kc.RunID, g.maxRunID); err != nil {
		return nil, err
	}
	return g.do(ctx, &prepared{
		tool: kc.Tool, key: kc.Key, runID: kc.RunID, windowID: "keyed",
		args: kc.Args, hash: airlock.ArgsHash(kc.Args.JSON()), expiresAt: kc.ExpiresAt, start: g.clock.Now(),
	}, fn)
}

// prepared is a call with its key, ready to claim.
type prepared struct {
	tool      *airlock.Tool
	key       string
	previous  string
	runID     string
	windowID  string
	args      *airlock.Args
	hash      string // ArgsHash of the arguments, key fields normalized
	expiresAt time.Time
	start     time.Time
	deadline  time.Time // respond_within: answer in progress after it; zero: wait
	owner     string    // the claim's owner; empty: g.newOwner()
	// waitsToEnd: with no deadline, the side effect runs on the caller's
	// goroutine and the caller waits for its end (Call.WaitsToEnd).
	waitsToEnd bool
	// giveUp ends the caller's waits as ctx's end does (Call.GiveUp).
	giveUp <-chan struct{}
}

// do is the guarded call, in its steps: a repeat just after a window
// boundary, the cache, the run's budget, the claim, and the execution the
// caller waits for.
func (g *Guard) do(ctx context.Context, p *prepared, fn airlock.SideEffect) (*airlock.Answer, error) {
	if rw := p.tool.RespondWithinOr(); rw > 0 {
		p.deadline = g.clock.Now().Add(rw)
	}
	rec, a, err := g.begin(ctx, p)
	if rec == nil {
		return a, err
	}
	return g.await(ctx, p, rec, fn)
}

// begin is the guarded call up to its claim: it returns the record this
// call now holds, or else the answer (or refusal) for a call that runs
// nothing.
func (g *Guard) begin(ctx context.Context, p *prepared) (*airlock.Record, *airlock.Answer, error) {
	if a, done, err := g.previousWindow(ctx, p); done {
		return nil, a, err
	}
	if rec := g.cache.get(p.key); rec != nil {
		a, err := g.answerExisting(ctx, p, rec)
		return nil, a, err
	}
	if a, done, err := g.checkBudget(ctx, p); done {
		return nil, a, err
	}
	return g.claim(ctx, p)
}

// previousWindow answers a repeat from the same run just after a window
// boundary from the previous window's record; done false: it is no such
// repeat.
func (g *Guard) previousWindow(ctx context.Context, p *prepared) (*airlock.Answer, bool, error) {
	if p.previous == "" || p.runID == "" {
		return nil, false, nil
	}
	prev, err := g.get(ctx, p.previous)
	switch {
	case err == nil && prev.RunID == p.runID:
		if a, err := g.answerExisting(ctx, p, prev); !errors.Is(err, errReleased) {
			return a, true, err
		}
	case err != nil && !errors.Is(err, airlock.ErrNotFound):
		return nil, true, err
	}
	return nil, false, nil
}

// checkBudget refuses a new call past the tool's max_calls_per_run; a
// repeat is never refused, so the record is looked for first. done false:
// the call may go on to its claim.
func (g *Guard) checkBudget(ctx context.Context, p *prepared) (*airlock.Answer, bool, error) {
	tool := p.tool
	if tool.MaxCallsPerRun <= 0 || p.runID == "" {
		return nil, false, nil
	}
	rec, err := g.get(ctx, p.key)
	switch {
	case err == nil:
		if a, err := g.answerExisting(ctx, p, rec); !errors.Is(err, errReleased) {
			return a, true, err
		}
	case !errors.Is(err, airlock.ErrNotFound):
		return nil, true, err
	}
	n, err := g.store.CountRunCalls(ctx, &airlock.CountRunCallsParams{RunID: p.runID, Tool: tool.Name})
	if err != nil {
		return nil, true, storeErr("count", err)
	}
	if n < tool.MaxCallsPerRun {
		return nil, false, nil
	}
	g.emit(&airlock.AuditEvent{At: g.clock.Now(), Kind: airlock.EventBudget, RunID: p.runID, Key: p.key, Tool: tool.Name, Args: p.args.JSON(),
		Error: fmt.Sprintf("max_calls_per_run %d reached", tool.MaxCallsPerRun), Actor: airlock.ActorFrom(ctx)})
	return nil, true, &airlock.Error{Code: airlock.CodeBudgetExceeded, Field: "run_id", Message: fmt.Sprintf(
		"this run has already made %d calls of %s, its limit (max_calls_per_run); this call was refused and nothing was executed. Stop and report to a person instead of retrying",
		n, tool.Name)}
}

// claim inserts the call's record as running. It returns the record when
// this call holds it, or else the answer for a call whose key is taken.
func (g *Guard) claim(ctx context.Context, p *prepared) (*airlock.Record, *airlock.Answer, error) {
	owner := p.owner
	if owner == "" {
		owner = g.newOwner()
	}
	c := &airlock.Claim{
		Key: p.key, Tool: p.tool.Name, RunID: p.runID, WindowID: p.windowID,
		Args: p.args.JSON(), ArgsHash: p.hash, Owner: owner, Now: p.start,
		LeaseUntil: p.start.Add(g.lease), ExpiresAt: p.expiresAt, Actor: airlock.ActorFrom(ctx),
	}
	for attempt := 0; ; attempt++ {
		sctx, span := ctx, airlock.Span(nil)
		if g.tracer != nil {
			sctx, span = g.tracer.Start(ctx, airlock.SpanClaim, airlock.Attr{Key: airlock.AttrToolName, Value: p.tool.Name}, airlock.Attr{Key: airlock.AttrKey, Value: p.key}, airlock.Attr{Key: airlock.AttrWindow, Value: p.windowID}, airlock.Attr{Key: airlock.AttrRunID, Value: p.runID})
		}
		rec, claimed, err := g.store.Claim(sctx, c)
		if span != nil {
			span.Set(airlock.Attr{Key: airlock.AttrClaimed, Value: claimed})
			span.End(err)
		}
		if err != nil {
			return nil, nil, storeErr("claim", err)
		}
		if claimed || (rec != nil && rec.Owner == c.Owner && rec.State == airlock.StateRunning) {
			// Also the record of this call's own claim: the store committed
			// it but lost the reply and, retrying, found the key taken.
			// Owners are unique to a call, so nobody else holds it.
			return rec, nil, nil
		}
		if taken := g.takeOver(ctx, p, rec, c); taken != nil {
			return taken, nil, nil
		}
		a, err := g.answerExisting(ctx, p, rec)
		// The first call released its claim (its request was never sent):
		// this call may do the work.
		if errors.Is(err, errReleased) && attempt < 3 {
			continue
		}
		if errors.Is(err, errReleased) {
			return nil, &airlock.Answer{Status: airlock.StatusInProgress, Message: airlock.MessageInProgress, Key: p.key}, nil
		}
		return nil, a, err
	}
}

// takeOver takes the expired claim of a tool run by its caller that
// honours keys (its holder vanished; the reaper left it): this call runs
// the work again with the same key, which the caller's service runs once.
// Nil when the record is no such claim, or another caller was first.
func (g *Guard) takeOver(ctx context.Context, p *prepared, rec *airlock.Record, c *airlock.Claim) *airlock.Record {
	if rec == nil || rec.State != airlock.StateRunning || !p.tool.CallerTakesOver() || !rec.LeaseUntil.Before(c.Now) {
		return nil
	}
	taken, ok, err := g.store.TakeOver(ctx, &airlock.TakeOverParams{Key: rec.Key, Owner: c.Owner, Now: c.Now, LeaseUntil: c.LeaseUntil})
	if err != nil || !ok {
		return nil
	}
	return taken
}

// await runs the claimed call's side effect to its end in the background
// and answers the caller with its outcome, or in progress when the caller
// gives up or respond_within passes first: the side effect goes on and is
// recorded, and the next repeat gets its result.
func (g *Guard) await(ctx context.Context, p *prepared, rec *airlock.Record, fn airlock.SideEffect) (*airlock.Answer, error) {
	if p.waitsToEnd && p.deadline.IsZero() && p.giveUp == nil {
		g.inflight.Add(1)
		r := g.execute(context.WithoutCancel(ctx), p.tool, rec, fn)
		g.inflight.Done()
		if r.err != nil {
			return nil, r.err
		}
		r.answer.Key = p.key
		return r.answer, nil
	}
	done := make(chan result, 1)
	g.inflight.Add(1)
	go func() {
		defer g.inflight.Done()
		done <- g.execute(context.WithoutCancel(ctx), p.tool, rec, fn)
	}()
	var timer <-chan time.Time
	if !p.deadline.IsZero() {
		t := g.clock.NewTimer(g.clock.Until(p.deadline))
		defer t.Stop()
		timer = t.Chan()
	}
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		r.answer.Key = p.key
		return r.answer, nil
	case <-timer:
	case <-ctx.Done():
	case <-p.giveUp:
	}
	return &airlock.Answer{Status: airlock.StatusInProgress, Message: airlock.MessageStillRunning, Key: p.key}, nil
}

type result struct {
	answer *airlock.Answer
	err    error
}

// execute runs the side effect of a claimed record to its end, heartbeating
// the lease, and records the outcome.
func (g *Guard) execute(ctx context.Context, tool *airlock.Tool, rec *airlock.Record, fn airlock.SideEffect) result {
	g.leases.hold(rec.Key, rec.Owner)
	defer g.leases.release(rec.Owner)

	var out airlock.Outcome
	sentOnce, timedOut := false, false
	// The side effect's span is the upstream's parent (its traceparent
	// goes out beside the key); one span for all attempts, which share it.
	ectx, span := ctx, airlock.Span(nil)
	if g.tracer != nil {
		ectx, span = g.tracer.Start(ctx, airlock.SpanSideEffect, airlock.Attr{Key: airlock.AttrToolName, Value: tool.Name}, airlock.Attr{Key: airlock.AttrKey, Value: rec.Key})
	}
	attempts := 0
	for attempt := 0; ; attempt++ {
		attempts++
		actx, cancel := g.withTimeout(ectx, tool.TimeoutOr())
		began := g.clock.Now()
		out = g.run(actx, fn, rec.Key)
		timedOut = errors.Is(context.Cause(actx), context.DeadlineExceeded)
		cancel()
		if g.observer != nil {
			g.observer.SideEffect(tool, out, g.clock.Since(began), timedOut)
		}
		if out.Kind == airlock.OutcomeNotSent && sentOnce {
			// An earlier attempt may have happened; this one did not even
			// leave, which tells us nothing more.
			out.Kind = airlock.OutcomeUnknown
		}
		if out.Kind != airlock.OutcomeUnknown {
			break
		}
		sentOnce = true
		if !tool.HonorsKey || attempt >= g.retries {
			break
		}
		select {
		case <-g.clock.After(g.backoff << attempt):
		case <-ctx.Done():
		}
	}

	if span != nil {
		span.Set(airlock.Attr{Key: airlock.AttrOutcome, Value: out.Kind.String()}, airlock.Attr{Key: airlock.AttrTimedOut, Value: timedOut}, airlock.Attr{Key: airlock.AttrAttempts, Value: attempts})
		if out.Kind == airlock.OutcomeUnknown || out.Kind == airlock.OutcomeNotSent {
			span.End(out.Err)
		} else {
			span.End(nil)
		}
	}
	return g.record(ctx, tool, rec, out, timedOut)
}

// record records the outcome of a claimed record's side effect (releasing
// the claim when it was never sent) and answers as the first call.
func (g *Guard) record(ctx context.Context, tool *airlock.Tool, rec *airlock.Record, out airlock.Outcome, timedOut bool) result {
	// The upstream's answer as the store can hold it: the work is done,
	// and a byte the database refuses must not leave it unrecorded.
	comp := &airlock.Completion{Key: rec.Key, Owner: rec.Owner, Result: airlock.StorableJSON(out.Result), Content: airlock.StorableJSON(out.Content), Actor: airlock.ActorFrom(ctx)}
	switch out.Kind {
	case airlock.OutcomeNotSent:
		if err := g.retryStore(ctx, func(ctx context.Context) error {
			return g.store.Release(ctx, &airlock.ReleaseParams{Key: rec.Key, Owner: rec.Owner, At: g.clock.Now()})
		}); err != nil {
			g.log.Error("airlock: releasing a claim whose request was never sent", "key", rec.Key, "err", err)
		}
		g.hub.notify(rec.Key)
		msg := airlock.MessageNotSent
		if out.Err != nil {
			msg += " (" + out.Err.Error() + ")"
		}
		return result{err: &airlock.Error{Code: airlock.CodeNotSent, Message: msg, Err: out.Err}}
	case airlock.OutcomeSucceeded:
		comp.State = airlock.StateSucceeded
	case airlock.OutcomeFailed:
		comp.State = airlock.StateFailed
	default:
		comp.State = airlock.StateInDoubt
		comp.Note = "outcome unknown"
		if out.Err != nil {
			comp.Note += ": " + airlock.StorableText(out.Err.Error())
		}
	}
	cctx, cspan := ctx, airlock.Span(nil)
	if g.tracer != nil {
		cctx, cspan = g.tracer.Start(ctx, airlock.SpanComplete, airlock.Attr{Key: airlock.AttrToolName, Value: tool.Name}, airlock.Attr{Key: airlock.AttrKey, Value: rec.Key}, airlock.Attr{Key: airlock.AttrRecordState, Value: string(comp.State)})
	}
	// One time for every attempt: a retry that finds the record no longer
	// running (the first attempt committed, its reply was lost, as in a
	// database failover) recognises its own completion by it.
	comp.Now = g.clock.Now()
	comp.TimedOut, comp.Took = timedOut, max(0, comp.Now.Sub(rec.CreatedAt))
	err := g.retryStore(cctx, func(ctx context.Context) error {
		return g.store.Complete(ctx, comp)
	})
	if errors.Is(err, airlock.ErrLeaseLost) && g.recorded(cctx, comp) {
		// The store committed this outcome but lost the reply and, retrying,
		// found the record no longer running.
		err = nil
	}
	if cspan != nil {
		cspan.End(err)
	}
	g.hub.notify(rec.Key)
	if err != nil {
		// The side effect ran but its outcome could not be recorded: the
		// record stays running until its lease ends and the reaper marks it
		// in doubt. The caller must not redo the work.
		g.log.Error("airlock: recording an outcome failed", "key", rec.Key, "state", comp.State, "err", err)
		return result{answer: &airlock.Answer{Status: airlock.StatusInDoubt, Message: airlock.InDoubtMessage(tool)}}
	}
	final := *rec
	final.State, final.Result, final.Content, final.Note, final.Owner = comp.State, comp.Result, comp.Content, comp.Note, ""
	if final.State.Final() {
		g.cache.put(&final)
	}
	return result{answer: airlock.AnswerFor(&final, tool, false)}
}

// withTimeout is context.WithTimeout by the guard's clock. The system
// clock's contexts are the standard library's; another clock's (a test's
// fake) end by its AfterFunc, with cause context.DeadlineExceeded.
// (clockwork.WithTimeout is not used: its fake contexts' Err blocks until
// they end.)
func (g *Guard) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if g.systemClock {
		return context.WithTimeout(ctx, d)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := g.clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() { t.Stop(); cancel(context.Canceled) }
}

// recorded reports whether the record already holds this completion: its
// state, result and note, released, and changed at the completion's time.
func (g *Guard) recorded(ctx context.Context, comp *airlock.Completion) bool {
	rec, err := g.store.Get(ctx, comp.Key)
	return err == nil && rec.State == comp.State && rec.Owner == comp.Owner && rec.Note == comp.Note &&
		bytes.Equal(rec.Result, comp.Result) && rec.UpdatedAt.Sub(comp.Now).Abs() < time.Microsecond
}

// run calls fn, turning a panic into an unknown outcome: a side effect that
// crashed may have happened.
func (g *Guard) run(ctx context.Context, fn airlock.SideEffect, key string) (out airlock.Outcome) {
	defer func() {
		if r := recover(); r != nil {
			out = airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("side effect panicked: %v", r)}
		}
	}()
	out = fn(ctx, key)
	switch out.Kind {
	case airlock.OutcomeSucceeded, airlock.OutcomeFailed, airlock.OutcomeUnknown, airlock.OutcomeNotSent:
	default:
		out = airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("side effect reported no outcome")}
	}
	return out
}

// retryStore retries a store write for up to one lease: the side effect has
// happened and its outcome must be recorded if at all possible.
func (g *Guard) retryStore(ctx context.Context, f func(context.Context) error) error {
	deadline := g.clock.Now().Add(g.lease)
	wait := 20 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, airlock.ErrLeaseLost) || g.clock.Now().Add(wait).After(deadline) {
			return err
		}
		g.clock.Sleep(wait)
		wait = min(wait*2, time.Second)
	}
}

// answerExisting answers a call whose key already has a record.
func (g *Guard) answerExisting(ctx context.Context, p *prepared, rec *airlock.Record) (a *airlock.Answer, err error) {
	tool := p.tool
	first := rec // rec is replaced below by the waited-for record, which may be nil
	var span airlock.Span
	if g.tracer != nil {
		ctx, span = g.tracer.Start(ctx, airlock.SpanRepeatServed, airlock.Attr{Key: airlock.AttrToolName, Value: tool.Name}, airlock.Attr{Key: airlock.AttrKey, Value: rec.Key}, airlock.Attr{Key: airlock.AttrRecordState, Value: string(rec.State)})
	}
	defer func() {
		if span != nil {
			if a != nil {
				span.Set(airlock.Attr{Key: airlock.AttrStatus, Value: string(a.Status)})
			}
			span.End(err)
		}
		g.auditAnswer(ctx, tool, first, p.args, p.runID, a, err)
	}()
	var conflict *airlock.Conflict
	if rec.ArgsHash != p.hash {
		// The first call's arguments come back from the store as bytes;
		// they are parsed only here, when the two calls differ.
		first, _ := airlock.ParseArgs(rec.Args)
		// Values that normalize alike are the same work, not a conflict.
		fields := airlock.DiffArgs(airlock.NormalizeKeyFields(tool, first), airlock.NormalizeKeyFields(tool, p.args.Value()))
		if tool.OnMismatch == airlock.MismatchReject {
			e := &airlock.Error{Code: airlock.CodeArgumentsMismatch, Message: fmt.Sprintf(
				"this work was already requested with other arguments (differing: %s); the first request stands and this one was refused; nothing was executed",
				strings.Join(fields, ", "))}
			if len(fields) > 0 {
				e.Field = fields[0]
			}
			return nil, e
		}
		conflict = &airlock.Conflict{Fields: fields, Message: fmt.Sprintf(
			"this work was already requested with other values for %s; the first request's outcome is returned and this one was not executed",
			strings.Join(fields, ", "))}
	}
	if rec.State == airlock.StateRunning {
		var err error
		rec, err = g.waitFinal(ctx, p.giveUp, rec.Key, tool.RepeatWaitOr(), p.deadline)
		if err != nil {
			return nil, err
		}
	}
	a = airlock.AnswerFor(rec, tool, true)
	a.Conflict = conflict
	if conflict != nil && a.Message == airlock.MessageInProgress {
		a.Message = airlock.MessageInProgressOther
	}
	return a, nil
}

// errReleased says a running record was removed while a repeat waited for
// it: its request was never sent, and the key is free again.
var errReleased = errors.New("airlock: the first call was released")

// waitFinal waits up to wait (and not past deadline, when set) for a
// running record to leave running, or for the caller to give up (ctx,
// giveUp). It returns the record as it then is; a record released
// meanwhile (never sent) reads as in progress.
func (g *Guard) waitFinal(ctx context.Context, giveUp <-chan struct{}, key string, wait time.Duration, deadline time.Time) (*airlock.Record, error) {
	changes := g.Watch(ctx, key)
	defer changes.Stop() // the wait registered last, after each Rearm
	end := g.clock.Now().Add(wait)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	poll := g.clock.NewTicker(g.store.PollInterval())
	defer poll.Stop()
	timeout := g.clock.NewTimer(g.clock.Until(end))
	defer timeout.Stop()
	var last *airlock.Record
	for {
		rec, err := g.get(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil && last != nil:
			// The caller gave up while we read: it is answered in progress.
			return last, nil
		case errors.Is(err, airlock.ErrNotFound):
			return nil, errReleased
		case err != nil:
			return nil, err
		case rec.State != airlock.StateRunning:
			return rec, nil
		}
		last = rec
		select {
		case <-changes.C():
			changes.Rearm()
		case <-poll.Chan():
		case <-timeout.Chan():
			return rec, nil
		case <-ctx.Done():
			return rec, nil
		case <-giveUp:
			return rec, nil
		}
	}
}

// Watch waits for the record of key to move (completed, reaped, settled,
// released) in this process or, through the store's notifications, in
// another: the watch's channel closes at each change, and the store is
// asked once to announce them. A record changed by what the store does not
// announce is found by re-reading it every PollInterval.
func (g *Guard) Watch(ctx context.Context, key string) *RecordWatch {
	w := g.hub.watch(key) // before the store is asked: no change falls between
	if err := g.store.Watch(ctx, key); err != nil {
		// Polling still finds the result; only the wake-up is lost.
		g.log.Warn("airlock: watching a running record failed; polling instead", "key", key, "err", err)
	}
	return w
}

// PollInterval is how often a waiter for a record's change re-reads it
// (the store's).
func (g *Guard) PollInterval() time.Duration { return g.store.PollInterval() }

func (g *Guard) get(ctx context.Context, key string) (*airlock.Record, error) {
	if rec := g.cache.get(key); rec != nil {
		return rec, nil
	}
	rec, err := g.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, airlock.ErrNotFound) {
			return nil, err
		}
		return nil, storeErr("read", err)
	}
	if rec.State.Final() {
		g.cache.put(rec)
	}
	return rec, nil
}

func (g *Guard) newOwner() string {
	return g.ownerPrefix + "-" + strconv.FormatUint(g.seq.Add(1), 10)
}

func (g *Guard) expiresAt(d *airlock.Derivation, now time.Time) time.Time {
	switch {
	case !d.Parts.WindowEnd.IsZero():
		return d.Parts.WindowEnd.Add(g.retain)
	case strings.HasPrefix(d.Parts.WindowID, "run:"):
		return now.Add(g.retain)
	default:
		return time.Time{} // forever
	}
}

func storeErr(op string, err error) error {
	var e *airlock.Error
	if errors.As(err, &e) && e.Code != airlock.CodeInternal {
		return err
	}
	return &airlock.Error{Code: airlock.CodeStoreUnavailable, Message: "the store could not " + op + " the record, so nothing was executed; retry later", Err: err}
}

// Get returns a record by key (for operators: the API, the CLI).
func (g *Guard) Get(ctx context.Context, key string) (*airlock.Record, error) {
	return g.store.Get(ctx, key)
}

// Settle decides an in_doubt record, whatever the front end (the HTTP API,
// the page, the CLI, reconciliation): the one place a settlement is
// checked, noted and audited with the settler's name. Happened: the record
// becomes succeeded with the result, and repeats get it. Not happened: the
// record is removed and the next call runs the work.
func (g *Guard) Settle(ctx context.Context, r airlock.SettleRequest) (*airlock.Record, error) {
	note := strings.TrimSpace(r.Note)
	switch {
	case r.Key == "":
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "key", "required: the record's key")
	case note == "":
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "note", "a note is required: how you know whether it happened (it goes in the audit trail)")
	case strings.TrimSpace(r.By) == "":
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "by", "required: who settles the record (it goes in the audit trail)")
	case r.Role != airlock.RoleAdmin && r.Role != airlock.RoleSystem:
		return nil, airlock.FieldErrorf(airlock.CodeForbidden, "role", "only an admin settles records; %s is %q", r.By, r.Role)
	case r.Happened && len(r.Result) > 0 && !json.Valid(r.Result):
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "result", "the result must be valid JSON")
	}
	if err := airlock.CheckNote("note", note); err != nil {
		return nil, err
	}
	if len(r.Result) > 0 {
		if err := airlock.CheckJSONText("result", r.Result); err != nil {
			return nil, err
		}
	}
	result := r.Result
	if !r.Happened {
		result = nil
	}
	now := g.clock.Now()
	rec, err := g.store.Settle(ctx, &airlock.Settlement{Key: r.Key, Happened: r.Happened, Result: result, Note: airlock.SettledBy(r.By, now, note), Now: now, Actor: r.By})
	if err != nil {
		return nil, err
	}
	g.hub.notify(r.Key)
	if g.observer != nil {
		g.observer.Settled(rec.Tool, r.Happened, r.By)
	}
	return rec, nil
}

// AuditDropped counts buffered audit events (repeats, conflicts, in-progress
// answers, budget refusals) that could not be written.
func (g *Guard) AuditDropped() int64 { return g.events.Dropped.Load() }
