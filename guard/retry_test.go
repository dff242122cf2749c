package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// TestNotSentAfterAnUnknownAttemptStaysInDoubt: when the upstream honours
// keys an unknown outcome is re-driven with the same key; a later attempt
// that was never sent says nothing about the first, which may have
// happened, so the record goes in doubt and is never released.
func TestNotSentAfterAnUnknownAttemptStaysInDoubt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		attempts []airlock.OutcomeKind // then not sent
		want     airlock.State         // "" = released
	}{
		{"not sent at once", nil, ""},
		{"unknown, then not sent", []airlock.OutcomeKind{airlock.OutcomeUnknown}, airlock.StateInDoubt},
		{"unknown twice, then not sent", []airlock.OutcomeKind{airlock.OutcomeUnknown, airlock.OutcomeUnknown}, airlock.StateInDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			g := guard.New(s, &guard.Config{RetryBackoff: time.Millisecond, UnknownRetries: 3})
			t.Cleanup(g.Close)
			ctx := context.Background()
			c := &airlock.Call{Tool: writeTool("pay", false, true), Args: airlock.MustArgs(`{"id":"P-1"}`)}
			n := 0
			a, err := g.Do(ctx, c, func(context.Context, string) airlock.Outcome {
				n++
				if n <= len(tc.attempts) {
					return airlock.Outcome{Kind: tc.attempts[n-1], Err: errors.New("connection reset after sending")}
				}
				return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: errors.New("connection refused")}
			})
			d, _ := g.Derive(c)
			rec, gerr := s.Get(ctx, d.Key)
			if tc.want == "" {
				if airlock.ErrorCode(err) != airlock.CodeNotSent || !errors.Is(gerr, airlock.ErrNotFound) {
					t.Fatalf("never sent: %+v %v, record %+v %v; want not_sent and the key free", a, err, rec, gerr)
				}
				return
			}
			if err != nil || a.Status != airlock.StatusInDoubt || gerr != nil || rec.State != airlock.StateInDoubt {
				t.Fatalf("an attempt not sent after an unknown one: answer %+v %v, record %+v %v; want in doubt: the first attempt may have happened, so the claim must never be released", a, err, rec, gerr)
			}
			if n != 4 {
				t.Fatalf("%d attempts, want 4 (the first and UnknownRetries re-drives)", n)
			}
			again, err := g.Do(ctx, c, func(context.Context, string) airlock.Outcome {
				t.Error("a repeat of in-doubt work ran it")
				return airlock.Outcome{Kind: airlock.OutcomeSucceeded}
			})
			if err != nil || again.Status != airlock.StatusInDoubt || !again.Repeat {
				t.Fatalf("repeat: %+v %v, want in doubt", again, err)
			}
		})
	}
}
