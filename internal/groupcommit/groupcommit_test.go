package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/groupcommit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type write struct {
	groupcommit.Slot
	n       int
	flushed int // set by the flush: how many times this write was flushed
}

// Many callers at once: every write is flushed exactly once, no batch is
// larger than MaxBatch, never more than MaxInFlight batches are flushed at
// once, and batches hold more than one write (the point of it all).
func TestEveryWriteFlushedOnceWithinTheBounds(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []int{1, 2, 3} {
		var (
			mu              sync.Mutex
			now, most, many int
			batches         int
		)
		b := groupcommit.New(groupcommit.Config{MaxInFlight: inFlight, MaxBatch: 5}, func(batch []*write) {
			mu.Lock()
			now++
			most = max(most, now)
			batches++
			if len(batch) > 1 {
				many++
			}
			if len(batch) > 5 {
				t.Errorf("a batch of %d, over MaxBatch 5", len(batch))
			}
			mu.Unlock()
			for _, w := range batch {
				w.flushed++
			}
			mu.Lock()
			now--
			mu.Unlock()
		})
		const callers, each = 32, 50
		var wg sync.WaitGroup
		var wrong atomic.Int32
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					w := &write{n: c*each + i}
					if err := b.Submit(context.Background(), w); err != nil || w.flushed != 1 {
						wrong.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		b.Close()
		if wrong.Load() != 0 {
			t.Fatalf("in flight %d: %d writes not flushed exactly once", inFlight, wrong.Load())
		}
		if most > inFlight {
			t.Fatalf("%d batches flushed at once, want at most %d", most, inFlight)
		}
		if many == 0 {
			t.Fatalf("in flight %d: %d batches, none with more than one write", inFlight, batches)
		}
	}
}

// After Close nothing is queued; a context already ended queues nothing.
func TestClosedAndCancelled(t *testing.T) {
	t.Parallel()
	flushed := 0
	b := groupcommit.New(groupcommit.Config{}, func(batch []*write) { flushed += len(batch) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Submit(ctx, &write{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
	if err := b.Submit(context.Background(), &write{}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := b.Submit(context.Background(), &write{}); !errors.Is(err, groupcommit.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	if flushed != 1 {
		t.Fatalf("flushed %d, want 1", flushed)
	}
}
