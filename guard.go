package airlock

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
)

// Status is what a caller is told about its call.
type Status string

// Answer statuses.
const (
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
	StatusInProgress Status = "in_progress"
	StatusInDoubt    Status = "in_doubt"
	StatusPlanned    Status = "planned" // an irreversible tool's plan waits for approval or its commit
)

// Messages written for a model: each says plainly not to redo the work.
const (
	MessageInProgress = "This work is already under way from an earlier identical call. It must not be redone. Call again later with the same arguments to get its result."
	// MessageInProgressOther is MessageInProgress for a repeat whose
	// arguments differ from the first call's (Answer.Conflict names them).
	MessageInProgressOther = "This work is already under way from an earlier call for the same work, made with other arguments. It must not be redone. Call again later to get the first call's result."
	// MessageStillRunning answers the first call itself when it is answered
	// before its side effect ends (respond_within, or the caller gave up).
	MessageStillRunning = "This work has started and is still running; it must not be redone. Call again later with the same arguments to get its result."
	MessageInDoubt      = "This work may or may not have happened; a check is under way. Do not retry it and do not try another way to do it; a person or a reconciliation will settle it."
	MessageNotSent      = "Nothing was done: the service could not be reached. It is safe to retry later."
)

// Answer is what a guarded call returns. A repeat is never an error.
type Answer struct {
	Status   Status          `json:"status"`
	Repeat   bool            `json:"repeat"`
	Result   json.RawMessage `json:"result,omitempty"`
	Conflict *Conflict       `json:"conflict,omitempty"`
	Message  string          `json:"message,omitempty"`
	// Plan is the plan of an irreversible tool's proposal (plan_T).
	Plan *Plan `json:"plan,omitempty"`
	// Key is the derived key; it is for operators and logs, never for the model.
	Key string `json:"-"`
	// Content is the MCP upstream's whole result (Outcome.Content), which
	// the MCP gateway passes on with the answer; not part of the JSON.
	Content json.RawMessage `json:"-"`
}

// Conflict says that a repeat carried other arguments than the first call.
type Conflict struct {
	Fields  []string `json:"fields"`
	Message string   `json:"message"`
}

// OutcomeKind is what a side effect reports about itself.
type OutcomeKind int

// Outcome kinds.
const (
	OutcomeSucceeded OutcomeKind = iota + 1 // it happened; Result is the result
	OutcomeFailed                           // it definitively did not happen (a 4xx); Result says why
	OutcomeUnknown                          // it may have happened (timeout, reset after send, 5xx)
	OutcomeNotSent                          // the request never left (connection refused)
)

// String names the kind: succeeded, failed, unknown or not_sent.
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnknown:
		return "unknown"
	case OutcomeNotSent:
		return "not_sent"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is a side effect's report.
type Outcome struct {
	Kind   OutcomeKind
	Result json.RawMessage
	// Content is the whole result of an MCP upstream (its content items of
	// every type, structuredContent, isError, _meta), kept with the record
	// so that a repeat over MCP gets what the first call got. Nil for
	// other upstreams.
	Content json.RawMessage
	Err     error // for Unknown and NotSent: what went wrong, for the record's note
}

// SideEffect performs the work. It receives the derived key to pass
// downstream (an Idempotency-Key header, MCP _meta). Its context is not
// the caller's: it ends at the tool's timeout, not when the caller gives up.
type SideEffect func(ctx context.Context, key string) Outcome

// Call is one guarded call.
type Call struct {
	Tool     *Tool
	Calendar *Calendar // for business_day windows
	Args     *Args     // parsed at the edge (NewArgs); nil is {}
	RunID    string
}

// Redriver returns the side effect of a record whose lease expired, when
// its upstream honours keys and the call may be re-driven with the same
// key; ok false sends the record to in_doubt instead.
type Redriver func(rec *Record) (tool *Tool, fn SideEffect, ok bool)

