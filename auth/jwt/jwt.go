// Package jwt verifies the JWT access tokens that configured issuers give
// agents and scripts: the signature by the issuer's published keys (JWKS,
// fetched and cached, refetched when a token names a key not seen yet — at
// most once per RefetchEvery),
// the issuer, the audience (airlock's resource URL), expiry and not-before
// with a clock skew, and the claims mapped to a name and a role. It wraps
// github.com/coreos/go-oidc's discovery and github.com/go-jose/go-jose; the
// key set is its own (keys.go) so that refetches are bounded.
package jwt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"
	"github.com/jonboulle/clockwork"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
)

// Config configures a Verifier.
type Config struct {
	Resource string                // required: auth.resource, the default audience
	Issuers  []manifest.IssuerSpec // required: auth.issuers
	// HTTPClient fetches discovery documents and keys. Default: a client
	// with a 10s timeout.
	HTTPClient *http.Client
	// Clock tells the time (expiry, not-before, when keys were fetched).
	// Default: the system clock.
	Clock clockwork.Clock
}

// Principal is who a verified token names.
type Principal struct {
	Name   string   // qualified: jwt:ISSUER#NAME (airlock.JWTPrincipal)
	Role   string   //
	Groups []string // the values of the roles claim, for approval.approvers' group:NAME
}

// ErrRefused wraps every reason a token is refused; the message names the
// reason (the 401's error_description).
var ErrRefused = errors.New("token refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// accepted are the signature algorithms taken: asymmetric only, since
// airlock holds the issuers' public keys, not a shared secret.
var accepted = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// Verifier verifies tokens of the configured issuers.
type Verifier struct {
	cfg     Config
	client  *http.Client
	issuers map[string]*issuer

	// verified remembers tokens already verified (by SHA-256) until their
	// expiry, at most cacheFor: an agent sends the same token with every
	// call, and checking its signature costs more than the rest of a
	// repeat. A key the issuer withdraws stops a cached token within
	// cacheFor.
	mu       sync.Mutex
	verified map[[32]byte]cachedToken
}

type cachedToken struct {
	p     Principal
	until time.Time
}

const (
	cacheFor    = 5 * time.Minute
	cacheTokens = 10_000
)

type issuer struct {
	spec manifest.IssuerSpec
	mu   sync.Mutex
	keys *keySet // nil until the JWKS URL is known
}

// New returns a Verifier; keys are fetched on first use.
func New(cfg Config) *Verifier {
	v := &Verifier{cfg: cfg, client: cfg.HTTPClient, issuers: map[string]*issuer{}, verified: map[[32]byte]cachedToken{}}
	if v.client == nil {
		v.client = &http.Client{Timeout: 10 * time.Second}
	}
	v.cfg.Clock = clocks.Or(v.cfg.Clock)
	for _, s := range cfg.Issuers {
		v.issuers[s.Issuer] = &issuer{spec: s}
	}
	return v
}

// LooksLikeJWT reports whether a bearer token has a JWT's shape (three
// base64url parts), so that it is verified as one rather than looked up
// among the static tokens.
func LooksLikeJWT(raw string) bool {
	return strings.Count(raw, ".") == 2 && strings.HasPrefix(raw, "eyJ")
}

// keySet returns the issuer's keys, discovering the JWKS URL first when
// the manifest gives none (again after a failure).
func (v *Verifier) keySet(ctx context.Context, is *issuer) (*keySet, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.keys != nil {
		return is.keys, nil
	}
	url := is.spec.JWKSURL
	if url == "" {
		p, err := gooidc.NewProvider(gooidc.ClientContext(ctx, v.client), is.spec.Issuer)
		if err != nil {
			return nil, fmt.Errorf("jwt: discovering %s: %w", is.spec.Issuer, err)
		}
		var meta struct {
			JWKS string `json:"jwks_uri"`
		}
		if err := p.Claims(&meta); err != nil || meta.JWKS == "" {
			return nil, fmt.Errorf("jwt: %s's discovery document has no jwks_uri (set jwks_url)", is.spec.Issuer)
		}
		url = meta.JWKS
	}
	is.keys = &keySet{url: url, client: v.client, now: v.cfg.Clock.Now}
	return is.keys, nil
}

// claims are the registered claims read from a token.
type claims struct {
	Issuer    string          `json:"iss"`
	Audience  json.RawMessage `json:"aud"`
	Expiry    *float64        `json:"exp"`
	NotBefore *float64        `json:"nbf"`
}

// Verify verifies raw and returns whom it names. A token refused for what
// it is (unsigned, expired, another audience, an unknown issuer, a bad
// signature, no role) wraps ErrRefused; a failure to fetch the issuer's
// keys does not.
func (v *Verifier) Verify(ctx context.Context, raw string) (Principal, error) {
	sum := sha256.Sum256([]byte(raw))
	now := v.cfg.Clock.Now()
	v.mu.Lock()
	c, ok := v.verified[sum]
	v.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.p, nil
	}
	p, until, err := v.verify(ctx, raw, now)
	if err != nil {
		return p, err
	}
	v.mu.Lock()
	if len(v.verified) >= cacheTokens {
		clear(v.verified) // rare: each token is verified once again
	}
	if limit := now.Add(cacheFor); until.After(limit) {
		until = limit
	}
	v.verified[sum] = cachedToken{p: p, until: until}
	v.mu.Unlock()
	return p, nil
}

