package gateway

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

// A task past its expiry is answered as expired, not read from a record
// the purge may already have removed (which would read as work that did
// not happen).
func TestExpiredTaskIsNotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := manifest.Parse([]byte(`version: 1
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: svc, path: /get}
`), "read.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	guard := guard.New(s, nil)
	t.Cleanup(guard.Close)
	g, err := New(Config{Manifest: m, Guard: guard, Store: s, Funcs: map[string]upstream.Caller{"lookup": upstream.Func(
		func(context.Context, *upstream.Request) airlock.Outcome {
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour).UTC()
	tk, _, err := s.CreateTask(ctx, &airlock.Task{ID: airlock.NewTaskID(), Tool: "note", RecordKey: "gone", CreatedAt: past, ExpiresAt: past.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = g.taskRequest(ctx, "tasks/get", nil, &taskParams{TaskID: &tk.ID})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != rpcInvalidParams || !strings.Contains(rpc.Message, "expired") {
		t.Fatalf("an expired task: %v", err)
	}
}

// A tasks/result on a plan re-reads it less and less often, by the
// gateway's clock: at first after taskPollFirst, then twice as long each
// time, up to taskPollMost; a wake-up (a record's change) ends the wait at
// once, without the clock, and the next wait listens again.
func TestTaskWaitBacksOffByTheClockAndWakesOnAChange(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := &taskWait{clock: clock, every: taskPollFirst, most: taskPollMost}
	for _, delay := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second} {
		done := make(chan error, 1)
		go func() { done <- w.next(ctx) }()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(delay - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("the wait of %v ended before its time (%v)", delay, err)
		default:
		}
		clock.Advance(time.Millisecond)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	changes := &fakeChanges{registered: make(chan chan struct{}, 2)}
	changes.Rearm()
	w = &taskWait{clock: clock, every: time.Hour, most: time.Hour, changes: changes}
	close(<-changes.registered)
	if err := w.next(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes.registered: // listening again for the next change
	default:
		t.Fatal("the wait did not listen again after a change")
	}
	cancel()
	if err := w.next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v", err)
	}
	// Closing stops the wait registered last, not the first one's stop.
	w.close()
	if n := changes.listening; n != 0 {
		t.Fatalf("%d waits still registered after close", n)
	}
}

// fakeChanges stands in for a record's watch: each registration is sent
// on registered, for the test to close.
type fakeChanges struct {
	registered chan chan struct{}
	c          chan struct{}
	listening  int // registrations not stopped
}

func (f *fakeChanges) C() <-chan struct{} { return f.c }

func (f *fakeChanges) Rearm() {
	if f.c != nil {
		f.Stop()
	}
	f.c = make(chan struct{})
	f.registered <- f.c
	f.listening++
}

func (f *fakeChanges) Stop() { f.listening-- }
