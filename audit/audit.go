// Package audit reads, verifies and exports the audit log (docs/audit.md).
// Events are written unsealed in the transaction of the change they
// describe; the sealer (NewSealer) gives them consecutive sequence numbers
// and chains each event's hash to the previous one, afterwards and in one
// place, so the hot path never waits on the chain. Verify walks the chain
// and names the first event that was edited, deleted, inserted or moved.
//
// Retention removes a prefix of the chain (Purge), after it has been
// archived (Export, to JSON lines that VerifyExport checks on their own);
// an anchor row keeps the hash the purged prefix ended with, so the chain
// stays verifiable from the first event kept.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/maintenance"
)

// Problem is the first break in the chain.
type Problem struct {
	Seq     int64  `json:"seq"`
	ID      int64  `json:"id,omitempty"`
	Kind    string `json:"kind"` // edited | deleted | inserted_or_reordered
	Message string `json:"message"`
}

// Report is the outcome of Verify.
type Report struct {
	Events   int64    `json:"events"`   // sealed events checked
	Unsealed int      `json:"unsealed"` // events written but not sealed yet
	OK       bool     `json:"ok"`
	Problem  *Problem `json:"problem,omitempty"`
	// Anchor is where the kept chain begins when retention has purged a
	// prefix of it (omitted when nothing was purged).
	Anchor *airlock.AuditAnchor `json:"anchor,omitempty"`
	// Head is the last sealed event (sequence number and hash): record it
	// outside the database and pass it back (--expect-head) to find a
	// truncated or rewritten tail, which the chain alone cannot show.
	Head airlock.AuditAnchor `json:"head"`
}

// Expect is what an operator recorded of the chain earlier, outside the
// database (Report.Head, the log line of a seal, airlock_audit_head_seq).
type Expect struct {
	// Head is a hash the chain must still hold (a head recorded earlier,
	// or a prefix of it of at least 12 hex digits). "": not checked.
	Head string
	// Count is a sequence number the chain must reach: at least this many
	// events were sealed. 0: not checked.
	Count int64
}

const page = 1000

// chain checks events one after another from a starting point.
type chain struct {
	r        *Report
	prevSeq  int64
	prevHash string
}

// next checks e against the event before it; false at the first break.
func (c *chain) next(e *airlock.AuditEvent) bool {
	switch {
	case e.Seq != c.prevSeq+1:
		c.r.Problem = &Problem{Seq: c.prevSeq + 1, Kind: "deleted", Message: fmt.Sprintf(
			"event %d is missing (the chain jumps from %d to %d): deleted", c.prevSeq+1, c.prevSeq, e.Seq)}
	case e.PrevHash != c.prevHash:
		c.r.Problem = &Problem{Seq: e.Seq, ID: e.ID, Kind: "inserted_or_reordered", Message: fmt.Sprintf(
			"event %d (id %d, %s) does not follow event %d: inserted or reordered", e.Seq, e.ID, e.Kind, c.prevSeq)}
	case e.ChainHash(c.prevHash) != e.Hash:
		c.r.Problem = &Problem{Seq: e.Seq, ID: e.ID, Kind: "edited", Message: fmt.Sprintf(
			"event %d (id %d, %s) does not match its hash: edited", e.Seq, e.ID, e.Kind)}
	}
	if c.r.Problem != nil {
		c.r.OK = false
		return false
	}
	c.r.Events++
	c.prevSeq, c.prevHash = e.Seq, e.Hash
	return true
}

// Verify checks the whole chain, from the anchor of the purged prefix when
// retention has purged one (the first kept event must follow it).
func Verify(ctx context.Context, s airlock.AuditStore) (*Report, error) {
	return VerifyExpecting(ctx, s, Expect{})
}

