package guard

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/jonboulle/clockwork"
)

// Events that are not state changes (a repeat served, a conflict, an
// in-progress answer, a budget refusal) are buffered and written in batches
// in the background, so that serving a repeat from memory stays cheap. A
// crash may lose the last of them; it never loses the event of a change,
// which is written in the change's own transaction.
//
// When events come faster than the store takes them (a burst of repeats
// served from memory), the buffer fills and the caller waits for room
// instead of the event being lost: the answer is slower, the log complete.
// Events are lost only when the store fails the write (a batch that fails
// is written again event by event, so only the events that fail alone are
// lost) or takes
// nothing for AuditWait (the waiting event); each is counted in Dropped
// (airlock_audit_incomplete_total).
type eventBuffer struct {
	store   airlock.AuditWriter
	clock   clockwork.Clock
	log     *slog.Logger
	ch      chan *airlock.AuditEvent
	wait    time.Duration
	quit    chan struct{} // closed by close: write what is queued and stop
	done    chan struct{}
	closed  sync.Once
	Dropped atomic.Int64
	onLost  func(n int) // the observer's AuditLost, or nil
	// unreported is how many lost events no events_lost event in the log
	// counts yet; the next write carries one.
	unreported atomic.Int64
}

// lose counts n events given up, in the metric now and in the log with
// the next write (an events_lost event), so that the report computed from
// the store — in any process — counts them too.
func (b *eventBuffer) lose(n int) {
	b.Dropped.Add(int64(n))
	b.unreported.Add(int64(n))
	if b.onLost != nil {
		b.onLost(n)
	}
}

// lostEvent is the log's own record of n events given up.
func lostEvent(n int64, at time.Time) *airlock.AuditEvent {
	return &airlock.AuditEvent{At: at, Kind: airlock.EventLost, Actor: airlock.ActorSystem,
		Result: json.RawMessage(`{"lost":` + strconv.FormatInt(n, 10) + `}`), DurationUS: n}
}

// maxEventWrite bounds the events written in one AppendAudit: everything
// waiting, up to this, goes in one transaction.
const maxEventWrite = 4096

func newEventBuffer(s airlock.AuditWriter, clock clockwork.Clock, log *slog.Logger, size int, wait time.Duration, onLost func(int)) *eventBuffer {
	b := &eventBuffer{store: s, clock: clock, log: log, onLost: onLost, ch: make(chan *airlock.AuditEvent, size), wait: wait, quit: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *eventBuffer) run() {
	defer close(b.done)
	batch := make([]*airlock.AuditEvent, 0, 512)
	tick := b.clock.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		if n := b.unreported.Swap(0); n > 0 {
			batch = append(batch, lostEvent(n, b.clock.Now()))
		}
		if len(batch) == 0 {
			return
		}
		b.write(batch)
		clear(batch)
		batch = batch[:0]
	}
	// take appends what else is waiting, up to one write's worth.
	take := func() {
		for len(batch) < maxEventWrite {
			select {
			case e := <-b.ch:
				batch = append(batch, e)
			default:
				return
			}
		}
	}
	for {
		select {
		case e := <-b.ch:
			batch = append(batch, e)
			if len(batch) >= 512 {
				take() // a burst: one write carries all that waits
				flush()
			}
		case <-tick.Chan():
			flush()
		case <-b.quit:
			for {
				take()
				if len(batch) == 0 {
					break
				}
				flush()
			}
			if b.unreported.Load() > 0 {
				flush() // once: the count of what was given up
			}
			return
		}
	}
}

// write stores a batch in one transaction. When that fails, each event is
// written on its own, so that one event the store refuses (or one bad
// moment) does not take the events beside it down with it; only those
// that fail alone are counted lost.
func (b *eventBuffer) write(batch []*airlock.AuditEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := b.store.AppendAudit(ctx, batch)
	cancel()
	if err == nil {
		return
	}
	if len(batch) == 1 {
		b.loseEvent(batch[0])
		b.log.Warn("airlock: writing an audit event", "kind", batch[0].Kind, "err", err)
		return
	}
	b.log.Warn("airlock: writing audit events; writing them one by one", "events", len(batch), "err", err)
	// One budget for all of them: a store that is down must not hold the
	// buffer for a timeout per event.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lost := 0
	var last error
	for _, e := range batch {
		if err := b.store.AppendAudit(ctx, []*airlock.AuditEvent{e}); err != nil {
			if e.Kind != airlock.EventLost {
				lost++
			}
			b.loseEvent(e)
			last = err
		}
	}
	if lost > 0 {
		b.log.Warn("airlock: audit events lost", "events", lost, "err", last)
	}
}

// loseEvent gives up one event of a write; an events_lost event that could
// not be written is not itself a loss: its count waits for the next write.
func (b *eventBuffer) loseEvent(e *airlock.AuditEvent) {
	if e.Kind == airlock.EventLost {
		b.unreported.Add(e.DurationUS)
		return
	}
	b.lose(1)
}

func (b *eventBuffer) add(e *airlock.AuditEvent) {
	select {
	case <-b.quit: // closed: nothing would write it
		b.lose(1)
		return
	default:
	}
	select {
	case b.ch <- e:
		return
	default:
	}
	t := b.clock.NewTimer(b.wait)
	defer t.Stop()
	select {
	case b.ch <- e:
	case <-t.Chan():
		b.lose(1)
	case <-b.quit:
		b.lose(1)
	}
}

func (b *eventBuffer) close() {
	b.closed.Do(func() {
		close(b.quit)
		<-b.done
	})
}

func (g *Guard) emit(e *airlock.AuditEvent) { g.events.add(e) }

// auditAnswer records how a call on an existing record was answered.
func (g *Guard) auditAnswer(ctx context.Context, tool *airlock.Tool, rec *airlock.Record, args *airlock.Args, run string, a *airlock.Answer, err error) {
	if rec == nil {
		return
	}
	e := &airlock.AuditEvent{At: g.clock.Now(), RunID: run, Key: rec.Key, Tool: tool.Name, Args: args.JSON(), Actor: airlock.ActorFrom(ctx)}
	switch {
	case err != nil && airlock.ErrorCode(err) == airlock.CodeArgumentsMismatch:
		e.Kind, e.Error = airlock.EventConflict, err.Error()
	case err != nil || a == nil:
		return
	case a.Conflict != nil:
		e.Kind, e.Result, e.Error = airlock.EventConflict, a.Result, a.Conflict.Message
	case a.Status == airlock.StatusInProgress:
		e.Kind = airlock.EventInProgress
	default:
		e.Kind, e.Result = airlock.EventRepeat, a.Result
		if a.Status == airlock.StatusInDoubt {
			e.Error = "answered in_doubt"
		}
	}
	if e.Result == nil && a != nil && a.Result != nil {
		e.Result = a.Result
	}
	g.emit(e)
}