// GuardConfig configures a Guard. A nil *GuardConfig means all defaults.
type GuardConfig struct {
	// Clock tells the time. Default: the system clock.
	Clock Clock
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
	// Redrive lets the reaper re-drive expired records. Default: none (expired
	// records go to in_doubt).
	Redrive Redriver
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Observer is told of every side-effect attempt (metrics). Default: none.
	Observer Observer
	// Tracer makes spans of the claim, the side effect, the completion and
	// a repeat served (package tracing). Default: none (no span work at all).
	Tracer Tracer
	// AuditBuffer is how many answer events (repeat served, conflict, …)
	// wait in memory to be written. Default 16384.
	AuditBuffer int
	// AuditWait is how long a call waits for room in a full AuditBuffer
	// before its event is given up and counted as lost. Default 1s.
	AuditWait time.Duration
	// Reconciler asks the reconcile_with read tool of an in-doubt record's
	// tool whether the work happened; the reaper then settles the record.
	// Default: none (in-doubt records wait for a person).
	Reconciler Reconciler
	// ReconcileBackoff is the first wait before asking again about a record
	// whose reconciliation failed or said nothing, doubling up to 10m.
	// Default 10s.
	ReconcileBackoff time.Duration
}

// Observer watches side effects; package metrics implements it.
type Observer interface {
	// SideEffect reports one attempt: its outcome, how long it took, and
	// whether it ran into the tool's timeout.
	SideEffect(tool *Tool, out Outcome, took time.Duration, timedOut bool)
	// AuditLost reports n buffered audit events given up (the store failed
	// their write, or had no room for AuditWait).
	AuditLost(n int)
	// Settled reports an in-doubt record settled, by a person or by
	// reconciliation (by is ActorReconcile then).
	Settled(tool string, happened bool, by string)
}

// Guard runs side effects at most once per key.
type Guard struct {
	store    GuardStore
	clock    Clock
	lease    time.Duration
	retain   time.Duration
	retries  int
	backoff  time.Duration
	redrive  Redriver
	observer Observer
	tracer   Tracer
	events   *eventBuffer
	log      *slog.Logger
	cache    *recordCache
	maxRunID int
	hub      *hub
	unsub    func()
	leases   *leaseKeeper

	ownerPrefix string
	seq         atomic.Uint64
	inflight    sync.WaitGroup

	reconciler  Reconciler
	reconcileAt *reconcileSchedule // when each in-doubt record is asked about again
}

