package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

func sessionID(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }

// RunSessions checks the page's sessions and shared secrets.
func RunSessions(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	t.Run("CreateGetDelete", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ps := &airlock.PageSession{ID: sessionID("a"), Name: "oidc:ana@example.com", Role: airlock.RoleApprover, Subject: "https://idp|123",
			Groups: []string{"payments", "finance"}, CSRF: "c1", CreatedAt: now, RenewAt: now.Add(10 * time.Minute), ExpiresAt: now.Add(time.Hour)}
		must(t, s.CreateSession(ctx, ps))
		got, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: ps.ID, Now: now})
		must(t, err)
		if !reflect.DeepEqual(got, ps) {
			t.Fatalf("got %+v, want %+v", got, ps)
		}
		tok := &airlock.PageSession{ID: sessionID("t"), Name: "alice", Role: airlock.RoleAdmin, Credential: "0f3a", CSRF: "c2",
			CreatedAt: now, RenewAt: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour)}
		must(t, s.CreateSession(ctx, tok))
		if got, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: tok.ID, Now: now}); err != nil || !reflect.DeepEqual(got, tok) {
			t.Fatalf("a token's session: got %+v %v, want %+v", got, err, tok)
		}
		must(t, s.SetSessionFlash(ctx, &airlock.SetSessionFlashParams{ID: ps.ID, Flash: "Approved."}))
		if got, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: ps.ID, Now: now}); err != nil || got.Flash != "Approved." {
			t.Fatalf("flash: %+v %v", got, err)
		}
		must(t, s.SetSessionFlash(ctx, &airlock.SetSessionFlashParams{ID: ps.ID}))
		must(t, s.DeleteSession(ctx, ps.ID))
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: ps.ID, Now: now}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
		must(t, s.DeleteSession(ctx, ps.ID)) // twice is no error
	})
	t.Run("ExpiredIsGoneAndPurged", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for i := range 3 {
			expires := now.Add(time.Duration(i-1) * time.Hour)
			must(t, s.CreateSession(ctx, &airlock.PageSession{ID: sessionID(fmt.Sprint("e", i)), Name: "n", Role: airlock.RoleAdmin, Credential: "0f3a",
				CSRF: "c", CreatedAt: now.Add(-2 * time.Hour), RenewAt: expires, ExpiresAt: expires}))
		}
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: sessionID("e0"), Now: now}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("an expired session: %v", err)
		}
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: sessionID("e1"), Now: now}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("a session expiring now: %v", err)
		}
		n, err := s.PurgeSessions(ctx, &airlock.PurgeSessionsParams{Now: now, Limit: 100})
		must(t, err)
		if n != 2 {
			t.Fatalf("purged %d, want 2", n)
		}
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: sessionID("e2"), Now: now}); err != nil {
			t.Fatalf("the live session: %v", err)
		}
	})
	t.Run("BadSessionsAreRefused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		good := airlock.PageSession{ID: sessionID("b"), Name: "n", Role: airlock.RoleApprover, Credential: "0f3a", CSRF: "c",
			CreatedAt: now, RenewAt: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour)}
		for _, tc := range []struct {
			field string
			edit  func(*airlock.PageSession)
		}{
			{"id", func(p *airlock.PageSession) { p.ID = "cookie-value" }},
			{"name", func(p *airlock.PageSession) { p.Name = "" }},
			{"name", func(p *airlock.PageSession) { p.Name = "a\xffb" }},
			{"role", func(p *airlock.PageSession) { p.Role = airlock.RoleAgent }},
			{"credential", func(p *airlock.PageSession) { p.Credential = "" }},
			{"credential", func(p *airlock.PageSession) { p.Subject = "https://idp#ana" }},
			{"csrf", func(p *airlock.PageSession) { p.CSRF = "" }},
			{"renew_at", func(p *airlock.PageSession) { p.RenewAt = p.ExpiresAt.Add(time.Second) }},
			{"renew_at", func(p *airlock.PageSession) { p.RenewAt = p.CreatedAt.Add(-time.Second) }},
			{"expires_at", func(p *airlock.PageSession) { p.ExpiresAt = p.CreatedAt }},
		} {
			ps := good
			tc.edit(&ps)
			var e *airlock.Error
			if err := s.CreateSession(ctx, &ps); !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != tc.field {
				t.Errorf("%s: %v", tc.field, err)
			}
		}
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: good.ID, Now: now}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("a refused session was stored: %v", err)
		}
	})
	t.Run("OneSecretForEveryone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var wg sync.WaitGroup
		got := make([][]byte, 8)
		for i := range got {
			wg.Go(func() {
				v, err := s.Secret(ctx, "ui", []byte(fmt.Sprint("candidate-", i)))
				if err != nil {
					t.Error(err)
				}
				got[i] = v
			})
		}
		wg.Wait()
		for _, v := range got {
			if string(v) != string(got[0]) || len(v) == 0 {
				t.Fatalf("secrets differ: %q", got)
			}
		}
		if v, err := s.Secret(ctx, "other", []byte("x")); err != nil || string(v) != "x" {
			t.Fatalf("another name: %q %v", v, err)
		}
	})
}
