package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/manifest"
)

// Token is a bearer token the server accepts, kept as the SHA-256 of the token.
type Token struct {
	Name   string
	Role   string
	SHA256 [32]byte
}

// Principal is who made a request.
type Principal struct {
	Name   string   `json:"name"` // qualified (docs/identity.md): alice, jwt:ISSUER#NAME
	Role   string   `json:"role"`
	Groups []string `json:"groups,omitempty"` // a JWT's roles claim values
}

// TokensFromManifest resolves the manifest's tokens: sha256 entries as
// given, env entries by hashing the variable's value (an unset or empty
// variable is an error naming it).
func TokensFromManifest(specs []manifest.TokenSpec) ([]Token, error) {
	out := make([]Token, 0, len(specs))
	for _, s := range specs {
		t := Token{Name: s.Name, Role: s.Role}
		switch {
		case s.SHA256 != "":
			b, err := hex.DecodeString(s.SHA256)
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("token %s: sha256 is not 64 hex digits", s.Name)
			}
			copy(t.SHA256[:], b)
		default:
			v := os.Getenv(s.Env)
			if v == "" {
				return nil, fmt.Errorf("token %s: environment variable %s is not set", s.Name, s.Env)
			}
			t.SHA256 = sha256.Sum256([]byte(v))
		}
		for _, o := range out {
			if o.SHA256 == t.SHA256 {
				// The first would win silently: one secret, two principals.
				return nil, fmt.Errorf("tokens %s and %s have one secret: one secret must name one principal (auth.tokens)", o.Name, t.Name)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// HashToken is the form a token is stored in.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

type principalKey struct{}

// PrincipalFrom returns the authenticated principal of a request context.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

func (g *Gateway) authenticate(r *http.Request) (Principal, error) {
	// The scheme is case-insensitive (RFC 9110): "bearer" is "Bearer".
	scheme, raw, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return Principal{}, airlock.Errorf(airlock.CodeUnauthenticated, "missing bearer token: send Authorization: Bearer TOKEN")
	}
	if p, ok := Authenticate(g.tokens, raw); ok {
		return p, nil
	}
	raw = strings.TrimSpace(raw)
	if g.issued != nil && jwt.LooksLikeJWT(raw) {
		p, err := g.issued.Verify(r.Context(), raw)
		if err == nil {
			return Principal(p), nil
		}
		if errors.Is(err, jwt.ErrRefused) {
			return Principal{}, &airlock.Error{Code: airlock.CodeUnauthenticated, Message: "bearer token refused: " + strings.TrimPrefix(err.Error(), jwt.ErrRefused.Error()+": ")}
		}
		// The issuer's keys could not be fetched: not the caller's fault.
		g.log.Error("airlock: verifying an issued token", "err", err)
		return Principal{}, errIssuerUnreachable
	}
	return Principal{}, airlock.Errorf(airlock.CodeUnauthenticated, "unknown bearer token")
}

// errIssuerUnreachable is a token that could not be verified because its
// issuer's keys could not be fetched; the caller may try again.
var errIssuerUnreachable = airlock.Errorf(airlock.CodeUpstream, "the token's issuer could not be reached to fetch its keys; try again")

// challenge is the WWW-Authenticate of a 401 (RFC 6750, RFC 9728): where
// the protected resource metadata is, and why a token given was refused.
func (g *Gateway) challenge(err error, tokenGiven bool) string {
	c := `Bearer realm="airlock"`
	if g.issued != nil && g.m.Auth.Resource != "" { // the metadata is served (Handler)
		c += fmt.Sprintf(`, resource_metadata=%q`, manifest.ResourceMetadataURL(g.m.Auth.Resource))
	}
	var e *airlock.Error
	if tokenGiven && errors.As(err, &e) {
		c += fmt.Sprintf(`, error="invalid_token", error_description=%q`, strings.ReplaceAll(e.Message, `"`, `'`))
	}
	return c
}

// Authenticate maps a bearer token to its principal among tokens (the
// gateway's and the page's sign-in share it).
func Authenticate(tokens []Token, token string) (Principal, bool) {
	t, ok := TokenOf(tokens, token)
	return Principal{Name: t.Name, Role: t.Role}, ok
}

// TokenOf is the entry of tokens that token is.
func TokenOf(tokens []Token, token string) (Token, bool) {
	sum := HashToken(strings.TrimSpace(token))
	for _, t := range tokens {
		if subtle.ConstantTimeCompare(sum[:], t.SHA256[:]) == 1 {
			return t, true
		}
	}
	return Token{}, false
}

// Credential names t's secret without being it or its stored hash: what
// a page session opened with t keeps, so that it ends once no token has
// it — the token rotated or removed (docs/hardening.md, "page sessions").
func (t Token) Credential() string {
	sum := sha256.Sum256(append([]byte("airlock page session\x00"), t.SHA256[:]...))
	return hex.EncodeToString(sum[:16])
}

// ByCredential is the token of tokens whose Credential is credential.
func ByCredential(tokens []Token, credential string) (Token, bool) {
	for _, t := range tokens {
		if subtle.ConstantTimeCompare([]byte(t.Credential()), []byte(credential)) == 1 {
			return t, true
		}
	}
	return Token{}, false
}

// require wraps a handler so that only the given roles reach it.
func (g *Gateway) require(roles []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := g.proxies.ClientAddr(r)
		if wait := g.throttle.Wait(addr, "bearer"); wait > 0 {
			refuse(w, wait)
			writeError(w, g.log, airlock.Errorf(airlock.CodeTooManyAttempts, "too many failed attempts from this address; try again in %s", wait.Round(time.Second)))
			return
		}
		p, err := g.authenticate(r)
		if err != nil {
			given := r.Header.Get("Authorization") != ""
			if errors.Is(err, errIssuerUnreachable) {
				writeError(w, g.log, err)
				return
			}
			if given {
				g.throttle.Fail(addr, "bearer") // a wrong token, not a missing one
			}
			w.Header().Set("WWW-Authenticate", g.challenge(err, given))
			writeError(w, g.log, err)
			return
		}
		if !slices.Contains(roles, p.Role) {
			writeError(w, g.log, airlock.Errorf(airlock.CodeForbidden, "a token with role %s may not do this; it needs %s", p.Role, strings.Join(roles, " or ")))
			return
		}
		ctx := airlock.WithActor(context.WithValue(r.Context(), principalKey{}, p), p.Name)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// resourceMetadata serves airlock's protected resource metadata (RFC
// 9728): the resource, the issuers that may give tokens for it, and, for
// issuers whose roles are scopes, those scopes (a client asks for them).
func (g *Gateway) resourceMetadata() http.Handler {
	meta := &oauthex.ProtectedResourceMetadata{Resource: g.m.Auth.Resource, ResourceName: "airlock", BearerMethodsSupported: []string{"header"}}
	var scopes []string
	for _, is := range g.m.Auth.Issuers {
		meta.AuthorizationServers = append(meta.AuthorizationServers, is.Issuer)
		if c := is.RolesClaimOr(); c == "scope" || c == "scp" {
			for v := range is.Roles {
				if !slices.Contains(scopes, v) {
					scopes = append(scopes, v)
				}
			}
		}
	}
	slices.Sort(scopes)
	meta.ScopesSupported = scopes
	return mcpauth.ProtectedResourceMetadataHandler(meta)
}
