package guard

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestWorkersRunEveryCallAndEndOnClose: calls that overlap each get a
// worker, a worker that finished takes the next call, and close ends the
// idle ones.
func TestWorkersRunEveryCallAndEndOnClose(t *testing.T) {
	t.Parallel()
	w := newWorkers()
	const n = 50
	release := make(chan struct{})
	var running, ran sync.WaitGroup
	running.Add(n)
	ran.Add(n)
	for range n {
		w.run(func() {
			running.Done()
			<-release
			ran.Done()
		})
	}
	running.Wait() // all n at once: none waited for another's worker
	close(release)
	ran.Wait()

	// An idle worker takes the next call: it is handed over, not started.
	var again atomic.Bool
	done := make(chan struct{})
	for i := 0; ; i++ {
		select {
		case w.jobs <- func() { again.Store(true); close(done) }:
		default:
			if i > 1_000_000 {
				t.Fatal("no worker became idle after its call")
			}
			runtime.Gosched()
			continue
		}
		break
	}
	<-done
	if !again.Load() {
		t.Fatal("the idle worker did not run the call")
	}

	ended := make(chan struct{})
	go func() { w.close(); close(ended) }()
	<-ended   // close returned: every worker ended (wg)
	w.close() // twice is harmless
}
