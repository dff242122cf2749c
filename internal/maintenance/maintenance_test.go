package maintenance_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/maintenance"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Passes follow the clock: one at Start when asked, then one per
// Interval; none after Stop, and Stop waits for the pass under way.
func TestPassesFollowTheClockUntilStopped(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	passes := make(chan struct{}, 10)
	var running atomic.Int32
	s := maintenance.New(func(context.Context) {
		running.Add(1)
		passes <- struct{}{}
		running.Add(-1)
	}, maintenance.Config{Interval: time.Minute, RunAtStart: true, Clock: clock})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, maintenance.ErrStarted) {
		t.Fatalf("a second Start: %v", err)
	}
	<-passes // at start
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	<-passes
	s.Stop()
	s.Stop()
	clock.Advance(time.Hour)
	if len(passes) != 0 || running.Load() != 0 {
		t.Fatalf("a pass after Stop (%d queued, %d running)", len(passes), running.Load())
	}
	// Started again, it runs again.
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-passes
	s.Stop()
}

// The end of Start's context ends the passes too, without Stop: the pass
// under way sees its context end (a reaper or sealer stops mid-pass), and
// Stop then has nothing left to wait for.
func TestContextEndsThePasses(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	inPass := make(chan context.Context)
	s := maintenance.New(func(ctx context.Context) {
		inPass <- ctx
		<-ctx.Done()
	}, maintenance.Config{Interval: time.Minute, RunAtStart: true, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pass := <-inPass
	cancel()
	select {
	case <-pass.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the pass's context did not end with Start's")
	}
	s.Stop() // returns: the loop has ended
}