// VerifyExpecting is Verify that also holds the chain to what was recorded
// of it before: deleting the last events, or all of them, or rewriting the
// tail and sealing it again, leaves a chain that verifies on its own, but
// not one that still holds the recorded head or reaches the recorded count.
func VerifyExpecting(ctx context.Context, s airlock.AuditStore, want Expect) (*Report, error) {
	if want.Head != "" && len(want.Head) < 12 {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "expect-head", "%q is too short: give at least 12 hex digits of the head's hash", want.Head)
	}
	r := &Report{OK: true}
	headFound := want.Head == ""
	holds := func(hash string) bool { return len(hash) >= len(want.Head) && hash[:len(want.Head)] == want.Head }
	anchor, err := s.AuditAnchor(ctx)
	if err != nil {
		return nil, err
	}
	if anchor.Seq > 0 {
		r.Anchor = &anchor
	}
	c := &chain{r: r, prevSeq: anchor.Seq, prevHash: anchor.Hash}
	if !headFound && anchor.Seq > 0 && holds(anchor.Hash) {
		headFound = true // the recorded head was purged since; the chain goes on from it
	}
	for {
		events, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: c.prevSeq, Limit: page})
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			if !c.next(e) {
				return r, nil
			}
			if !headFound && holds(e.Hash) {
				headFound = true
			}
		}
		if len(events) < page {
			break
		}
	}
	r.Head = airlock.AuditAnchor{Seq: c.prevSeq, Hash: c.prevHash}
	n, err := s.UnsealedAudit(ctx)
	if err != nil {
		return nil, err
	}
	r.Unsealed = n
	switch {
	case want.Count > 0 && r.Head.Seq < want.Count:
		r.OK = false
		r.Problem = &Problem{Seq: r.Head.Seq + 1, Kind: "truncated", Message: fmt.Sprintf(
			"the chain ends at event %d, but %d were sealed: events at the end were deleted", r.Head.Seq, want.Count)}
	case !headFound:
		r.OK = false
		r.Problem = &Problem{Seq: r.Head.Seq + 1, Kind: "truncated", Message: fmt.Sprintf(
			"the chain no longer holds the head recorded earlier (%s): events up to it were deleted, or rewritten and sealed again", want.Head)}
	}
	return r, nil
}

// VerifyExport checks the chain of an export (JSON lines as Export writes
// them): each event follows the one before it and matches its hash. The
// first event is taken as it is — its predecessor is in an earlier export
// or purged (Report.Anchor then says where the file begins).
func VerifyExport(r io.Reader) (*Report, error) {
	rep := &Report{OK: true}
	dec := json.NewDecoder(r)
	var c *chain
	for line := 1; ; line++ {
		var e airlock.AuditEvent
		if err := dec.Decode(&e); err == io.EOF {
			return rep, nil
		} else if err != nil {
			return nil, fmt.Errorf("event %d of the export: %w", line, err)
		}
		if c == nil {
			rep.Anchor = &airlock.AuditAnchor{Seq: e.Seq - 1, Hash: e.PrevHash}
			c = &chain{r: rep, prevSeq: e.Seq - 1, prevHash: e.PrevHash}
		}
		if !c.next(&e) {
			return rep, nil
		}
	}
}

// SeqAt returns the sequence number of the first sealed event at or after
// t, found by a binary search over sequence numbers (events are sealed in
// about the order they were written, so their times rise with their
// numbers; events committed out of time order by clock skew between
// replicas fall on either side). When no sealed event is at or after t it
// returns the number the next event will be sealed with.
func SeqAt(ctx context.Context, s airlock.AuditStore, t time.Time) (int64, error) {
	anchor, err := s.AuditAnchor(ctx)
	if err != nil {
		return 0, err
	}
	first, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: anchor.Seq, Limit: 1})
	if err != nil || len(first) == 0 {
		return anchor.Seq + 1, err
	}
	lo, hi := first[0].Seq, first[0].Seq
	if !first[0].At.Before(t) {
		return lo, nil
	}
	// The last sealed event: grow the upper bound until past the end.
	step := int64(page)
	for {
		ev, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: hi + step - 1, Limit: 1})
		if err != nil {
			return 0, err
		}
		if len(ev) == 0 {
			hi += step
			break
		}
		if !ev[0].At.Before(t) {
			hi = ev[0].Seq
			break
		}
		lo, hi = ev[0].Seq, ev[0].Seq
		step *= 2
	}
	// Invariant: the event at lo is before t; the answer is in (lo, hi].
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ev, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: mid - 1, Limit: 1})
		if err != nil {
			return 0, err
		}
		switch {
		case len(ev) == 0:
			hi = mid
		case ev[0].At.Before(t):
			lo = ev[0].Seq
		default:
			hi = ev[0].Seq
		}
	}
	return hi, nil
}

