package jwt_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/manifest"
)

const resource = "https://airlock.example.com/mcp"

// setup starts an issuer (its discovery document and JWKS on loopback) and
// a Verifier that accepts it.
func setup(t *testing.T) (*mockoidc.MockOIDC, *jwt.Verifier) {
	t.Helper()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	v := jwt.New(jwt.Config{Resource: resource, Issuers: []manifest.IssuerSpec{
		{Issuer: idp.Issuer(), RolesClaim: "scope", Roles: map[string]string{"airlock.call": airlock.RoleAgent, "airlock.approve": airlock.RoleApprover}},
		{Issuer: "https://keycloak.example.com/realms/acme", JWKSURL: idp.JWKSEndpoint(), RolesClaim: "realm_access.roles",
			Roles: map[string]string{"airlock-admin": airlock.RoleAdmin}, NameClaim: "azp"},
		{Issuer: "https://ci.example.com", JWKSURL: idp.JWKSEndpoint(), Role: airlock.RoleAgent, Audience: "airlock-ci"},
	}})
	return idp, v
}

func TestVerify(t *testing.T) {
	t.Parallel()
	idp, v := setup(t)
	ctx := context.Background()
	now := time.Now()
	claims := func(edit func(gojwt.MapClaims)) gojwt.MapClaims {
		c := gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc-batch", "aud": resource, "exp": now.Add(time.Minute).Unix(),
			"iat": now.Unix(), "scope": "openid airlock.call"}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(c gojwt.MapClaims) string {
		t.Helper()
		s, err := idp.Keypair.SignJWT(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := func(c gojwt.MapClaims) string {
		s, err := gojwt.NewWithClaims(gojwt.SigningMethodNone, c).SignedString(gojwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hmac := func(c gojwt.MapClaims) string {
		s, _ := gojwt.NewWithClaims(gojwt.SigningMethodHS256, c).SignedString([]byte("a shared secret"))
		return s
	}
	for _, tc := range []struct {
		name    string
		token   string
		want    jwt.Principal
		refusal string
	}{
		{"an agent by its scope", sign(claims(nil)), jwt.Principal{Name: airlock.JWTPrincipal(idp.Issuer(), "svc-batch"), Role: airlock.RoleAgent}, ""},
		{"the highest scope's role", sign(claims(func(c gojwt.MapClaims) { c["scope"] = "airlock.approve airlock.call" })), jwt.Principal{Name: airlock.JWTPrincipal(idp.Issuer(), "svc-batch"), Role: airlock.RoleApprover}, ""},
		{"an audience list", sign(claims(func(c gojwt.MapClaims) { c["aud"] = []string{"other", resource} })), jwt.Principal{Name: airlock.JWTPrincipal(idp.Issuer(), "svc-batch"), Role: airlock.RoleAgent}, ""},
		{"expired within the skew", sign(claims(func(c gojwt.MapClaims) { c["exp"] = now.Add(-30 * time.Second).Unix() })), jwt.Principal{Name: airlock.JWTPrincipal(idp.Issuer(), "svc-batch"), Role: airlock.RoleAgent}, ""},
		{"a nested roles claim and another name", sign(claims(func(c gojwt.MapClaims) {
			c["iss"], c["azp"], c["realm_access"] = "https://keycloak.example.com/realms/acme", "ops-console", map[string]any{"roles": []string{"offline", "airlock-admin"}}
		})), jwt.Principal{Name: airlock.JWTPrincipal("https://keycloak.example.com/realms/acme", "ops-console"), Role: airlock.RoleAdmin}, ""},
		{"an issuer's own audience and role", sign(claims(func(c gojwt.MapClaims) { c["iss"], c["aud"] = "https://ci.example.com", "airlock-ci" })), jwt.Principal{Name: airlock.JWTPrincipal("https://ci.example.com", "svc-batch"), Role: airlock.RoleAgent}, ""},

		{"expired", sign(claims(func(c gojwt.MapClaims) { c["exp"] = now.Add(-5 * time.Minute).Unix() })), jwt.Principal{}, "the token expired at"},
		{"no expiry", sign(claims(func(c gojwt.MapClaims) { delete(c, "exp") })), jwt.Principal{}, "no expiry"},
		{"not yet valid", sign(claims(func(c gojwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() })), jwt.Principal{}, "not valid before"},
		{"wrong audience", sign(claims(func(c gojwt.MapClaims) { c["aud"] = idp.ClientID })), jwt.Principal{}, "audience [\"" + idp.ClientID + "\"] is not " + resource},
		{"wrong issuer", sign(claims(func(c gojwt.MapClaims) { c["iss"] = "https://evil.example.com" })), jwt.Principal{}, `issuer "https://evil.example.com" is not one airlock accepts`},
		{"unsigned (alg none)", unsigned(claims(nil)), jwt.Principal{}, `unsigned token (alg "none")`},
		{"a shared-secret signature", hmac(claims(nil)), jwt.Principal{}, `signature algorithm "HS256" is not accepted`},
		{"another key", func() string { s, _ := other.SignJWT(claims(nil)); return s }(), jwt.Principal{}, "does not verify"},
		{"a payload swapped under the signature", func() string {
			parts := strings.Split(sign(claims(nil)), ".")
			parts[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"` + idp.Issuer() + `","sub":"mallory","aud":"` + resource + `","exp":9999999999,"scope":"airlock.approve"}`))
			return strings.Join(parts, ".")
		}(), jwt.Principal{}, "does not verify"},
		{"no role", sign(claims(func(c gojwt.MapClaims) { c["scope"] = "openid email" })), jwt.Principal{}, `no role: the scope claim has ["openid" "email"]`},
		{"no name", sign(claims(func(c gojwt.MapClaims) { delete(c, "sub") })), jwt.Principal{}, "no sub claim"},
		{"not a JWT", "abc.def", jwt.Principal{}, "not a JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.Verify(ctx, tc.token)
			if tc.refusal != "" {
				if !errors.Is(err, jwt.ErrRefused) || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("want refused with %q, got %+v %v", tc.refusal, got, err)
				}
				return
			}
			if err != nil || got.Name != tc.want.Name || got.Role != tc.want.Role {
				t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// An issuer that cannot be reached is not the token's fault: the error is
// not a refusal (the gateway answers it as a failure to try again).
func TestUnreachableIssuerIsNotARefusal(t *testing.T) {
	t.Parallel()
	idp, _ := setup(t)
	v := jwt.New(jwt.Config{Resource: resource, Issuers: []manifest.IssuerSpec{{Issuer: "http://127.0.0.1:9", Role: airlock.RoleAgent}}})
	tok, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": "http://127.0.0.1:9", "sub": "x", "aud": resource, "exp": time.Now().Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok); err == nil || errors.Is(err, jwt.ErrRefused) {
		t.Fatalf("an unreachable issuer: %v", err)
	}
}

// BenchmarkVerify is the cost an issued token adds to a request (keys
// cached): parse, signature (RS256), claims.
func BenchmarkVerify(b *testing.B) {
	idp, err := mockoidc.Run()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = idp.Shutdown() }()
	v := jwt.New(jwt.Config{Resource: resource, Issuers: []manifest.IssuerSpec{{Issuer: idp.Issuer(), Role: airlock.RoleAgent}}})
	tok, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc", "aud": resource, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyFirst is a token's first verification: the signature and
// the claims (run with -benchtime=2000x: every token is signed first).
func BenchmarkVerifyFirst(b *testing.B) {
	idp, err := mockoidc.Run()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = idp.Shutdown() }()
	v := jwt.New(jwt.Config{Resource: resource, Issuers: []manifest.IssuerSpec{{Issuer: idp.Issuer(), Role: airlock.RoleAgent}}})
	toks := make([]string, b.N+1)
	for i := range toks {
		if toks[i], err = idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc", "aud": resource, "jti": i, "exp": time.Now().Add(time.Hour).Unix()}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, toks[b.N]); err != nil { // the keys are fetched
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := v.Verify(ctx, toks[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// A remembered token is still refused once it expires.
func TestRememberedTokenStillExpires(t *testing.T) {
	t.Parallel()
	idp, _ := setup(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	v := jwt.New(jwt.Config{Resource: resource, Clock: clock,
		Issuers: []manifest.IssuerSpec{{Issuer: idp.Issuer(), Role: airlock.RoleAgent, ClockSkew: airlock.NewDuration(time.Second)}}})
	tok, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc", "aud": resource, "exp": time.Now().Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	if _, err := v.Verify(ctx, tok); !errors.Is(err, jwt.ErrRefused) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired token that was verified before: %v", err)
	}
}