// NewGuard makes a guard over a store.
func NewGuard(store GuardStore, cfg *GuardConfig) *Guard {
	if cfg == nil {
		cfg = &GuardConfig{}
	}
	g := &Guard{
		store:    store,
		clock:    cfg.Clock,
		lease:    cfg.Lease,
		retain:   cfg.Retention,
		retries:  cfg.UnknownRetries,
		backoff:  cfg.RetryBackoff,
		redrive:  cfg.Redrive,
		observer: cfg.Observer,
		tracer:   cfg.Tracer,
		log:      cfg.Logger,
		hub:      newHub(),
	}
	if g.clock == nil {
		g.clock = SystemClock{}
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
			cacheBytes = DefaultCacheBytes
		}
		g.cache = newRecordCache(size, cacheBytes)
	}
	g.maxRunID = cfg.MaxRunIDBytes
	if g.maxRunID <= 0 {
		g.maxRunID = DefaultMaxRunIDBytes
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
	g.events = newEventBuffer(store, g.log, buffer, wait, onLost)
	g.reconciler = cfg.Reconciler
	g.reconcileAt = newReconcileSchedule(cfg.ReconcileBackoff)
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

// Wait waits for the side effects this guard started to finish.
func (g *Guard) Wait() { g.inflight.Wait() }

// Derive derives the key of a call without running anything.
func (g *Guard) Derive(c *Call) (*Derivation, error) {
	if c.Tool == nil {
		return nil, Errorf(CodeUnknownTool, "no tool given")
	}
	if !c.Tool.Kind.SideEffecting() {
		return nil, Errorf(CodeNotCallable, "tool %s is a read tool; it has no key and is not guarded", c.Tool.Name)
	}
	return DeriveKey(KeyInput{Tool: c.Tool, Calendar: c.Calendar, Args: c.Args.Value(), At: g.clock.Now(), RunID: c.RunID})
}

// Do runs fn at most once for the call's key and answers as docs/concepts.md ("The guarded call")
// says: a first call gets its result; a repeat gets the first result with
// Repeat set; a running first call is waited for up to the tool's
// repeat_wait; an in-doubt record gets an in_doubt answer. Errors are for
// bad input (nothing ran), an unreachable store (nothing ran), a request
// that was never sent (nothing was done) and a rejected mismatch.
func (g *Guard) Do(ctx context.Context, c *Call, fn SideEffect) (*Answer, error) {
	if err := CheckRunID(c.RunID, g.maxRunID); err != nil {
		return nil, err // before anything is claimed or buffered
	}
	start := g.clock.Now()
	d, err := g.Derive(c)
	if err != nil {
		return nil, err
	}
	args := c.Args        // nil is {}: Args' methods say so
	hashed := args.JSON() // what the arguments' hash covers: key fields normalized
	if normalizes(args.Value(), d.Parts.Fields) {
		hashed = CanonicalArgs(NormalizeKeyFields(c.Tool, args.Value()))
	}
	return g.do(ctx, &prepared{
		tool: c.Tool, key: d.Key, previous: d.Previous, runID: c.RunID, windowID: d.Parts.WindowID,
		args: args, hash: ArgsHash(hashed),
		expiresAt: g.expiresAt(d, start), start: start,
	}, fn)
}

// DefaultCacheBytes bounds the record cache by bytes (GuardConfig.CacheBytes).
const DefaultCacheBytes = 64 << 20

// MaxKeyBytes caps a key a caller brings (an Idempotency-Key).
const MaxKeyBytes = 512

// MaxRunIDBytes is the guard's cap on run ids (GuardConfig.MaxRunIDBytes).
func (g *Guard) MaxRunIDBytes() int { return g.maxRunID }

// KeyedCall is a call whose key the caller already has, such as the
// Idempotency-Key a client sent to a tool server (see package idempotency).
type KeyedCall struct {
	// Tool supplies the name, on_mismatch, repeat_wait, respond_within and
	// whether the upstream honours keys.
	Tool  *Tool
	Key   string
	Args  *Args // parsed at the edge (NewArgs); nil is {}
	RunID string
	// ExpiresAt is when the record may be purged; zero keeps it.
	ExpiresAt time.Time
}

// DoKeyed is Do for a call whose key is given rather than derived.
func (g *Guard) DoKeyed(ctx context.Context, kc *KeyedCall, fn SideEffect) (*Answer, error) {
	if kc.Tool == nil {
		return nil, Errorf(CodeUnknownTool, "no tool given")
	}
	if kc.Key == "" {
		return nil, FieldErrorf(CodeMissingField, "key", "the key is empty")
	}
	if len(kc.Key) > MaxKeyBytes {
		return nil, FieldErrorf(CodeInvalidArgument, "key", "is %d bytes; a key is at most %d bytes", len(kc.Key), MaxKeyBytes)
	}
	if err := CheckText("key", kc.Key); err != nil {
		return nil, err
	}
	if err := CheckRunID(kc.RunID, g.maxRunID); err != nil {
		return nil, err
	}
	return g.do(ctx, &prepared{
		tool: kc.Tool, key: kc.Key, runID: kc.RunID, windowID: "keyed",
		args: kc.Args, hash: ArgsHash(kc.Args.JSON()), expiresAt: kc.ExpiresAt, start: g.clock.Now(),
	}, fn)
}

// prepared is a call with its key, ready to claim.
type prepared struct {
	tool      *Tool
	key       string
	previous  string
	runID     string
	windowID  string
	args      *Args
	hash      string // ArgsHash of the arguments, key fields normalized
	expiresAt time.Time
	start     time.Time
	deadline  time.Time // respond_within: answer in progress after it; zero: wait
}

// do is the guarded call, in its steps: a repeat just after a window
// boundary, the cache, the run's budget, the claim, and the execution the
// caller waits for.
func (g *Guard) do(ctx context.Context, p *prepared, fn SideEffect) (*Answer, error) {
	if rw := p.tool.RespondWithinOr(); rw > 0 {
		p.deadline = time.Now().Add(rw)
	}
	if a, done, err := g.previousWindow(ctx, p); done {
		return a, err
	}
	if rec := g.cache.get(p.key); rec != nil {
		return g.answerExisting(ctx, p, rec)
	}
	if a, done, err := g.checkBudget(ctx, p); done {
		return a, err
	}
	rec, a, err := g.claim(ctx, p)
	if rec == nil {
		return a, err
	}
	return g.await(ctx, p, rec, fn)
}

// previousWindow answers a repeat from the same run just after a window
// boundary from the previous window's record; done false: it is no such
// repeat.
func (g *Guard) previousWindow(ctx context.Context, p *prepared) (*Answer, bool, error) {
	if p.previous == "" || p.runID == "" {
		return nil, false, nil
	}
	prev, err := g.get(ctx, p.previous)
	switch {
	case err == nil && prev.RunID == p.runID:
		if a, err := g.answerExisting(ctx, p, prev); !errors.Is(err, errReleased) {
			return a, true, err
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return nil, true, err
	}
	return nil, false, nil
}

// checkBudget refuses a new call past the tool's max_calls_per_run; a
// repeat is never refused, so the record is looked for first. done false:
// the call may go on to its claim.
func (g *Guard) checkBudget(ctx context.Context, p *prepared) (*Answer, bool, error) {
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
	case !errors.Is(err, ErrNotFound):
		return nil, true, err
	}
	n, err := g.store.CountRunCalls(ctx, &CountRunCallsParams{RunID: p.runID, Tool: tool.Name})
	if err != nil {
		return nil, true, storeErr("count", err)
	}
	if n < tool.MaxCallsPerRun {
		return nil, false, nil
	}
	g.emit(&AuditEvent{At: g.clock.Now(), Kind: EventBudget, RunID: p.runID, Key: p.key, Tool: tool.Name, Args: p.args.JSON(),
		Error: fmt.Sprintf("max_calls_per_run %d reached", tool.MaxCallsPerRun), Actor: ActorFrom(ctx)})
	return nil, true, &Error{Code: CodeBudgetExceeded, Field: "run_id", Message: fmt.Sprintf(
		"this run has already made %d calls of %s, its limit (max_calls_per_run); this call was refused and nothing was executed. Stop and report to a person instead of retrying",
		n, tool.Name)}
}

// claim inserts the call's record as running. It returns the record when
// this call holds it, or else the answer for a call whose key is taken.
func (g *Guard) claim(ctx context.Context, p *prepared) (*Record, *Answer, error) {
	c := &Claim{
		Key: p.key, Tool: p.tool.Name, RunID: p.runID, WindowID: p.windowID,
		Args: p.args.JSON(), ArgsHash: p.hash, Owner: g.newOwner(), Now: p.start,
		LeaseUntil: p.start.Add(g.lease), ExpiresAt: p.expiresAt, Actor: ActorFrom(ctx),
	}
	for attempt := 0; ; attempt++ {
		sctx, span := ctx, Span(nil)
		if g.tracer != nil {
			sctx, span = g.tracer.Start(ctx, SpanClaim, Attr{AttrToolName, p.tool.Name}, Attr{AttrKey, p.key}, Attr{AttrWindow, p.windowID}, Attr{AttrRunID, p.runID})
		}
		rec, claimed, err := g.store.Claim(sctx, c)
		if span != nil {
			span.Set(Attr{AttrClaimed, claimed})
			span.End(err)
		}
		if err != nil {
			return nil, nil, storeErr("claim", err)
		}
		if claimed || (rec != nil && rec.Owner == c.Owner && rec.State == StateRunning) {
			// Also the record of this call's own claim: the store committed
			// it but lost the reply and, retrying, found the key taken.
			// Owners are unique to a call, so nobody else holds it.
			return rec, nil, nil
		}
		a, err := g.answerExisting(ctx, p, rec)
		// The first call released its claim (its request was never sent):
		// this call may do the work.
		if errors.Is(err, errReleased) && attempt < 3 {
			continue
		}
		if errors.Is(err, errReleased) {
			return nil, &Answer{Status: StatusInProgress, Message: MessageInProgress, Key: p.key}, nil
		}
		return nil, a, err
	}
}

// await runs the claimed call's side effect to its end in the background
// and answers the caller with its outcome, or in progress when the caller
// gives up or respond_within passes first: the side effect goes on and is
// recorded, and the next repeat gets its result.
func (g *Guard) await(ctx context.Context, p *prepared, rec *Record, fn SideEffect) (*Answer, error) {
	done := make(chan result, 1)
	g.inflight.Add(1)
	go func() {
		defer g.inflight.Done()
		done <- g.execute(context.WithoutCancel(ctx), p.tool, rec, fn)
	}()
	var timer <-chan time.Time
	if !p.deadline.IsZero() {
		t := time.NewTimer(time.Until(p.deadline))
		defer t.Stop()
		timer = t.C
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
	}
	return &Answer{Status: StatusInProgress, Message: MessageStillRunning, Key: p.key}, nil
}

type result struct {
	answer *Answer
	err    error
}

// execute runs the side effect of a claimed record to its end, heartbeating
// the lease, and records the outcome.
func (g *Guard) execute(ctx context.Context, tool *Tool, rec *Record, fn SideEffect) result {
	g.leases.hold(rec.Key, rec.Owner)
	defer g.leases.release(rec.Owner)

	var out Outcome
	sentOnce, timedOut := false, false
	// The side effect's span is the upstream's parent (its traceparent
	// goes out beside the key); one span for all attempts, which share it.
	ectx, span := ctx, Span(nil)
	if g.tracer != nil {
		ectx, span = g.tracer.Start(ctx, SpanSideEffect, Attr{AttrToolName, tool.Name}, Attr{AttrKey, rec.Key})
	}
	attempts := 0
	for attempt := 0; ; attempt++ {
		attempts++
		actx, cancel := context.WithTimeout(ectx, tool.TimeoutOr())
		began := time.Now()
		out = g.run(actx, fn, rec.Key)
		timedOut = errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if g.observer != nil {
			g.observer.SideEffect(tool, out, time.Since(began), timedOut)
		}
		if out.Kind == OutcomeNotSent && sentOnce {
			// An earlier attempt may have happened; this one did not even
			// leave, which tells us nothing more.
			out.Kind = OutcomeUnknown
		}
		if out.Kind != OutcomeUnknown {
			break
		}
		sentOnce = true
		if !tool.HonorsKey || attempt >= g.retries {
			break
		}
		select {
		case <-time.After(g.backoff << attempt):
		case <-ctx.Done():
		}
	}

	if span != nil {
		span.Set(Attr{AttrOutcome, out.Kind.String()}, Attr{AttrTimedOut, timedOut}, Attr{AttrAttempts, attempts})
		if out.Kind == OutcomeUnknown || out.Kind == OutcomeNotSent {
			span.End(out.Err)
		} else {
			span.End(nil)
		}
	}
	// The upstream's answer as the store can hold it: the work is done,
	// and a byte the database refuses must not leave it unrecorded.
	comp := &Completion{Key: rec.Key, Owner: rec.Owner, Result: storableJSON(out.Result), Content: storableJSON(out.Content), Actor: ActorFrom(ctx)}
	switch out.Kind {
	case OutcomeNotSent:
		if err := g.retryStore(ctx, func(ctx context.Context) error {
			return g.store.Release(ctx, &ReleaseParams{Key: rec.Key, Owner: rec.Owner})
		}); err != nil {
			g.log.Error("airlock: releasing a claim whose request was never sent", "key", rec.Key, "err", err)
		}
		g.hub.notify(rec.Key)
		msg := MessageNotSent
		if out.Err != nil {
			msg += " (" + out.Err.Error() + ")"
		}
		return result{err: &Error{Code: CodeNotSent, Message: msg, Err: out.Err}}
	case OutcomeSucceeded:
		comp.State = StateSucceeded
	case OutcomeFailed:
		comp.State = StateFailed
	default:
		comp.State = StateInDoubt
		comp.Note = "outcome unknown"
		if out.Err != nil {
			comp.Note += ": " + storableText(out.Err.Error())
		}
	}
	cctx, cspan := ctx, Span(nil)
	if g.tracer != nil {
		cctx, cspan = g.tracer.Start(ctx, SpanComplete, Attr{AttrToolName, tool.Name}, Attr{AttrKey, rec.Key}, Attr{AttrRecordState, string(comp.State)})
	}
	err := g.retryStore(cctx, func(ctx context.Context) error {
		comp.Now = g.clock.Now()
		comp.TimedOut, comp.Took = timedOut, max(0, comp.Now.Sub(rec.CreatedAt))
		return g.store.Complete(ctx, comp)
	})
	if errors.Is(err, ErrLeaseLost) && g.recorded(cctx, comp) {
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
		return result{answer: &Answer{Status: StatusInDoubt, Message: MessageInDoubt}}
	}
	final := *rec
	final.State, final.Result, final.Content, final.Note, final.Owner = comp.State, comp.Result, comp.Content, comp.Note, ""
	if final.State.Final() {
		g.cache.put(&final)
	}
	return result{answer: answerFor(&final, false)}
}

// recorded reports whether the record already holds this completion: its
// state, result and note, released, and changed at the completion's time.
func (g *Guard) recorded(ctx context.Context, comp *Completion) bool {
	rec, err := g.store.Get(ctx, comp.Key)
	return err == nil && rec.State == comp.State && rec.Owner == "" && rec.Note == comp.Note &&
		bytes.Equal(rec.Result, comp.Result) && rec.UpdatedAt.Sub(comp.Now).Abs() < time.Microsecond
}

// run calls fn, turning a panic into an unknown outcome: a side effect that
// crashed may have happened.
func (g *Guard) run(ctx context.Context, fn SideEffect, key string) (out Outcome) {
	defer func() {
		if r := recover(); r != nil {
			out = Outcome{Kind: OutcomeUnknown, Err: fmt.Errorf("side effect panicked: %v", r)}
		}
	}()
	out = fn(ctx, key)
	switch out.Kind {
	case OutcomeSucceeded, OutcomeFailed, OutcomeUnknown, OutcomeNotSent:
	default:
		out = Outcome{Kind: OutcomeUnknown, Err: fmt.Errorf("side effect reported no outcome")}
	}
	return out
}

// retryStore retries a store write for up to one lease: the side effect has
// happened and its outcome must be recorded if at all possible.
func (g *Guard) retryStore(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(g.lease)
	wait := 20 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, ErrLeaseLost) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(wait*2, time.Second)
	}
}

