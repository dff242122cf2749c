package guard

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/jonboulle/clockwork"
)

// stuckAuditStore is an audit store whose writes hang until released: a
// database that takes nothing.
type stuckAuditStore struct {
	release chan struct{}
	mu      sync.Mutex
	written int   // events written, besides events_lost
	counted int64 // lost events the events_lost events count
}

func (s *stuckAuditStore) AppendAudit(ctx context.Context, events []*airlock.AuditEvent) error {
	<-s.release
	s.mu.Lock()
	for _, e := range events {
		if e.Kind == airlock.EventLost {
			s.counted += e.DurationUS
			continue
		}
		s.written++
	}
	s.mu.Unlock()
	return nil
}
func (s *stuckAuditStore) SealAudit(context.Context, int) (int, error) { return 0, nil }
func (s *stuckAuditStore) AuditLog(context.Context, int64, int) ([]*airlock.AuditEvent, error) {
	return nil, nil
}
func (s *stuckAuditStore) UnsealedAudit(context.Context) (int, error) { return 0, nil }
func (s *stuckAuditStore) AuditSince(context.Context, time.Time, int) ([]*airlock.AuditEvent, error) {
	return nil, nil
}

// A full buffer holds a caller for AuditWait at most: when the store takes
// nothing, the event is given up and counted, and the call goes on.
func TestAuditBufferGivesUpOnAStuckStore(t *testing.T) {
	t.Parallel()
	s := &stuckAuditStore{release: make(chan struct{})}
	const size, wait, events = 4, 20 * time.Millisecond, 540
	b := newEventBuffer(s, clockwork.NewRealClock(), slog.New(slog.NewTextHandler(io.Discard, nil)), size, wait, nil)
	start := time.Now()
	for range events {
		b.add(&airlock.AuditEvent{Kind: airlock.EventRepeat})
	}
	took := time.Since(start)
	// The writer gathers up to 512 events before it writes, then hangs in
	// the write; the buffer fills; every later event waits its AuditWait
	// and is given up.
	dropped := b.Dropped.Load()
	if dropped == 0 || dropped > events-size {
		t.Fatalf("%d events given up, want between 1 and %d", dropped, events-size)
	}
	if min := time.Duration(dropped) * wait; took < min {
		t.Fatalf("the adds took %v; each given-up event waits %v first, so at least %v", took, wait, min)
	}
	close(s.release)
	b.close()
	if got := int64(s.written) + dropped; got != events {
		t.Fatalf("%d written + %d given up = %d, want %d", s.written, dropped, got, events)
	}
	// The log itself says how many were given up.
	if s.counted != dropped {
		t.Fatalf("events_lost events count %d, want %d", s.counted, dropped)
	}
}

// Events added after close are counted as lost, and add never panics.
func TestAuditBufferAfterClose(t *testing.T) {
	t.Parallel()
	s := &stuckAuditStore{release: make(chan struct{})}
	close(s.release)
	b := newEventBuffer(s, clockwork.NewRealClock(), slog.New(slog.NewTextHandler(io.Discard, nil)), 4, time.Second, nil)
	b.add(&airlock.AuditEvent{Kind: airlock.EventRepeat})
	b.close()
	b.add(&airlock.AuditEvent{Kind: airlock.EventRepeat})
	if s.written != 1 || b.Dropped.Load() != 1 {
		t.Fatalf("written %d, dropped %d; want 1 and 1", s.written, b.Dropped.Load())
	}
}
