package guard

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/maintenance"
)

// Redriver returns the side effect of a record whose lease expired, when
// its upstream honours keys and the call may be re-driven with the same
// key; ok false sends the record to in_doubt instead.
type Redriver func(rec *airlock.Record) (tool *airlock.Tool, fn airlock.SideEffect, ok bool)

// ReaperConfig configures a Reaper. A nil *ReaperConfig means all defaults.
type ReaperConfig struct {
	// Interval is the time between passes (each a Reap, then a Reconcile)
	// once started. Default 1s.
	Interval time.Duration
	// Redrive lets the reaper re-drive expired records. Default: none
	// (expired records go to in_doubt).
	Redrive Redriver
	// Leave names the expired records the reaper leaves running for a while
	// (at most TakeOverWindow past their lease), for their callers to take
	// over with the same key (Claim does): claims of a tool run by its
	// caller that honours keys. Default: none.
	Leave func(rec *airlock.Record) bool
	// TakeOverWindow is how long past its lease a left record waits to be
	// taken over before it goes in doubt. Default: ten leases.
	TakeOverWindow time.Duration
	// Reconciler asks the reconcile_with read tool of an in-doubt record's
	// tool whether the work happened; the reaper then settles the record.
	// Default: none (in-doubt records wait for a person).
	Reconciler airlock.Reconciler
	// ReconcileBackoff is the first wait before asking again about a record
	// whose reconciliation failed or said nothing, doubling up to 10m.
	// Default 10s.
	ReconcileBackoff time.Duration
	// Logger. Default: the guard's.
	Logger *slog.Logger
}

// Reaper is the guard's maintenance, apart from its call path: it moves
// records whose lease ended (their process died) to in_doubt or re-drives
// them, purges records past retention, and reconciles in-doubt records.
// It reads the guard's clock. Every change it makes is conditional, so
// every replica runs one. Start runs its passes every Interval until Stop;
// Reap and Reconcile run one pass each (tests).
type Reaper struct {
	g          *Guard
	redrive    Redriver
	leave      func(rec *airlock.Record) bool
	takeOver   time.Duration
	reconciler airlock.Reconciler
	schedule   *reconcileSchedule // when each in-doubt record is asked about again
	log        *slog.Logger
	service    *maintenance.Service // its passes, every interval of the guard's clock
}

// NewReaper makes the maintenance of g; it does nothing until Start (or a
// Reap or Reconcile).
func NewReaper(g *Guard, cfg *ReaperConfig) *Reaper {
	if cfg == nil {
		cfg = &ReaperConfig{}
	}
	r := &Reaper{g: g, redrive: cfg.Redrive, leave: cfg.Leave, takeOver: cfg.TakeOverWindow, reconciler: cfg.Reconciler,
		schedule: newReconcileSchedule(cfg.ReconcileBackoff), log: cfg.Logger}
	if r.takeOver <= 0 {
		r.takeOver = 10 * g.lease
	}
	interval := cfg.Interval
	if interval <= 0 {
		interval = time.Second
	}
	if r.log == nil {
		r.log = g.log
	}
	r.service = maintenance.New(r.pass, maintenance.Config{Interval: interval, Clock: g.clock})
	return r
}

// Start runs a pass every Interval, by the guard's clock, until ctx ends or
// Stop is called; maintenance.ErrStarted when it already runs.
func (r *Reaper) Start(ctx context.Context) error { return r.service.Start(ctx) }

// Stop ends the passes and waits for the one under way to return; the side
// effects it re-drove are the guard's (Guard.Close waits for them).
func (r *Reaper) Stop() { r.service.Stop() }

func (r *Reaper) pass(ctx context.Context) {
	if _, err := r.Reap(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("airlock: reaper pass failed", "err", err)
	}
	if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("airlock: reconciliation pass failed", "err", err)
	}
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
func (r *Reaper) Reap(ctx context.Context) (ReapStats, error) {
	var st ReapStats
	now := r.g.clock.Now()
	recs, err := r.g.store.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: now, Limit: 100})
	if err != nil {
		return st, err
	}
	for _, rec := range recs {
		if r.leave != nil && now.Before(rec.LeaseUntil.Add(r.takeOver)) && r.leave(rec) {
			continue
		}
		if r.redrive != nil {
			if tool, fn, ok := r.redrive(rec); ok && tool.HonorsKey {
				owner := r.g.newOwner()
				taken, ok, err := r.g.store.TakeOver(ctx, &airlock.TakeOverParams{Key: rec.Key, Owner: owner, Now: now, LeaseUntil: now.Add(r.g.lease)})
				if err != nil {
					return st, err
				}
				if ok {
					st.Redriven++
					r.g.inflight.Add(1)
					go func() {
						defer r.g.inflight.Done()
						r.g.execute(context.Background(), tool, taken, fn)
					}()
				}
				continue
			}
		}
		ok, err := r.g.store.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: rec.Key, Now: now, Note: "lease expired: the call's outcome was not recorded (its process stopped, or could not reach the store) and it is not known whether it happened"})
		if err != nil {
			return st, err
		}
		if ok {
			st.InDoubt++
			r.g.hub.notify(rec.Key)
		}
	}
	for {
		n, err := r.g.store.Purge(ctx, &airlock.PurgeParams{Now: now, Limit: 1000})
		st.Purged += n
		if err != nil || n < 1000 {
			return st, err
		}
	}
}

