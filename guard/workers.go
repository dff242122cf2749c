package guard

import (
	"sync"
	"time"
)

// workerIdle is how long a side-effect worker waits for its next call
// before it ends.
const workerIdle = 30 * time.Second

// workers run side effects the caller does not wait out on goroutines kept
// between calls. A goroutine started for each call costs more than its
// creation: it begins with no credit against the garbage collector, so its
// first allocation while the collector marks pays a share of marking the
// whole heap, and its stack grows anew through the upstream client
// (docs/BENCHMARKS.md, "a side effect's goroutine kept").
//
// A worker waits workerIdle for its next call, by the system's clock, not
// the guard's: it is a resource held, like an idle connection, and a fake
// clock's timers would count among the waiters its tests wait for.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only to a waiting worker
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one when none is idle.
func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
	default:
		w.wg.Add(1)
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	defer w.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-w.jobs:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// close ends the idle workers and waits for the busy ones' calls.
func (w *workers) close() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}
