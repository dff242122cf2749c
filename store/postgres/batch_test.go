package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store/postgres"
)

// The batches are sent by the callers (batch.go). These tests drive the
// hand-over of the lead hard: small batches, several batches in flight,
// the same key claimed by many callers at once (ops split off a batch), and
// a Close while callers are still submitting.
func TestBatchesLedByCallers(t *testing.T) {
	t.Parallel()
	for _, writers := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("Writers%d", writers), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := postgres.Open(ctx, testdb.Schema(t), &postgres.Config{Writers: writers, MaxBatch: 3})
			if err != nil {
				t.Fatal(err)
			}
			// A hung batch would hang Close too; give up on it rather
			// than hang the test binary.
			defer func() {
				c := make(chan struct{})
				go func() { s.Close(); close(c) }()
				select {
				case <-c:
				case <-time.After(10 * time.Second):
				}
			}()
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			const keys, callersPerKey = 60, 4
			var inserted [keys]atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, keys*callersPerKey)
			for k := range keys {
				for c := range callersPerKey {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key, owner := fmt.Sprintf("k-%d", k), fmt.Sprintf("o-%d-%d", k, c)
						now := time.Now()
						_, ok, err := s.Claim(ctx, &airlock.Claim{Key: key, Tool: "t", WindowID: "forever", Args: json.RawMessage(`{}`),
							ArgsHash: "h", Owner: owner, Now: now, LeaseUntil: now.Add(time.Minute)})
						if err != nil {
							errs <- err
							return
						}
						if !ok {
							return
						}
						inserted[k].Add(1)
						if err := s.Complete(ctx, &airlock.Completion{Key: key, Owner: owner, State: airlock.StateSucceeded,
							Result: json.RawMessage(`1`), Now: time.Now()}); err != nil {
							errs <- err
						}
					}()
				}
			}
			waitOrFail(t, &wg, "callers")
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k := range keys {
				if n := inserted[k].Load(); n != 1 {
					t.Fatalf("key %d claimed %d times", k, n)
				}
				rec, err := s.Get(ctx, fmt.Sprintf("k-%d", k))
				if err != nil || rec.State != airlock.StateSucceeded {
					t.Fatalf("key %d: %+v %v", k, rec, err)
				}
			}

			// Close while callers submit: every caller returns, with its
			// write done or refused, and Close returns.
			var done atomic.Int32
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					now := time.Now()
					_, _, err := s.Claim(ctx, &airlock.Claim{Key: fmt.Sprintf("late-%d", i), Tool: "t", WindowID: "forever",
						Args: json.RawMessage(`{}`), ArgsHash: "h", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
					if err == nil {
						done.Add(1)
					}
				}()
			}
			closed := make(chan struct{})
			go func() { s.Close(); close(closed) }()
			waitOrFail(t, &wg, "callers during Close")
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Fatal("Close did not return")
			}
			now := time.Now()
			if _, _, err := s.Claim(ctx, &airlock.Claim{Key: "after", Tool: "t", WindowID: "forever", Args: json.RawMessage(`{}`),
				ArgsHash: "h", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)}); err == nil || errors.Is(err, context.Canceled) {
				t.Fatalf("a claim after Close: %v, want refused", err)
			}
			t.Logf("%d of 40 claims made it before Close", done.Load())
		})
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s still waiting after a minute: a batch was never sent", what)
	}
}
