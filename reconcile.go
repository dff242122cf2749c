package airlock

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// ActorReconcile is the actor of settlements made by reconciliation.
const ActorReconcile = "reconcile"

// Verdict is what a reconcile_with tool's answer says about in-doubt work.
type Verdict string

// Verdicts.
const (
	VerdictHappened    Verdict = "happened"     // the work was done; settle with the answer
	VerdictNotHappened Verdict = "not_happened" // it was not; settle and free the key
	VerdictUnknown     Verdict = "unknown"      // the answer does not say; ask again later
)

// Reconciliation is the finding about one in-doubt record.
type Reconciliation struct {
	Verdict Verdict
	Tool    string          // the read tool that was asked
	Answer  json.RawMessage // its answer
}

// Reconciler asks a tool's reconcile_with read tool whether an in-doubt
// record's work happened. Package reconcile implements it.
type Reconciler interface {
	// Automatic reports whether the tool's in-doubt records are settled by
	// reconciliation (the tool names reconcile_with and its conditions).
	Automatic(tool string) bool
	// Reconcile asks about rec. An error is a read tool that failed or a
	// condition that could not be evaluated: the record stays in doubt.
	Reconcile(ctx context.Context, rec *Record) (*Reconciliation, error)
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
func (g *Guard) Reconcile(ctx context.Context) (ReconcileStats, error) {
	var st ReconcileStats
	if g.reconciler == nil {
		return st, nil
	}
	now := g.clock.Now()
	seen := map[string]bool{}
	// Every in-doubt record, a page at a time: a page of records whose
	// read tool keeps failing must not hide the ones after it.
	f := RecordFilter{State: StateInDoubt, Limit: reconcileBatch}
	for {
		recs, err := g.store.ListRecords(ctx, f)
		if err != nil {
			return st, err
		}
		if err := g.reconcilePage(ctx, recs, now, seen, &st); err != nil {
			return st, err
		}
		if len(recs) < reconcileBatch {
			break
		}
		f.After = RecordCursor(recs[len(recs)-1])
	}
	g.reconcileAt.forget(seen)
	return st, nil
}

func (g *Guard) reconcilePage(ctx context.Context, recs []*Record, now time.Time, seen map[string]bool, st *ReconcileStats) error {
	for _, rec := range recs {
		seen[rec.Key] = true
		if !g.reconciler.Automatic(rec.Tool) || !g.reconcileAt.isDue(rec.Key, now) {
			continue
		}
		st.Asked++
		found, err := g.reconciler.Reconcile(ctx, rec)
		if err != nil || found.Verdict == VerdictUnknown {
			st.Failed++
			n := g.reconcileAt.failed(rec.Key, now)
			if err != nil {
				g.log.Warn("airlock: reconciling an in-doubt record failed; asking again later", "key", rec.Key, "tool", rec.Tool, "attempt", n, "err", err)
			}
			continue
		}
		happened := found.Verdict == VerdictHappened
		var result json.RawMessage
		note := found.Tool + " says the work did not happen"
		if happened {
			result, note = found.Answer, found.Tool+" says the work happened"
		}
		_, err = g.Settle(ctx, SettleRequest{Key: rec.Key, Happened: happened, Result: result, Note: note + ": " + string(found.Answer), By: ActorReconcile, Role: RoleSystem})
		switch {
		case err == nil && happened:
			st.Happened++
		case err == nil:
			st.NotHappened++
		case ErrorCode(err) == CodeNotFound, ErrorCode(err) == CodeConflict:
			// Settled meanwhile, by a person or another replica.
		default:
			return err
		}
		g.reconcileAt.done(rec.Key)
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
