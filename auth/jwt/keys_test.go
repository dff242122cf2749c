package jwt_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/manifest"
)

// Tokens naming key ids the issuer never published are refused without
// fetching its keys for each of them: the keys are fetched again at most
// once per RefetchEvery (issue 27: 60 made-up kids made 56 fetches). A
// forged token with a known kid fetches nothing. A key published later is
// found once the interval has passed.
func TestUnknownKeyIDsRefetchAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	first, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	first.Kid = "k1"
	second, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	second.Kid = "k2"
	var fetches atomic.Int32
	var rotated atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		kp := first
		if rotated.Load() {
			kp = second
		}
		b, err := kp.JWKS()
		if err != nil {
			t.Error(err)
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	clock := clockwork.NewFakeClockAt(time.Now())
	const iss = "https://issuer.example.com"
	v := jwt.New(jwt.Config{Resource: resource, Clock: clock, Issuers: []manifest.IssuerSpec{{Issuer: iss, JWKSURL: srv.URL, Role: airlock.RoleAgent}}})
	sign := func(kp *mockoidc.Keypair, kid string) string {
		tok := gojwt.NewWithClaims(gojwt.SigningMethodRS256, gojwt.MapClaims{"iss": iss, "sub": "svc", "aud": resource,
			"exp": clock.Now().Add(time.Hour).Unix(), "n": fmt.Sprint(clock.Now().UnixNano())})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(kp.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, sign(first, "k1")); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		clock.Advance(100 * time.Millisecond)
		if _, err := v.Verify(ctx, sign(first, fmt.Sprintf("made-up-%d", i))); !errors.Is(err, jwt.ErrRefused) {
			t.Fatalf("made-up kid %d: %v, want refused", i, err)
		}
	}
	// 6 s of made-up kids: the first fetch, and none again within 30 s.
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for 60 made-up key ids in 6s, want 1", n)
	}
	other, _ := mockoidc.RandomKeypair(2048)
	if _, err := v.Verify(ctx, sign(other, "k1")); !errors.Is(err, jwt.ErrRefused) || fetches.Load() != 1 {
		t.Fatalf("a forged token with a known kid: %v, %d fetches", err, fetches.Load())
	}
	// The issuer rotates to k2: found at the first fetch the interval allows.
	rotated.Store(true)
	if _, err := v.Verify(ctx, sign(second, "k2")); !errors.Is(err, jwt.ErrRefused) {
		t.Fatalf("k2 within the interval: %v, want refused (not fetched yet)", err)
	}
	clock.Advance(jwt.RefetchEvery)
	if p, err := v.Verify(ctx, sign(second, "k2")); err != nil || p.Name != airlock.JWTPrincipal("https://issuer.example.com", "svc") {
		t.Fatalf("k2 after the interval: %+v %v", p, err)
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}
