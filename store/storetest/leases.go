package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

// runLeases holds both drivers to when a lease ends and to what the
// reaper and retention may touch: a lease is expired only when now is
// after lease_until (at its last instant it still holds), ExpireLease and
// TakeOver read lease_until and nothing else, and records in doubt are
// never purged, whatever their expiry.
func runLeases(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)

	t.Run("ALeaseHoldsUntilItsLastInstant", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		listed, expired, taken := Key("edge-listed"), Key("edge-expired"), Key("edge-taken")
		for _, key := range []string{listed, expired, taken} {
			_, _, err := s.Claim(ctx, claimOf(key, "holder", now, time.Second))
			must(t, err)
		}
		end := now.Add(time.Second) // lease_until
		for _, tc := range []struct {
			at     time.Time
			expire bool
		}{{end.Add(-time.Microsecond), false}, {end, false}, {end.Add(time.Microsecond), true}} {
			recs, err := s.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: tc.at, Limit: 1000})
			must(t, err)
			if containsKey(recs, listed) != tc.expire {
				t.Fatalf("ExpiredLeases at lease_until%+v lists the lease: %v, want %v (a lease ends only after lease_until)", tc.at.Sub(end), !tc.expire, tc.expire)
			}
			ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: expired, Now: tc.at, Note: "lease expired"})
			must(t, err)
			if ok != tc.expire {
				t.Fatalf("ExpireLease at lease_until%+v: %v, want %v (a lease ends only after lease_until)", tc.at.Sub(end), ok, tc.expire)
			}
			_, ok, err = s.TakeOver(ctx, &airlock.TakeOverParams{Key: taken, Owner: "next", Now: tc.at, LeaseUntil: tc.at.Add(time.Minute)})
			must(t, err)
			if ok != tc.expire {
				t.Fatalf("TakeOver at lease_until%+v: %v, want %v (a lease ends only after lease_until)", tc.at.Sub(end), ok, tc.expire)
			}
		}
	})

	// A claim completed between the reaper's read and its take-over (or a
	// repeat's) is done: taking it would run the work again.
	t.Run("OnlyARunningClaimIsTakenOver", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, st := range []airlock.State{airlock.StateSucceeded, airlock.StateFailed, airlock.StateInDoubt} {
			key := Key("taken-" + string(st))
			_, _, err := s.Claim(ctx, claimOf(key, "holder", now, time.Second))
			must(t, err)
			must(t, s.Complete(ctx, &airlock.Completion{Key: key, Owner: "holder", State: st, Result: json.RawMessage(`1`), Now: now}))
			later := now.Add(time.Minute) // past the lease the record had
			if _, ok, err := s.TakeOver(ctx, &airlock.TakeOverParams{Key: key, Owner: "next", Now: later, LeaseUntil: later.Add(time.Minute)}); err != nil || ok {
				t.Fatalf("TakeOver of a %s record whose lease had ended: %v %v; only a running claim is taken over", st, ok, err)
			}
			if ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: key, Now: later, Note: "lease expired"}); err != nil || ok {
				t.Fatalf("ExpireLease of a %s record: %v %v", st, ok, err)
			}
		}
	})

	t.Run("ExpiryReadsTheLeaseAndNothingElse", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// Made long ago, past its retention, renewed until an hour from now:
		// every time but lease_until says it ended.
		made := now.Add(-24 * time.Hour)
		fresh, renewed := Key("live-fresh"), Key("live-renewed")
		for _, key := range []string{fresh, renewed} {
			c := claimOf(key, "holder", made, time.Second)
			c.ExpiresAt = now.Add(-time.Hour)
			if key == fresh {
				c.LeaseUntil = now.Add(time.Hour)
			}
			_, _, err := s.Claim(ctx, c)
			must(t, err)
		}
		must(t, s.Heartbeat(ctx, &airlock.HeartbeatParams{Key: renewed, Owner: "holder", LeaseUntil: now.Add(time.Hour)}))
		recs, err := s.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: now, Limit: 1000})
		must(t, err)
		for _, key := range []string{fresh, renewed} {
			if containsKey(recs, key) {
				t.Fatalf("%s: a lease that holds for an hour is listed as expired", key)
			}
			ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: key, Now: now, Note: "lease expired"})
			must(t, err)
			if ok {
				t.Fatalf("%s: ExpireLease put a live lease in doubt: it must condition on lease_until", key)
			}
			if _, ok, err := s.TakeOver(ctx, &airlock.TakeOverParams{Key: key, Owner: "next", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil || ok {
				t.Fatalf("%s: TakeOver of a live lease: %v %v", key, ok, err)
			}
			rec, err := s.Get(ctx, key)
			must(t, err)
			if rec.State != airlock.StateRunning || rec.Owner != "holder" {
				t.Fatalf("%s: a live claim changed: %+v", key, rec)
			}
		}
		if n, err := s.Purge(ctx, &airlock.PurgeParams{Now: now, Limit: 1000}); err != nil || n != 0 {
			t.Fatalf("purge took %d running records (%v)", n, err)
		}
	})

	t.Run("RecordsInDoubtAreNeverPurged", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		states := map[string]airlock.State{Key("purge-doubt"): airlock.StateInDoubt, Key("purge-ok"): airlock.StateSucceeded, Key("purge-failed"): airlock.StateFailed}
		for key, st := range states {
			_, _, err := s.Claim(ctx, claimOf(key, "o", now, time.Minute)) // expires an hour from now
			must(t, err)
			must(t, s.Complete(ctx, &airlock.Completion{Key: key, Owner: "o", State: st, Result: json.RawMessage(`1`), Note: "n", Now: now}))
		}
		n, err := s.Purge(ctx, &airlock.PurgeParams{Now: now.Add(30 * 24 * time.Hour), Limit: 1000})
		must(t, err)
		for key, st := range states {
			_, err := s.Get(ctx, key)
			switch {
			case st == airlock.StateInDoubt && err != nil:
				t.Fatalf("a record in doubt, past its retention, was purged (%v): it stays until it is settled", err)
			case st != airlock.StateInDoubt && !errors.Is(err, airlock.ErrNotFound):
				t.Fatalf("a %s record past its retention was not purged: %v", st, err)
			}
		}
		if n != 2 {
			t.Fatalf("purged %d, want 2", n)
		}
	})
}