// Range is the part of the chain an export or a purge covers: sealed
// events with From <= Seq < To.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// RangeOf maps a period to sequence numbers: from the first sealed event
// at or after since (zero: the first kept) to the first at or after until
// (zero: past the last sealed). Consecutive periods map to consecutive
// ranges, so exports of one day after another cover the chain once, and
// `purge --before T` removes exactly what `export --until T` ended with.
func RangeOf(ctx context.Context, s airlock.AuditStore, since, until time.Time) (Range, error) {
	var r Range
	var err error
	if since.IsZero() {
		var a airlock.AuditAnchor
		a, err = s.AuditAnchor(ctx)
		r.From = a.Seq + 1
	} else {
		r.From, err = SeqAt(ctx, s, since)
	}
	if err != nil {
		return r, err
	}
	if until.IsZero() {
		r.To = math.MaxInt64
	} else if r.To, err = SeqAt(ctx, s, until); err != nil {
		return r, err
	}
	return r, nil
}

// ExportStats says what an export wrote.
type ExportStats struct {
	Events   int64  `json:"events"`
	FirstSeq int64  `json:"first_seq,omitempty"`
	LastSeq  int64  `json:"last_seq,omitempty"`
	PrevHash string `json:"prev_hash,omitempty"` // the hash the first event follows
	LastHash string `json:"last_hash,omitempty"` // the last event's hash
}

// Export writes the sealed events of [since, until) (RangeOf; zero times
// leave that end open) as JSON lines, in chain order.
func Export(ctx context.Context, s airlock.AuditStore, since, until time.Time, w io.Writer) (*ExportStats, error) {
	rg, err := RangeOf(ctx, s, since, until)
	if err != nil {
		return nil, err
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	st := &ExportStats{}
	after := rg.From - 1
	for after+1 < rg.To {
		events, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: after, Limit: page})
		if err != nil {
			return st, err
		}
		for _, e := range events {
			if e.Seq >= rg.To {
				return st, nil
			}
			after = e.Seq
			if err := enc.Encode(e); err != nil {
				return st, err
			}
			if st.Events == 0 {
				st.FirstSeq, st.PrevHash = e.Seq, e.PrevHash
			}
			st.Events++
			st.LastSeq, st.LastHash = e.Seq, e.Hash
		}
		if len(events) < page {
			break
		}
	}
	return st, nil
}

// PurgeStats says what a purge removed.
type PurgeStats struct {
	Events  int                 `json:"events"`
	Batches int                 `json:"batches"`
	Anchor  airlock.AuditAnchor `json:"anchor"`
}

// Purge deletes the sealed events before before (the prefix of the chain
// RangeOf ends there) in batches of batch events, each its own short
// transaction, and moves the anchor with each batch.
func Purge(ctx context.Context, s airlock.AuditStore, before time.Time, batch int) (*PurgeStats, error) {
	if batch <= 0 {
		batch = page
	}
	through, err := SeqAt(ctx, s, before)
	if err != nil {
		return nil, err
	}
	st := &PurgeStats{}
	for {
		n, err := s.PurgeAudit(ctx, &airlock.PurgeAuditParams{Through: through - 1, Limit: batch})
		st.Events += n
		if n > 0 {
			st.Batches++
		}
		if err != nil {
			return st, err
		}
		if n < batch {
			break
		}
	}
	st.Anchor, err = s.AuditAnchor(ctx)
	return st, err
}

// SealPending seals every event written so far, page by page, and returns
// how many it sealed (a stopping server's last pass).
func SealPending(ctx context.Context, s airlock.AuditStore) (int, error) {
	total := 0
	for {
		n, err := s.SealAudit(ctx, page)
		total += n
		if err != nil || n < page {
			return total, err
		}
	}
}

