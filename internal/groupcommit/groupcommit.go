// Package groupcommit batches writes that arrive together into one
// transaction: one commit (one fsync, one WAL flush) for many callers. Both
// store drivers use it (docs/DECISIONS.md, decision 50): SQLite with one
// batch in flight (its single writer), PostgreSQL with a few.
//
// The callers send the batches themselves: a caller that finds fewer than
// MaxInFlight batches in flight leads, flushing what is waiting, its own
// item included; when its item is done and more wait, it hands the lead to
// the first waiting caller. No writer goroutine sits between a caller and
// the database, so a write costs the scheduler one wake-up at most (the
// result reaching a waiting caller) instead of a hop to a writer and back.
package groupcommit

import (
	"context"
	"errors"
	"runtime"
	"sync"
)

// ErrClosed is Submit's answer after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Slot is an item's place in a batch. Items embed one; its zero value is
// ready to use. An item may be submitted again once its Submit returned
// (a pool of items saves their allocations): its channel is empty then,
// and is reused.
type Slot struct {
	// done receives true when the caller is to lead, false when the item
	// is done. Room for both, so a send never blocks.
	done chan bool
	// taken: in a batch; handed: given the lead (both under Batcher.mu).
	taken, handed bool
}

// GroupSlot returns the slot; embedding Slot implements Item.
func (s *Slot) GroupSlot() *Slot { return s }

// Item is a write on its way into a batch: a pointer to a struct that
// embeds Slot and carries its own result, which the flush sets.
type Item interface{ GroupSlot() *Slot }

// Config sizes a Batcher. Its zero value means one batch in flight and at
// most 128 items a batch.
type Config struct {
	// MaxInFlight is how many batches may be flushed at once. Default 1.
	MaxInFlight int
	// MaxBatch bounds the items of one batch. Default 128.
	MaxBatch int
}

// Batcher gathers items into batches and flushes them.
type Batcher[T Item] struct {
	flush func(batch []T)

	mu         sync.Mutex
	idle       *sync.Cond // signalled when no one leads
	pending    []T
	leaders    int // callers flushing batches, or handed the lead
	maxLeaders int
	maxBatch   int
	closed     bool
}

// New makes a batcher whose batches go to flush. flush writes a batch and
// sets each item's result; it never fails as a whole (an item's failure is
// that item's result), and it is called by one caller at a time per batch
// in flight.
func New[T Item](cfg Config, flush func(batch []T)) *Batcher[T] {
	b := &Batcher[T]{flush: flush, maxLeaders: max(cfg.MaxInFlight, 1), maxBatch: cfg.MaxBatch}
	if b.maxBatch <= 0 {
		b.maxBatch = 128
	}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// Submit puts item into the next batch and returns when it has been
// flushed; its result is then in item. Once queued the caller waits for
// the flush whatever ctx says, because it must learn whether its write is
// durable; ctx only stops an item that is not queued yet.
func (b *Batcher[T]) Submit(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	slot := item.GroupSlot()
	if slot.done == nil {
		slot.done = make(chan bool, 2)
	}
	slot.taken, slot.handed = false, false
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.pending = append(b.pending, item)
	lead := b.leaders < b.maxLeaders
	if lead {
		b.leaders++
	}
	b.mu.Unlock()
	for {
		if lead {
			b.lead(slot)
		}
		if lead = <-slot.done; !lead {
			return nil
		}
	}
}

// lead flushes batches until the leader's own item has been taken into
// one; then, if items still wait, it hands the lead to the first of them.
func (b *Batcher[T]) lead(me *Slot) {
	b.mu.Lock()
	yielded := false
	for {
		if len(b.pending) == 0 {
			b.leaders--
			if b.leaders == 0 {
				b.idle.Broadcast()
			}
			b.mu.Unlock()
			return
		}
		if me.taken {
			// Pass the lead to the first waiting caller that does not
			// have it yet (the count stays); if all have it, step down.
			for _, next := range b.pending {
				if s := next.GroupSlot(); !s.handed {
					s.handed = true
					s.done <- true
					b.mu.Unlock()
					return
				}
			}
			b.leaders-- // at least the callers handed the lead remain
			b.mu.Unlock()
			return
		}
		if !yielded && len(b.pending) < b.maxBatch {
			// Let the goroutines that are ready to run go first: many are
			// callers just woken by the last batch, about to queue their
			// next write (a completion after a claim). One yield makes
			// the batch several items larger, and a larger batch costs
			// less CPU per item here and in the database; when nothing
			// else is ready the yield costs nothing.
			yielded = true
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
			continue
		}
		yielded = false
		n := min(len(b.pending), b.maxBatch)
		batch := make([]T, n)
		copy(batch, b.pending)
		for _, it := range batch {
			it.GroupSlot().taken = true
		}
		rest := copy(b.pending, b.pending[n:])
		clear(b.pending[rest:])
		b.pending = b.pending[:rest]
		b.mu.Unlock()
		b.flush(batch)
		for _, it := range batch {
			it.GroupSlot().done <- false
		}
		b.mu.Lock()
	}
}

// Close refuses new items and waits for the queued ones to be flushed.
func (b *Batcher[T]) Close() {
	b.mu.Lock()
	b.closed = true
	for b.leaders > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
}