// ReconcileStats counts what one reconciliation pass did.
type ReconcileStats struct {
	Asked       int // records whose read tool was asked
	Happened    int // settled as happened
	NotHappened int // settled as not happened (key freed)
	Failed      int // read tool failed, or the answer said nothing; asked again later
}

// reconcileAttempt is when to ask about a record again, after n attempts.
type reconcileAttempt struct {
	next time.Time
	n    int
}

// maxReconcileBackoff bounds the wait between attempts on one record.
const maxReconcileBackoff = 10 * time.Minute

// reconcileBatch is the page of in-doubt records read at a time.
const reconcileBatch = 1000

// Reconcile asks the Reconciler about the in-doubt records of tools that
// reconcile automatically and settles those whose answer says whether the
// work happened, with actor ActorReconcile (audited like any settlement).
// A record whose read tool fails or whose answer says nothing is asked
// again after a backoff (ReconcileBackoff, doubling up to 10m). Settling is
// conditional on the record still being in doubt, so every replica may
// reconcile at once and a person may settle first.
func (r *Reaper) Reconcile(ctx context.Context) (ReconcileStats, error) {
	var st ReconcileStats
	if r.reconciler == nil {
		return st, nil
	}
	now := r.g.clock.Now()
	seen := map[string]bool{}
	// Every in-doubt record, a page at a time: a page of records whose
	// read tool keeps failing must not hide the ones after it.
	f := airlock.RecordFilter{State: airlock.StateInDoubt, Limit: reconcileBatch}
	for {
		recs, err := r.g.store.ListRecords(ctx, f)
		if err != nil {
			return st, err
		}
		if err := r.reconcilePage(ctx, recs, now, seen, &st); err != nil {
			return st, err
		}
		if len(recs) < reconcileBatch {
			break
		}
		f.After = airlock.RecordCursor(recs[len(recs)-1])
	}
	r.schedule.forget(seen)
	return st, nil
}

func (r *Reaper) reconcilePage(ctx context.Context, recs []*airlock.Record, now time.Time, seen map[string]bool, st *ReconcileStats) error {
	for _, rec := range recs {
		seen[rec.Key] = true
		if !r.reconciler.Asks(rec.Tool) || !r.schedule.isDue(rec.Key, now) {
			continue
		}
		st.Asked++
		found, err := r.reconciler.Reconcile(ctx, rec)
		if err != nil || found.Verdict == airlock.VerdictUnknown {
			st.Failed++
			n := r.schedule.failed(rec.Key, now)
			if err != nil {
				r.log.Warn("airlock: reconciling an in-doubt record failed; asking again later", "key", rec.Key, "tool", rec.Tool, "attempt", n, "err", err)
			}
			continue
		}
		happened := found.Verdict == airlock.VerdictHappened
		var result json.RawMessage
		note := found.Tool + " says the work did not happen"
		if happened {
			result, note = found.Answer, found.Tool+" says the work happened"
		}
		_, err = r.g.Settle(ctx, airlock.SettleRequest{Key: rec.Key, Happened: happened, Result: result, Note: note + ": " + airlock.Shorten(string(found.Answer), airlock.MaxNoteBytes/2), By: airlock.ActorReconcile, Role: airlock.RoleSystem})
		switch {
		case err == nil && happened:
			st.Happened++
		case err == nil:
			st.NotHappened++
		case airlock.ErrorCode(err) == airlock.CodeNotFound, airlock.ErrorCode(err) == airlock.CodeConflict:
			// Settled meanwhile, by a person or another replica.
		default:
			return err
		}
		r.schedule.done(rec.Key)
	}
	return nil
}

// reconcileSchedule is when each in-doubt record may be asked about again:
// a record whose read tool failed, or whose answer said nothing, waits a
// backoff that doubles up to maxReconcileBackoff.
type reconcileSchedule struct {
	backoff time.Duration
	mu      sync.Mutex
	due     map[string]reconcileAttempt // by key
}

func newReconcileSchedule(backoff time.Duration) *reconcileSchedule {
	if backoff <= 0 {
		backoff = 10 * time.Second
	}
	return &reconcileSchedule{backoff: backoff, due: map[string]reconcileAttempt{}}
}

func (r *reconcileSchedule) isDue(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.due[key]
	return !ok || !now.Before(a.next)
}

// failed schedules the next attempt and returns how many there were.
func (r *reconcileSchedule) failed(key string, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.due[key]
	wait := min(r.backoff<<min(a.n, 20), maxReconcileBackoff)
	a.n++
	a.next = now.Add(wait)
	r.due[key] = a
	return a.n
}

func (r *reconcileSchedule) done(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.due, key)
}

// forget drops the backoff of records no longer in doubt (settled by a
// person or elsewhere), so the map stays as small as the backlog.
func (r *reconcileSchedule) forget(inDoubt map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.due {
		if !inDoubt[key] {
			delete(r.due, key)
		}
	}
}