// answerExisting answers a call whose key already has a record.
func (g *Guard) answerExisting(ctx context.Context, p *prepared, rec *Record) (a *Answer, err error) {
	tool := p.tool
	first := rec // rec is replaced below by the waited-for record, which may be nil
	var span Span
	if g.tracer != nil {
		ctx, span = g.tracer.Start(ctx, SpanRepeatServed, Attr{AttrToolName, tool.Name}, Attr{AttrKey, rec.Key}, Attr{AttrRecordState, string(rec.State)})
	}
	defer func() {
		if span != nil {
			if a != nil {
				span.Set(Attr{AttrStatus, string(a.Status)})
			}
			span.End(err)
		}
		g.auditAnswer(ctx, tool, first, p.args, p.runID, a, err)
	}()
	var conflict *Conflict
	if rec.ArgsHash != p.hash {
		// The first call's arguments come back from the store as bytes;
		// they are parsed only here, when the two calls differ.
		first, _ := ParseArgs(rec.Args)
		// Values that normalize alike are the same work, not a conflict.
		fields := DiffArgs(NormalizeKeyFields(tool, first), NormalizeKeyFields(tool, p.args.Value()))
		if tool.OnMismatch == MismatchReject {
			e := &Error{Code: CodeArgumentsMismatch, Message: fmt.Sprintf(
				"this work was already requested with other arguments (differing: %s); the first request stands and this one was refused; nothing was executed",
				strings.Join(fields, ", "))}
			if len(fields) > 0 {
				e.Field = fields[0]
			}
			return nil, e
		}
		conflict = &Conflict{Fields: fields, Message: fmt.Sprintf(
			"this work was already requested with other values for %s; the first request's outcome is returned and this one was not executed",
			strings.Join(fields, ", "))}
	}
	if rec.State == StateRunning {
		var err error
		rec, err = g.waitFinal(ctx, rec.Key, tool.RepeatWaitOr(), p.deadline)
		if err != nil {
			return nil, err
		}
	}
	a = answerFor(rec, true)
	a.Conflict = conflict
	if conflict != nil && a.Message == MessageInProgress {
		a.Message = MessageInProgressOther
	}
	return a, nil
}

