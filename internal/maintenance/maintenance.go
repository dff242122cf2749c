// Package maintenance runs the server's background passes — expiring
// plans, sealing the audit log, purging past retention, purging page
// sessions — as services, each with its own interval, started and stopped
// like River's maintenance services. A pass is a function of a context;
// what it does lives in the package it belongs to.
package maintenance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/jonboulle/clockwork"
)

// ErrStarted is Start's answer when the service already runs.
var ErrStarted = errors.New("maintenance: the service is already started")

// Config configures a Service.
type Config struct {
	// Interval is the time between passes. Required.
	Interval time.Duration
	// RunAtStart runs the first pass at Start rather than one Interval
	// later. Default false.
	RunAtStart bool
	// Clock times the passes. Default: the system clock.
	Clock clockwork.Clock
}

// Service runs a pass every Interval from Start until Stop or the end of
// Start's context. A pass is never run twice at once.
type Service struct {
	pass func(context.Context)
	cfg  Config

	mu      sync.Mutex
	cancel  context.CancelFunc // of the running loop; nil when stopped
	stopped chan struct{}      // closed when the running loop has returned
}

// New makes a service of pass; it runs nothing until Start.
func New(pass func(context.Context), cfg Config) *Service {
	cfg.Clock = clocks.Or(cfg.Clock)
	if cfg.Interval <= 0 {
		panic("maintenance: Config.Interval is required")
	}
	return &Service{pass: pass, cfg: cfg}
}

// Start runs the passes in a goroutine of their own.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return ErrStarted
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.stopped = make(chan struct{})
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	go func(stopped chan struct{}) {
		defer close(stopped)
		defer t.Stop()
		if s.cfg.RunAtStart {
			s.pass(ctx)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
				s.pass(ctx)
			}
		}
	}(s.stopped)
	return nil
}

// Stop ends the passes and waits for the one under way to return. Stopping
// a stopped service is nothing; it may be started again.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.cancel = nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-stopped
	}
}
