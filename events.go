package airlock

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Events that are not state changes (a repeat served, a conflict, an
// in-progress answer, a budget refusal) are buffered and written in batches
// in the background, so that serving a repeat from memory stays cheap. A
// crash may lose the last of them; it never loses the event of a change,
// which is written in the change's own transaction.
type eventBuffer struct {
	store   AuditStore
	log     *slog.Logger
	ch      chan *AuditEvent
	done    chan struct{}
	closed  sync.Once
	Dropped atomic.Int64
}

func newEventBuffer(s AuditStore, log *slog.Logger) *eventBuffer {
	b := &eventBuffer{store: s, log: log, ch: make(chan *AuditEvent, 16384), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *eventBuffer) run() {
	defer close(b.done)
	batch := make([]*AuditEvent, 0, 512)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.store.AppendAudit(ctx, batch); err != nil {
			b.Dropped.Add(int64(len(batch)))
			b.log.Warn("airlock: writing audit events", "events", len(batch), "err", err)
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case e, ok := <-b.ch:
			if !ok {
				flush()
				return
			}
			batch = append(batch, e)
			if len(batch) >= 512 {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

func (b *eventBuffer) add(e *AuditEvent) {
	select {
	case b.ch <- e:
	default:
		b.Dropped.Add(1)
	}
}

func (b *eventBuffer) close() {
	b.closed.Do(func() {
		close(b.ch)
		<-b.done
	})
}

func (g *Guard) emit(e *AuditEvent) { g.events.add(e) }

// auditAnswer records how a call on an existing record was answered.
func (g *Guard) auditAnswer(ctx context.Context, tool *Tool, rec *Record, args map[string]any, run string, a *Answer, err error) {
	if rec == nil {
		return
	}
	e := &AuditEvent{At: g.clock.Now(), RunID: run, Key: rec.Key, Tool: tool.Name, Args: CanonicalArgs(args), Actor: ActorFrom(ctx)}
	switch {
	case err != nil && ErrorCode(err) == CodeArgumentsMismatch:
		e.Kind, e.Error = EventConflict, err.Error()
	case err != nil || a == nil:
		return
	case a.Conflict != nil:
		e.Kind, e.Result, e.Error = EventConflict, a.Result, a.Conflict.Message
	case a.Status == StatusInProgress:
		e.Kind = EventInProgress
	default:
		e.Kind, e.Result = EventRepeat, a.Result
		if a.Status == StatusInDoubt {
			e.Error = "answered in_doubt"
		}
	}
	if e.Result == nil && a != nil && a.Result != nil {
		e.Result = json.RawMessage(a.Result)
	}
	g.emit(e)
}
