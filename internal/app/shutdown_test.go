package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

// Close(ctx) returns when ctx ends, whatever is in flight: a side effect
// that never finishes holds the shutdown no longer than its deadline, and
// Close says so. The side effect, let go afterwards, finds the store
// closed; its record stays running for another process's reaper.
func TestCloseReturnsAtItsDeadline(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(strings.Replace(testManifest, "URL", "http://127.0.0.1:1", 1)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// (A short lease: the outcome, let go after Close, retries its write to
	// the closed store for one lease.)
	a, err := app.New(context.Background(), &app.Config{Manifest: m, DSN: drivers()[0].dsn(t), Migrate: true, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = a.Guard.Do(context.Background(), &airlock.Call{Tool: m.Tool("add_note"), Args: airlock.MustArgs(`{"record_id":"WD-1","text":"x"}`)},
			func(context.Context, string) airlock.Outcome {
				close(started)
				<-release
				return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: []byte(`{}`)}
			})
	}()
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with a side effect running past its deadline: %v; want the deadline named", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return at its deadline while a side effect ran")
	}
	close(release)
	<-finished      // whatever it says: the store it would write to is closed
	a.Guard.Close() // what the process's exit does in production
}
