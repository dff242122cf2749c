package guard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlockhq/airlock"
)

// leaseKeeper keeps alive the leases of the side effects a guard is running:
// one loop renews every held lease a third of a lease after its last
// renewal, instead of a goroutine and a ticker for each call. The loop runs
// while leases are held and stops when none are (or the guard closes), so
// an idle guard runs no goroutine.
type leaseKeeper struct {
	g     *Guard
	every time.Duration // renew a lease this long after its last renewal: lease/3
	tick  time.Duration // how often the loop looks: every/2, so a renewal is at most lease/2 late

	mu      sync.Mutex
	held    map[string]*heldLease // by owner: one per running call
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

type heldLease struct {
	key, owner string
	renewAt    time.Time // by the guard's clock
}

// renewers bounds the heartbeats sent at once in one round.
const renewers = 8

func newLeaseKeeper(g *Guard) *leaseKeeper {
	every := g.lease / 3
	return &leaseKeeper{g: g, every: every, tick: max(every/2, time.Millisecond), held: map[string]*heldLease{}, stop: make(chan struct{})}
}

// hold starts renewing the lease of a claimed record; release stops it.
func (k *leaseKeeper) hold(key, owner string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[owner] = &heldLease{key: key, owner: owner, renewAt: k.g.clock.Now().Add(k.every)}
	if !k.running && !k.closed {
		k.running = true
		k.wg.Add(1)
		go k.loop()
	}
}

// release stops renewing; it reports whether the lease was still held.
func (k *leaseKeeper) release(owner string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, held := k.held[owner]
	delete(k.held, owner)
	return held
}

func (k *leaseKeeper) close() {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.stop)
	}
	k.mu.Unlock()
	k.wg.Wait()
}

func (k *leaseKeeper) loop() {
	defer k.wg.Done()
	t := k.g.clock.NewTicker(k.tick)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.Chan():
		}
		now := k.g.clock.Now()
		k.mu.Lock()
		if len(k.held) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		var due []*heldLease
		for _, h := range k.held {
			if !now.Before(h.renewAt) {
				h.renewAt = now.Add(k.every)
				due = append(due, h)
			}
		}
		k.mu.Unlock()
		k.renew(due)
	}
}

// renew sends the heartbeats of one round, a few at a time.
func (k *leaseKeeper) renew(due []*heldLease) {
	sem := make(chan struct{}, renewers)
	var wg sync.WaitGroup
	for _, h := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), k.every)
			err := k.g.store.Heartbeat(ctx, &airlock.HeartbeatParams{Key: h.key, Owner: h.owner, LeaseUntil: k.g.clock.Now().Add(k.g.lease)})
			cancel()
			switch {
			case errors.Is(err, airlock.ErrLeaseLost) && k.release(h.owner):
				// Still held: the side effect runs on without its lease.
				// (Not held: the call completed meanwhile, nothing lost.)
				k.g.log.Warn("airlock: lease lost while the side effect runs", "service", "lease keeper", "key", h.key)
			case err != nil && !errors.Is(err, airlock.ErrLeaseLost):
				// The store did not take the renewal: the next round tries
				// again, before the lease ends if the store comes back.
				k.g.log.Warn("airlock: a lease was not renewed; the next round retries", "service", "lease keeper", "key", h.key, "err", err)
			}
		}()
	}
	wg.Wait()
}