// NewSealer is the service that seals new events every interval (a pass
// at start, then one per interval, until stopped); each pass that sealed
// any logs the chain's head, and sealed, when set, is told how many events
// the pass sealed and the head. The passes follow clock (nil: the
// system's).
func NewSealer(s airlock.AuditStore, every time.Duration, clock clockwork.Clock, log *slog.Logger, sealed func(n int, head airlock.AuditAnchor)) *maintenance.Service {
	return maintenance.New(func(ctx context.Context) { sealPass(ctx, s, log, sealed) }, maintenance.Config{Interval: every, RunAtStart: true, Clock: clock})
}

func sealPass(ctx context.Context, s airlock.AuditStore, log *slog.Logger, sealed func(n int, head airlock.AuditAnchor)) {
	for {
		n, err := s.SealAudit(ctx, page)
		if err == nil && n > 0 {
			// The head, outside the database: in the log (and, through
			// sealed, the metrics), so that a truncated tail is found.
			head, herr := s.AuditHead(ctx)
			if herr == nil && log != nil {
				log.Info("airlock: audit log sealed", "events", n, "head_seq", head.Seq, "head_hash", head.Hash)
			}
			if herr == nil && sealed != nil {
				sealed(n, head)
			}
		}
		if err != nil {
			if ctx.Err() == nil && log != nil {
				log.Warn("airlock: sealing the audit log", "err", err)
			}
			return
		}
		if n < page {
			return
		}
	}
}

// RetentionStore is what NewRetention purges: the log and its rollup.
type RetentionStore interface {
	airlock.AuditStore
	airlock.FigureStore
}

// Retention configures NewRetention; zero fields take their defaults.
type Retention struct {
	// Audit is how long sealed events are kept. Default 0: forever.
	Audit time.Duration
	// Figures is how long the rollup is kept. Default 0: forever.
	Figures time.Duration
	// Every is how often a pass runs. Default 1m.
	Every time.Duration
	// Batch is how many rows one transaction deletes. Default 1000.
	Batch int
	// Logger reports failed passes. Default: none.
	Logger *slog.Logger
	// Clock times the passes and is the "now" retention counts back
	// from. Default: the system clock.
	Clock clockwork.Clock
	// Purged, when set, is told what each pass removed.
	Purged func(events, figureRows int)
}

// NewRetention is the service that purges audit events and rollup rows
// past their retention every cfg.Every (a pass at start, then one per
// interval, until stopped), each in short batches (the purge never holds a
// long lock; several replicas may run it at once). Nil when cfg keeps
// everything.
func NewRetention(s RetentionStore, cfg Retention) *maintenance.Service {
	if cfg.Audit <= 0 && cfg.Figures <= 0 {
		return nil
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Minute
	}
	cfg.Clock = clocks.Or(cfg.Clock)
	return maintenance.New(func(ctx context.Context) {
		events, rows, err := RetentionPass(ctx, s, cfg.Clock.Now(), cfg)
		if cfg.Purged != nil && (events > 0 || rows > 0) {
			cfg.Purged(events, rows)
		}
		if err != nil && ctx.Err() == nil && cfg.Logger != nil {
			cfg.Logger.Warn("airlock: retention purge", "err", err)
		}
	}, maintenance.Config{Interval: cfg.Every, RunAtStart: true, Clock: cfg.Clock})
}

// RetentionPass is one pass of NewRetention's service at now.
func RetentionPass(ctx context.Context, s RetentionStore, now time.Time, cfg Retention) (events, figureRows int, err error) {
	if cfg.Batch <= 0 {
		cfg.Batch = page
	}
	if cfg.Audit > 0 {
		st, err := Purge(ctx, s, now.Add(-cfg.Audit), cfg.Batch)
		if st != nil {
			events = st.Events
		}
		if err != nil {
			return events, 0, err
		}
	}
	if cfg.Figures > 0 {
		for {
			n, err := s.PurgeFigures(ctx, &airlock.PurgeFiguresParams{Before: now.Add(-cfg.Figures), Limit: cfg.Batch})
			figureRows += n
			if err != nil || n < cfg.Batch {
				return events, figureRows, err
			}
		}
	}
	return events, figureRows, nil
}