// AnswerFor is the answer a record gives: its result once final, in
// progress or in doubt before (an MCP task's result is read so).
func AnswerFor(rec *Record, repeat bool) *Answer { return answerFor(rec, repeat) }

func answerFor(rec *Record, repeat bool) *Answer {
	a := &Answer{Repeat: repeat, Key: rec.Key}
	switch rec.State {
	case StateSucceeded:
		a.Status, a.Result, a.Content = StatusSucceeded, rec.Result, rec.Content
	case StateFailed:
		a.Status, a.Result, a.Content = StatusFailed, rec.Result, rec.Content
	case StateInDoubt:
		a.Status, a.Message = StatusInDoubt, MessageInDoubt
	default:
		a.Status, a.Message = StatusInProgress, MessageInProgress
	}
	return a
}

// errReleased says a running record was removed while a repeat waited for
// it: its request was never sent, and the key is free again.
var errReleased = errors.New("airlock: the first call was released")

// waitFinal waits up to wait (and not past deadline, when set) for a
// running record to leave running. It returns the record as it then is; a
// record released meanwhile (never sent) reads as in progress.
func (g *Guard) waitFinal(ctx context.Context, key string, wait time.Duration, deadline time.Time) (*Record, error) {
	ch, cancel := g.hub.wait(key)
	defer cancel()
	end := time.Now().Add(wait)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	poll := time.NewTicker(g.store.PollInterval())
	defer poll.Stop()
	timeout := time.NewTimer(time.Until(end))
	defer timeout.Stop()
	if err := g.store.Watch(ctx, key); err != nil {
		// Polling still finds the result; only the wake-up is lost.
		g.log.Warn("airlock: watching a running record failed; polling instead", "key", key, "err", err)
	}
	var last *Record
	for {
		rec, err := g.get(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil && last != nil:
			// The caller gave up while we read: it is answered in progress.
			return last, nil
		case errors.Is(err, ErrNotFound):
			return nil, errReleased
		case err != nil:
			return nil, err
		case rec.State != StateRunning:
			return rec, nil
		}
		last = rec
		select {
		case <-ch:
			ch, cancel = g.rearm(key, cancel)
		case <-poll.C:
		case <-timeout.C:
			return rec, nil
		case <-ctx.Done():
			return rec, nil
		}
	}
}