// verify checks raw in full; until is when its expiry (with the skew)
// passes.
func (v *Verifier) verify(ctx context.Context, raw string, now time.Time) (Principal, time.Time, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return Principal{}, time.Time{}, refused("not a JWT (want three base64url parts)")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(b, &header) != nil {
		return Principal{}, time.Time{}, refused("the JWT's header is not base64url JSON")
	}
	if header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return Principal{}, time.Time{}, refused("unsigned token (alg %q)", header.Alg)
	}
	jws, err := jose.ParseSignedCompact(raw, accepted)
	if err != nil {
		return Principal{}, time.Time{}, refused("signature algorithm %q is not accepted (want an asymmetric one such as RS256 or ES256)", header.Alg)
	}
	var c claims
	unverified := jws.UnsafePayloadWithoutVerification()
	if err := json.Unmarshal(unverified, &c); err != nil {
		return Principal{}, time.Time{}, refused("the JWT's claims are not a JSON object")
	}
	is := v.issuers[c.Issuer]
	if is == nil {
		return Principal{}, time.Time{}, refused("issuer %q is not one airlock accepts (auth.issuers)", c.Issuer)
	}
	keys, err := v.keySet(ctx, is)
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	payload, err := keys.verify(ctx, jws)
	if errors.Is(err, errSignature) {
		return Principal{}, time.Time{}, refused("the signature does not verify with %s's keys", c.Issuer)
	}
	if err != nil {
		return Principal{}, time.Time{}, err // the keys could not be fetched: not the token's fault
	}
	if !bytes.Equal(payload, unverified) {
		return Principal{}, time.Time{}, refused("the signature does not verify")
	}
	skew := is.spec.ClockSkewOr()
	switch {
	case c.Expiry == nil:
		return Principal{}, time.Time{}, refused("the token has no expiry (exp)")
	case now.Add(-skew).After(unix(*c.Expiry)):
		return Principal{}, time.Time{}, refused("the token expired at %s", unix(*c.Expiry).UTC().Format(time.RFC3339))
	case c.NotBefore != nil && now.Add(skew).Before(unix(*c.NotBefore)):
		return Principal{}, time.Time{}, refused("the token is not valid before %s", unix(*c.NotBefore).UTC().Format(time.RFC3339))
	}
	want := is.spec.AudienceOr(v.cfg.Resource)
	if auds := audiences(c.Audience); !slices.Contains(auds, want) {
		return Principal{}, time.Time{}, refused("the token's audience %q is not %s", auds, want)
	}
	var all map[string]any
	_ = json.Unmarshal(payload, &all)
	p, err := mapClaims(&is.spec, all)
	return p, unix(*c.Expiry).Add(skew), err
}

func unix(f float64) time.Time { return time.Unix(0, int64(f*1e9)) }

func audiences(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(raw, &many)
	return many
}

// lookup reads a claim by a dotted path.
func lookup(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[k]
	}
	return v
}

// mapClaims names the caller and gives it the highest role its claim's
// values map to, or the issuer's role.
func mapClaims(spec *manifest.IssuerSpec, all map[string]any) (Principal, error) {
	name, _ := lookup(all, spec.NameClaimOr()).(string)
	if name == "" {
		return Principal{}, refused("the token has no %s claim to name the caller by", spec.NameClaimOr())
	}
	if err := airlock.CheckText(spec.NameClaimOr(), name); err != nil {
		return Principal{}, refused("%v", err)
	}
	var values []string
	switch x := lookup(all, spec.RolesClaimOr()).(type) {
	case string:
		values = strings.Fields(x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				values = append(values, s)
			}
		}
	}
	role := ""
	for _, val := range values {
		if r := spec.Roles[val]; airlock.RoleRank(r) > airlock.RoleRank(role) {
			role = r
		}
	}
	if role == "" {
		role = spec.Role
	}
	if role == "" {
		return Principal{}, refused("no role: the %s claim has %q and auth.issuers maps none of them", spec.RolesClaimOr(), values)
	}
	return Principal{Name: airlock.JWTPrincipal(spec.Issuer, name), Role: role, Groups: values}, nil
}