func (g *Guard) rearm(key string, cancel func()) (<-chan struct{}, func()) {
	cancel()
	return g.hub.wait(key)
}

func (g *Guard) get(ctx context.Context, key string) (*Record, error) {
	if rec := g.cache.get(key); rec != nil {
		return rec, nil
	}
	rec, err := g.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
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

func (g *Guard) expiresAt(d *Derivation, now time.Time) time.Time {
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
	var e *Error
	if errors.As(err, &e) && e.Code != CodeInternal {
		return err
	}
	return &Error{Code: CodeStoreUnavailable, Message: "the store could not " + op + " the record, so nothing was executed; retry later", Err: err}
}

// Get returns a record by key (for operators: the API, the CLI).
func (g *Guard) Get(ctx context.Context, key string) (*Record, error) {
	return g.store.Get(ctx, key)
}

// SettleRequest is a decision on an in_doubt record: it happened (with
// its result) or it did not (the record is removed and the key freed).
type SettleRequest struct {
	Key      string
	Happened bool
	Result   json.RawMessage // when it happened: its result, as JSON; optional
	Note     string          // how the settler knows; required
	By       string          // who settles: a person's name, or ActorReconcile
	Role     string          // By's role: RoleAdmin, or RoleSystem for reconciliation
}

// SettledBy is the record's note after a settlement: who, when and how
// they know. Every front end's settlement reads the same.
func SettledBy(by string, at time.Time, note string) string {
	return by + " at " + at.UTC().Format(time.RFC3339) + ": " + note
}

// Settle decides an in_doubt record, whatever the front end (the HTTP API,
// the page, the CLI, reconciliation): the one place a settlement is
// checked, noted and audited with the settler's name. Happened: the record
// becomes succeeded with the result, and repeats get it. Not happened: the
// record is removed and the next call runs the work.
func (g *Guard) Settle(ctx context.Context, r SettleRequest) (*Record, error) {
	note := strings.TrimSpace(r.Note)
	switch {
	case r.Key == "":
		return nil, FieldErrorf(CodeInvalidArgument, "key", "required: the record's key")
	case note == "":
		return nil, FieldErrorf(CodeInvalidArgument, "note", "a note is required: how you know whether it happened (it goes in the audit trail)")
	case strings.TrimSpace(r.By) == "":
		return nil, FieldErrorf(CodeInvalidArgument, "by", "required: who settles the record (it goes in the audit trail)")
	case r.Role != RoleAdmin && r.Role != RoleSystem:
		return nil, FieldErrorf(CodeForbidden, "role", "only an admin settles records; %s is %q", r.By, r.Role)
	case r.Happened && len(r.Result) > 0 && !json.Valid(r.Result):
		return nil, FieldErrorf(CodeInvalidArgument, "result", "the result must be valid JSON")
	}
	if err := CheckText("note", note); err != nil {
		return nil, err
	}
	if len(r.Result) > 0 {
		if err := CheckJSONText("result", r.Result); err != nil {
			return nil, err
		}
	}
	result := r.Result
	if !r.Happened {
		result = nil
	}
	now := g.clock.Now()
	rec, err := g.store.Settle(ctx, &Settlement{Key: r.Key, Happened: r.Happened, Result: result, Note: SettledBy(r.By, now, note), Now: now, Actor: r.By})
	if err != nil {
		return nil, err
	}
	g.hub.notify(r.Key)
	if g.observer != nil {
		g.observer.Settled(rec.Tool, r.Happened, r.By)
	}
	return rec, nil
}

// ReapStats counts what one reaper pass did.
type ReapStats struct {
	InDoubt  int // expired records moved to in_doubt
	Redriven int // expired records re-driven with the same key
	Purged   int // records past retention removed
}

// Reap moves records whose lease expired (their process died) to in_doubt,
// or re-drives them when the upstream honours keys, and purges records past
// retention. Every change is conditional, so all replicas may reap at once.
func (g *Guard) Reap(ctx context.Context) (ReapStats, error) {
	var st ReapStats
	now := g.clock.Now()
	recs, err := g.store.ExpiredLeases(ctx, now, 100)
	if err != nil {
		return st, err
	}
	for _, rec := range recs {
		if g.redrive != nil {
			if tool, fn, ok := g.redrive(rec); ok && tool.HonorsKey {
				owner := g.newOwner()
				taken, ok, err := g.store.TakeOver(ctx, &TakeOverParams{Key: rec.Key, Owner: owner, Now: now, LeaseUntil: now.Add(g.lease)})
				if err != nil {
					return st, err
				}
				if ok {
					st.Redriven++
					g.inflight.Add(1)
					go func() {
						defer g.inflight.Done()
						g.execute(context.Background(), tool, taken, fn)
					}()
				}
				continue
			}
		}
		ok, err := g.store.ExpireLease(ctx, &ExpireLeaseParams{Key: rec.Key, Now: now, Note: "lease expired: the call's outcome was not recorded (its process stopped, or could not reach the store) and it is not known whether it happened"})
		if err != nil {
			return st, err
		}
		if ok {
			st.InDoubt++
			g.hub.notify(rec.Key)
		}
	}
	for {
		n, err := g.store.Purge(ctx, now, 1000)
		st.Purged += n
		if err != nil || n < 1000 {
			return st, err
		}
	}
}

// RunReaper reaps every interval until ctx ends; each pass then asks the
// Reconciler about in-doubt records (Reconcile).
func (g *Guard) RunReaper(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := g.Reap(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn("airlock: reaper pass failed", "err", err)
			}
			if _, err := g.Reconcile(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn("airlock: reconciliation pass failed", "err", err)
			}
		}
	}
}

// AuditDropped counts buffered audit events (repeats, conflicts, in-progress
// answers, budget refusals) that could not be written.
func (g *Guard) AuditDropped() int64 { return g.events.Dropped.Load() }
