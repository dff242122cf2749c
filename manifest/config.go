package manifest

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

// Manifest is airlock.yaml (docs/configuration.md, "The manifest"): the
// tools and their calendar (airlock.Catalog, the domain) and the server's
// configuration around them.
type Manifest struct {
	Version         int `yaml:"version" json:"version"`
	airlock.Catalog `yaml:",inline"`
	Auth            Auth                `yaml:"auth" json:"auth"`
	Upstreams       map[string]Upstream `yaml:"upstreams" json:"upstreams,omitempty"`
	// Notify says where to announce plans that wait for a person.
	Notify Notify `yaml:"notify" json:"notify,omitempty"`
	// Retention says how long records, audit events and figures are kept.
	Retention Retention `yaml:"retention" json:"retention,omitzero"`
	// Limits bound what one request may carry.
	Limits Limits `yaml:"limits" json:"limits,omitzero"`
}

// Prepare applies defaults, indexes the tools and validates. Call it once
// after building a manifest in code; the loader prepares what it loads.
func (m *Manifest) Prepare() error {
	m.ApplyDefaults()
	for _, t := range m.Tools {
		if t != nil && t.Upstream != nil {
			if u, ok := m.Upstreams[t.Upstream.Name]; ok {
				t.HonorsKey = u.HonorsIdempotencyKey
			}
			if t.Upstream.Caller {
				t.HonorsKey = t.Upstream.HonorsIdempotencyKey
			}
		}
	}
	return m.Validate()
}

// Notify configures notifications.
type Notify struct {
	// Webhook receives a JSON POST (with a Slack-compatible "text" field)
	// when a plan waits for a person. Default: none.
	Webhook string `yaml:"webhook" json:"webhook,omitempty"`
	// SecretEnv names the environment variable holding the secret the
	// webhook's body is signed with (HMAC-SHA256, header
	// X-Airlock-Signature: sha256=HEX), so that the receiver can tell
	// airlock's notices from anyone's. Default: none (unsigned; serve
	// warns).
	SecretEnv string `yaml:"secret_env" json:"secret_env,omitempty"`
}

// Retention says how long airlock keeps what it writes; purges run in the
// background in short batches (docs/operations.md, "Retention").
type Retention struct {
	// Records: how long a completed record stays after its window ends
	// (run windows: after the call); a repeat within it gets the first
	// result. Forever windows are kept. Default 7d.
	Records *airlock.Duration `yaml:"records" json:"records,omitempty"`
	// Audit: how long sealed audit events are kept; older ones are purged
	// and the chain stays verifiable from an anchor. Archive them first
	// with `airlock audit export --until`. Default: kept forever. At least 1d.
	Audit *airlock.Duration `yaml:"audit" json:"audit,omitempty"`
	// Figures: how long the per-minute rollup behind the report and the
	// page's figures is kept. Default 400d. At least 1d.
	Figures *airlock.Duration `yaml:"figures" json:"figures,omitempty"`
}

// Default retention.
const (
	DefaultRecordRetention = 7 * 24 * time.Hour
	DefaultFigureRetention = 400 * 24 * time.Hour
)

// RecordsOr returns the records' retention, DefaultRecordRetention when unset.
func (r *Retention) RecordsOr() time.Duration { return durOr(r.Records, DefaultRecordRetention) }

// AuditOr returns the audit log's retention; 0 (unset) keeps events forever.
func (r *Retention) AuditOr() time.Duration { return durOr(r.Audit, 0) }

// FiguresOr returns the rollup's retention, DefaultFigureRetention when unset.
func (r *Retention) FiguresOr() time.Duration { return durOr(r.Figures, DefaultFigureRetention) }

func (r *Retention) validate(v *validator) {
	for _, f := range []struct {
		path string
		d    *airlock.Duration
		min  time.Duration
	}{
		{"retention.records", r.Records, time.Minute},
		{"retention.audit", r.Audit, 24 * time.Hour},
		{"retention.figures", r.Figures, 24 * time.Hour},
	} {
		switch {
		case f.d == nil:
		case f.d.Err() != nil:
			v.add(f.path, "%v", f.d.Err())
		case f.d.Duration < f.min:
			v.add(f.path, "must be at least %s, not %s", fmtDays(f.min), f.d.Duration)
		}
	}
}

func fmtDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// Limits bound what one request may carry (docs/configuration.md).
type Limits struct {
	// RequestBytes caps one request: an HTTP API body, and one MCP message
	// over HTTP or stdio. Default 1 MiB; from 1 KiB to 64 MiB.
	RequestBytes *airlock.ByteSize `yaml:"request_bytes" json:"request_bytes,omitempty"`
	// RunIDBytes caps a call's run id (MCP _meta, X-Airlock-Run, run_id).
	// Default 256 bytes; from 16 bytes to 4 KiB.
	RunIDBytes *airlock.ByteSize `yaml:"run_id_bytes" json:"run_id_bytes,omitempty"`
	// CacheBytes bounds the in-process cache of completed records by the
	// bytes they hold (it also holds at most 10,000). Default 64 MiB; from
	// 1 MiB to 16 GiB.
	CacheBytes *airlock.ByteSize `yaml:"cache_bytes" json:"cache_bytes,omitempty"`
	// MCPSessionIdle closes an MCP session (over HTTP) that has had no
	// request for this long. Default 30m; from 1s to 7d.
	MCPSessionIdle airlock.Duration `yaml:"mcp_session_idle" json:"mcp_session_idle,omitzero"`
	// MCPSessionsPerToken caps the MCP sessions one token holds open; an
	// initialize beyond it closes the token's least recently used idle
	// session, and gets 429 only when every one is answering a request
	// (docs/DECISIONS.md, 77). Default 100; from 1 to 100,000.
	MCPSessionsPerToken int `yaml:"mcp_sessions_per_token" json:"mcp_sessions_per_token,omitempty"`
	// Connections caps the HTTP connections served at once; more wait to
	// be accepted. Default 1024; from 16 to 1,000,000.
	Connections int `yaml:"connections" json:"connections,omitempty"`
	// BodyTimeout is how long a request's body may take to arrive. Default
	// 30s; from 1s to 10m.
	BodyTimeout airlock.Duration `yaml:"body_timeout" json:"body_timeout,omitzero"`
	// UpstreamAnswerBytes caps one upstream answer airlock reads and keeps
	// (an HTTP response body, an MCP tool result). A larger answer is not
	// kept: a success is recorded as a success whose result says the
	// answer was omitted, since the work was done. Default 4 MiB; from
	// 1 KiB to 256 MiB.
	UpstreamAnswerBytes *airlock.ByteSize `yaml:"upstream_answer_bytes" json:"upstream_answer_bytes,omitempty"`
}

// DefaultUpstreamAnswerBytes is limits.upstream_answer_bytes' default.
const DefaultUpstreamAnswerBytes = upstream.DefaultMaxAnswer

// UpstreamAnswerBytesOr returns the upstream answer limit,
// DefaultUpstreamAnswerBytes when unset.
func (l *Limits) UpstreamAnswerBytesOr() int64 {
	if l.UpstreamAnswerBytes == nil || l.UpstreamAnswerBytes.Err() != nil {
		return DefaultUpstreamAnswerBytes
	}
	return l.UpstreamAnswerBytes.Bytes
}

// ConnectionsOr returns the connection cap, 1024 when unset.
func (l *Limits) ConnectionsOr() int {
	if l.Connections <= 0 {
		return 1024
	}
	return l.Connections
}

// Default and bounds of limits.request_bytes.
const (
	DefaultRequestBytes = 1 << 20
	minRequestBytes     = 1 << 10
	maxRequestBytes     = 64 << 20
)

// RunIDBytesOr returns the run id limit, DefaultMaxRunIDBytes when unset.
func (l *Limits) RunIDBytesOr() int {
	if l.RunIDBytes == nil || l.RunIDBytes.Err() != nil {
		return airlock.DefaultMaxRunIDBytes
	}
	return int(l.RunIDBytes.Bytes)
}

// CacheBytesOr returns the cache's byte bound, DefaultCacheBytes when unset.
func (l *Limits) CacheBytesOr() int64 {
	if l.CacheBytes == nil || l.CacheBytes.Err() != nil {
		return airlock.DefaultCacheBytes
	}
	return l.CacheBytes.Bytes
}

// RequestBytesOr returns the request limit, DefaultRequestBytes when unset.
func (l *Limits) RequestBytesOr() int64 {
	if l.RequestBytes == nil || l.RequestBytes.Err() != nil {
		return DefaultRequestBytes
	}
	return l.RequestBytes.Bytes
}

func (l *Limits) validate(v *validator) {
	switch b := l.RequestBytes; {
	case b == nil:
	case b.Err() != nil:
		v.add("limits.request_bytes", "%v", b.Err())
	case b.Bytes < minRequestBytes || b.Bytes > maxRequestBytes:
		v.add("limits.request_bytes", "must be from 1KiB to 64MiB, not %d bytes", b.Bytes)
	}
	switch b := l.RunIDBytes; {
	case b == nil:
	case b.Err() != nil:
		v.add("limits.run_id_bytes", "%v", b.Err())
	case b.Bytes < 16 || b.Bytes > 4<<10:
		v.add("limits.run_id_bytes", "must be from 16 bytes to 4KiB, not %d bytes", b.Bytes)
	}
	switch d := l.MCPSessionIdle; {
	case d.Err() != nil:
		v.add("limits.mcp_session_idle", "%v", d.Err())
	case d.Raw() != "" && (d.Duration < time.Second || d.Duration > 7*24*time.Hour):
		v.add("limits.mcp_session_idle", "must be from 1s to 7d, not %s", d.Raw())
	}
	switch d := l.BodyTimeout; {
	case d.Err() != nil:
		v.add("limits.body_timeout", "%v", d.Err())
	case d.Raw() != "" && (d.Duration < time.Second || d.Duration > 10*time.Minute):
		v.add("limits.body_timeout", "must be from 1s to 10m, not %s", d.Raw())
	}
	if n := l.Connections; n != 0 && (n < 16 || n > 1_000_000) {
		v.add("limits.connections", "must be from 16 to 1000000, not %d", n)
	}
	if n := l.MCPSessionsPerToken; n < 0 || n > 100_000 {
		v.add("limits.mcp_sessions_per_token", "must be from 1 to 100000, not %d", n)
	}
	switch b := l.UpstreamAnswerBytes; {
	case b == nil:
	case b.Err() != nil:
		v.add("limits.upstream_answer_bytes", "%v", b.Err())
	case b.Bytes < 1<<10 || b.Bytes > 256<<20:
		v.add("limits.upstream_answer_bytes", "must be from 1KiB to 256MiB, not %d bytes", b.Bytes)
	}
	switch b := l.CacheBytes; {
	case b == nil:
	case b.Err() != nil:
		v.add("limits.cache_bytes", "%v", b.Err())
	case b.Bytes < 1<<20 || b.Bytes > 16<<30:
		v.add("limits.cache_bytes", "must be from 1MiB to 16GiB, not %d bytes", b.Bytes)
	}
}

// Auth lists the bearer tokens the server accepts.
type Auth struct {
	Tokens []TokenSpec `yaml:"tokens" json:"tokens,omitempty"`
	// TrustedProxies are the addresses (IPs or CIDR prefixes) of the
	// proxies in front of airlock whose X-Forwarded-For and
	// X-Forwarded-Proto it believes: for the client address that failed
	// attempts are counted by, and for marking the page's cookies Secure.
	// Default: none (the connection's own address; Secure only over TLS).
	TrustedProxies []string `yaml:"trusted_proxies" json:"trusted_proxies,omitempty"`
	// OIDC signs people in to the page through the company's OpenID
	// Connect provider. Default: none (the page takes tokens only).
	OIDC *OIDCSpec `yaml:"oidc" json:"oidc,omitempty"`
	// Resource is airlock's URL as an OAuth protected resource (RFC 9728):
	// the URL clients reach /mcp at, such as https://airlock.example.com/mcp.
	// It is the audience issued tokens must name, and where the metadata
	// that sends MCP clients to the issuers is published. Required with
	// Issuers.
	Resource string `yaml:"resource" json:"resource,omitempty"`
	// Issuers are the authorization servers whose JWT access tokens
	// airlock accepts beside the static tokens. Default: none.
	Issuers []IssuerSpec `yaml:"issuers" json:"issuers,omitempty"`
}

// IssuerSpec is an authorization server whose JWT access tokens airlock
// accepts.
type IssuerSpec struct {
	// Issuer is the tokens' iss. Required; https unless the host is
	// loopback.
	Issuer string `yaml:"issuer" json:"issuer"`
	// JWKSURL is where its signing keys are published. Default: the
	// jwks_uri of its discovery document
	// (ISSUER/.well-known/openid-configuration).
	JWKSURL string `yaml:"jwks_url" json:"jwks_url,omitempty"`
	// Audience the tokens must name. Default auth.resource.
	Audience string `yaml:"audience" json:"audience,omitempty"`
	// NameClaim names the caller in the audit log. Default "sub".
	NameClaim string `yaml:"name_claim" json:"name_claim,omitempty"`
	// RolesClaim is looked up in Roles: a string (split at spaces, as
	// "scope" is) or a list of strings; a dotted path reaches into an
	// object (realm_access.roles). Default "roles".
	RolesClaim string `yaml:"roles_claim" json:"roles_claim,omitempty"`
	// Roles maps a value of RolesClaim to a role (agent, approver, admin);
	// a token with several gets the highest.
	Roles map[string]string `yaml:"roles" json:"roles,omitempty"`
	// Role is the role of a token none of whose values is in Roles.
	// Default: none (such a token is refused). Roles or Role is required.
	Role string `yaml:"role" json:"role,omitempty"`
	// ClockSkew is how far the issuer's clock may be from airlock's for
	// exp and nbf. Default 1m.
	ClockSkew airlock.Duration `yaml:"clock_skew" json:"clock_skew,omitempty"`
}

// AudienceOr is Audience or the resource.
func (i *IssuerSpec) AudienceOr(resource string) string { return cmp.Or(i.Audience, resource) }

// NameClaimOr is NameClaim or "sub".
func (i *IssuerSpec) NameClaimOr() string { return cmp.Or(i.NameClaim, "sub") }

// RolesClaimOr is RolesClaim or "roles".
func (i *IssuerSpec) RolesClaimOr() string { return cmp.Or(i.RolesClaim, "roles") }

// ClockSkewOr is ClockSkew or a minute.
func (i *IssuerSpec) ClockSkewOr() time.Duration {
	if i.ClockSkew.Duration > 0 {
		return i.ClockSkew.Duration
	}
	return time.Minute
}

// ResourceMetadataURL is where the protected resource metadata of
// resource is published (RFC 9728 section 3.1): the well-known path
// between the host and the resource's path.
func ResourceMetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" {
		return ""
	}
	path := strings.TrimSuffix(u.Path, "/")
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + path
}

// OIDCSpec configures sign-in to the page with OpenID Connect
// (authorization code with PKCE).
type OIDCSpec struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// ISSUER/.well-known/openid-configuration). Required; https unless
	// the host is loopback.
	Issuer string `yaml:"issuer" json:"issuer"`
	// ClientID is airlock's client at the provider. Required.
	ClientID string `yaml:"client_id" json:"client_id"`
	// ClientSecretEnv names the environment variable holding the client's
	// secret. Required (airlock is a confidential client).
	ClientSecretEnv string `yaml:"client_secret_env" json:"client_secret_env"`
	// RedirectURL is the callback registered at the provider: airlock's
	// public URL followed by /ui/oidc/callback. Required.
	RedirectURL string `yaml:"redirect_url" json:"redirect_url"`
	// Scopes asked for. Default [openid, email, profile]; add the scope
	// that puts RolesClaim in the ID token when the provider needs one
	// (often "groups").
	Scopes []string `yaml:"scopes" json:"scopes,omitempty"`
	// NameClaim is the claim that names the person in the audit log, the
	// decisions and the settlements. Default "email" (it must then be
	// verified); when absent, preferred_username, then the subject.
	NameClaim string `yaml:"name_claim" json:"name_claim,omitempty"`
	// RolesClaim is the claim (a string or a list of strings, such as
	// the groups) looked up in Roles. Default "groups".
	RolesClaim string `yaml:"roles_claim" json:"roles_claim,omitempty"`
	// Roles maps a value of RolesClaim to approver or admin; a person
	// with several gets the highest, one with none is refused. Required.
	Roles map[string]string `yaml:"roles" json:"roles"`
	// Label is the sign-in button's text. Default "Sign in with single
	// sign-on".
	Label string `yaml:"label" json:"label,omitempty"`
	// Recheck is how long the provider's word on a person holds: after it,
	// the page sends the person through the provider again before showing
	// or deciding anything, and a person it no longer names, or whose
	// groups no longer make an approver, is signed out. Default 10m; from
	// 1m to 8h (docs/hardening.md, "page sessions").
	Recheck airlock.Duration `yaml:"recheck" json:"recheck,omitzero"`
}

// DefaultOIDCRecheck is how long the provider's word holds by default.
const DefaultOIDCRecheck = 10 * time.Minute

// RecheckOr is Recheck or its default.
func (o *OIDCSpec) RecheckOr() time.Duration { return cmp.Or(o.Recheck.Duration, DefaultOIDCRecheck) }

// ScopesOr returns the scopes asked for, openid always among them.
func (o *OIDCSpec) ScopesOr() []string {
	if len(o.Scopes) == 0 {
		return []string{"openid", "email", "profile"}
	}
	if slices.Contains(o.Scopes, "openid") {
		return o.Scopes
	}
	return append([]string{"openid"}, o.Scopes...)
}

// NameClaimOr is NameClaim or its default.
func (o *OIDCSpec) NameClaimOr() string { return cmp.Or(o.NameClaim, "email") }

// RolesClaimOr is RolesClaim or its default.
func (o *OIDCSpec) RolesClaimOr() string { return cmp.Or(o.RolesClaim, "groups") }

// LabelOr is Label or its default.
func (o *OIDCSpec) LabelOr() string { return cmp.Or(o.Label, "Sign in with single sign-on") }

// OIDCCallbackPath is where the provider sends the person back.
const OIDCCallbackPath = "/ui/oidc/callback"

func (o *OIDCSpec) validate(v *validator) {
	const p = "auth.oidc"
	switch {
	case o.Issuer == "":
		v.add(p+".issuer", "required: the provider's issuer URL")
	case !secureURL(o.Issuer):
		v.add(p+".issuer", "%q is not an https URL (http only on a loopback host)", o.Issuer)
	case strings.ContainsAny(o.Issuer, "?#"):
		v.add(p+".issuer", "%q has a query or a fragment, which an issuer URL never has (OpenID Connect Discovery)", o.Issuer)
	}
	if o.ClientID == "" {
		v.add(p+".client_id", "required: airlock's client id at the provider")
	}
	if o.ClientSecretEnv == "" {
		v.add(p+".client_secret_env", "required: the environment variable holding the client's secret")
	}
	if u, err := url.Parse(o.RedirectURL); o.RedirectURL == "" {
		v.add(p+".redirect_url", "required: airlock's public URL followed by %s", OIDCCallbackPath)
	} else if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.Path != OIDCCallbackPath {
		v.add(p+".redirect_url", "%q is not an http(s) URL ending in %s", o.RedirectURL, OIDCCallbackPath)
	}
	switch d := o.Recheck; {
	case d.Err() != nil:
		v.add(p+".recheck", "%v", d.Err())
	case d.Raw() != "" && (d.Duration < time.Minute || d.Duration > 8*time.Hour):
		v.add(p+".recheck", "must be from 1m to 8h, not %s", d.Raw())
	}
	if len(o.Roles) == 0 {
		v.add(p+".roles", "required: which values of the %s claim make an approver or an admin", o.RolesClaimOr())
	}
	for _, value := range slices.Sorted(maps.Keys(o.Roles)) {
		if role := o.Roles[value]; role != airlock.RoleApprover && role != airlock.RoleAdmin {
			v.add(fmt.Sprintf("%s.roles[%q]", p, value), "%q is not a role the page has: want approver or admin", role)
		}
	}
}

// secureURL reports whether s is an absolute https URL, or http on a
// loopback host (development and tests).
func secureURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http" && isLoopbackHost(u.Hostname()))
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// TrustedPrefixes are TrustedProxies parsed (each IP a single-address
// prefix); entries that do not parse are left out (Validate names them).
func (a *Auth) TrustedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range a.TrustedProxies {
		if p, err := parseProxy(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func parseProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		return p.Masked(), err
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// TokenSpec is one bearer token, stored as the hex SHA-256 of the token or
// read from an environment variable at start.
type TokenSpec struct {
	Name   string `yaml:"name" json:"name"`
	Role   string `yaml:"role" json:"role"`
	SHA256 string `yaml:"sha256" json:"sha256,omitempty"`
	Env    string `yaml:"env" json:"env,omitempty"`
}

// Upstream is where tools are executed: an HTTP JSON service or an MCP server.
type Upstream struct {
	HTTP                 string       `yaml:"http" json:"http,omitempty"`
	MCP                  *MCPUpstream `yaml:"mcp" json:"mcp,omitempty"`
	HonorsIdempotencyKey bool         `yaml:"honors_idempotency_key" json:"honors_idempotency_key,omitempty"`
}

// MCPUpstream is an MCP server reached over stdio (Command) or streamable HTTP (URL).
type MCPUpstream struct {
	Command []string `yaml:"command" json:"command,omitempty"`
	URL     string   `yaml:"url" json:"url,omitempty"`
	// Resources and Prompts offer the server's resources (list, read,
	// templates) and prompts (list, get) to agents as they are: read-only,
	// no key, no record. Default false: only the tools the manifest names.
	Resources bool `yaml:"resources" json:"resources,omitempty"`
	Prompts   bool `yaml:"prompts" json:"prompts,omitempty"`
	// Prefix, when set, is put before the names of its prompts and
	// resources ("docs" → "docs_summarize"), so that several upstreams'
	// names do not clash. Default: none (the names as they are).
	Prefix string `yaml:"prefix" json:"prefix,omitempty"`
	// Sessions is how reads reach the server: "shared" (one session for
	// every call) or "per_agent" (a session for each agent session, so that
	// the server's log messages and its sampling and elicitation requests
	// during a read reach the agent that made it). Default "shared".
	Sessions string `yaml:"sessions" json:"sessions,omitempty"`
}

// MCP upstream session modes (MCPUpstream.Sessions).
const (
	SessionsShared   = "shared"
	SessionsPerAgent = "per_agent"
)

// Validate reports every problem with the manifest, each with its path.
func (m *Manifest) Validate() error {
	v := &validator{}
	if m.Version != 1 {
		v.add("version", "must be 1 (got %d)", m.Version)
	}
	m.Auth.validate(v)
	m.Retention.validate(v)
	m.Limits.validate(v)
	if m.Notify.Webhook != "" {
		if pu, err := url.Parse(m.Notify.Webhook); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			v.add("notify.webhook", "%q is not an http(s) URL", m.Notify.Webhook)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(m.Upstreams)) {
		m.Upstreams[n].validate(v, "upstreams."+n)
	}
	var ve *airlock.ValidationError
	if errors.As(m.ValidateWith(m.checkUpstream), &ve) {
		v.problems = append(v.problems, ve.Problems...)
	}
	m.checkApprovers(v)
	return v.err()
}

// checkApprovers refuses, where the manifest lists its static tokens, an
// approver named without a ':' (a static token's name) that is no
// approver or admin token: nobody could ever decide as it (ALICE beside
// alice, a trailing space, an agent's token), and a rule counting on it
// for its approvals would wait until its plans expire. Without
// auth.tokens the static tokens are given elsewhere (serve's dev tokens,
// an embedding program), so names are taken as they are.
func (m *Manifest) checkApprovers(v *validator) {
	if len(m.Auth.Tokens) == 0 {
		return
	}
	deciders := map[string]bool{}
	for _, tok := range m.Auth.Tokens {
		if tok.Role == airlock.RoleApprover || tok.Role == airlock.RoleAdmin {
			deciders[tok.Name] = true
		}
	}
	for i, t := range m.Tools {
		if t.Approval == nil {
			continue
		}
		for j, who := range t.Approval.Approvers {
			if strings.Contains(who, ":") || deciders[who] {
				continue
			}
			v.add(fmt.Sprintf("tools[%d].approval.approvers[%d]", i, j), "tool %s: %q is no approver or admin token of auth.tokens (static names are exact), so it could never decide; name one of theirs, oidc:NAME, jwt:ISSUER#SUBJECT or group:NAME",
				t.Name, who)
		}
	}
}

func (a *Auth) validate(v *validator) {
	if a.OIDC != nil {
		a.OIDC.validate(v)
	}
	if a.Resource != "" {
		if u, err := url.Parse(a.Resource); err != nil || !secureURL(a.Resource) || u.RawQuery != "" || u.Fragment != "" {
			v.add("auth.resource", "%q is not an https URL without query or fragment (http only on a loopback host): want the URL clients reach /mcp at", a.Resource)
		}
	} else if len(a.Issuers) > 0 {
		v.add("auth.resource", "required with auth.issuers: the URL clients reach /mcp at (the audience of issued tokens)")
	}
	seenIssuer := map[string]bool{}
	for i, is := range a.Issuers {
		p := fmt.Sprintf("auth.issuers[%d]", i)
		switch {
		case is.Issuer == "":
			v.add(p+".issuer", "required: the tokens' iss")
		case !secureURL(is.Issuer):
			v.add(p+".issuer", "%q is not an https URL (http only on a loopback host)", is.Issuer)
		case strings.ContainsAny(is.Issuer, "?#"):
			// A principal is jwt:ISSUER#SUBJECT: with no # in an issuer,
			// the first # ends it, so no two principals share a name.
			v.add(p+".issuer", "%q has a query or a fragment, which an issuer URL never has (RFC 8414, OpenID Connect Discovery); it would also make principals' names jwt:ISSUER#SUBJECT ambiguous", is.Issuer)
		case seenIssuer[is.Issuer]:
			v.add(p+".issuer", "%q is listed twice", is.Issuer)
		}
		seenIssuer[is.Issuer] = true
		if is.JWKSURL != "" {
			if !secureURL(is.JWKSURL) {
				v.add(p+".jwks_url", "%q is not an https URL (http only on a loopback host)", is.JWKSURL)
			}
		}
		if len(is.Roles) == 0 && is.Role == "" {
			v.add(p+".roles", "required: which values of the %s claim make an agent, approver or admin (or role: for every token of the issuer)", is.RolesClaimOr())
		}
		for _, value := range slices.Sorted(maps.Keys(is.Roles)) {
			if role := is.Roles[value]; airlock.RoleRank(role) == 0 {
				v.add(fmt.Sprintf("%s.roles[%q]", p, value), "%q is not a role: want agent, approver or admin", role)
			}
		}
		if is.Role != "" && airlock.RoleRank(is.Role) == 0 {
			v.add(p+".role", "%q is not a role: want agent, approver or admin", is.Role)
		}
		if is.ClockSkew.Err() != nil {
			v.add(p+".clock_skew", "%v", is.ClockSkew.Err())
		} else if is.ClockSkew.Duration < 0 || is.ClockSkew.Duration > 10*time.Minute {
			v.add(p+".clock_skew", "must be from 0 to 10m, not %s", is.ClockSkew.Duration)
		}
	}
	for i, p := range a.TrustedProxies {
		if _, err := parseProxy(p); err != nil {
			v.add(fmt.Sprintf("auth.trusted_proxies[%d]", i), "%q is not an IP address or a CIDR prefix (such as 10.0.0.0/8)", p)
		}
	}
	seen := map[string]bool{}
	secrets := map[string]string{} // sha256 or env → the first token's name
	for i, tok := range a.Tokens {
		p := fmt.Sprintf("auth.tokens[%d]", i)
		switch {
		case tok.Name == "":
			v.add(p+".name", "required: a name for the token (it appears in the audit log)")
		case seen[tok.Name]:
			v.add(p+".name", "token name %q is used twice", tok.Name)
		case strings.Contains(tok.Name, ":"):
			// oidc: and jwt: name principals from elsewhere (docs/identity.md).
			v.add(p+".name", "token name %q may not contain ':' (names with a colon are those of people and programs from an identity provider, such as oidc:… and jwt:…)", tok.Name)
		case tok.Name == airlock.ActorSystem || tok.Name == airlock.ActorReconcile:
			// airlock's own actors: a token so named would pass for them
			// (a plan proposed over stdio, a rule's automatic decision).
			v.add(p+".name", "token name %q is airlock's own actor in the audit log; choose another", tok.Name)
		case tok.Name != strings.TrimSpace(tok.Name) || airlock.HasInvisible(tok.Name):
			v.add(p+".name", "token name %q holds spaces at its ends or invisible characters", tok.Name)
		}
		seen[tok.Name] = true
		for _, s := range []struct{ kind, value string }{{"sha256", strings.ToLower(tok.SHA256)}, {"env variable", tok.Env}} {
			if s.value == "" {
				continue
			}
			if first, dup := secrets[s.kind+" "+s.value]; dup {
				v.add(p, "tokens %s and %s have one secret (the same %s %s): one secret must name one principal", first, tok.Name, s.kind, s.value)
			} else {
				secrets[s.kind+" "+s.value] = tok.Name
			}
		}
		switch tok.Role {
		case airlock.RoleAgent, airlock.RoleApprover, airlock.RoleAdmin:
		default:
			v.add(p+".role", "%q is not a role: want agent, approver or admin", tok.Role)
		}
		switch {
		case tok.SHA256 != "" && tok.Env != "":
			v.add(p, "give either sha256 or env, not both")
		case tok.SHA256 == "" && tok.Env == "":
			v.add(p, "required: sha256 (hex SHA-256 of the token) or env (a variable holding the token)")
		case tok.SHA256 != "":
			if b, err := hex.DecodeString(tok.SHA256); err != nil || len(b) != 32 {
				v.add(p+".sha256", "want 64 hex digits (the SHA-256 of the token)")
			}
		}
	}
}

func (u Upstream) validate(v *validator, p string) {
	switch {
	case u.HTTP != "" && u.MCP != nil:
		v.add(p, "give either http or mcp, not both")
	case u.HTTP == "" && u.MCP == nil:
		v.add(p, "required: http (a base URL) or mcp ({command: [...]} or {url: ...})")
	case u.HTTP != "":
		if pu, err := url.Parse(u.HTTP); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			v.add(p+".http", "%q is not an http(s) URL", u.HTTP)
		}
	default:
		switch {
		case len(u.MCP.Command) > 0 && u.MCP.URL != "":
			v.add(p+".mcp", "give either command or url, not both")
		case len(u.MCP.Command) == 0 && u.MCP.URL == "":
			v.add(p+".mcp", "required: command (a list) or url")
		case u.MCP.URL != "":
			if pu, err := url.Parse(u.MCP.URL); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				v.add(p+".mcp.url", "%q is not an http(s) URL", u.MCP.URL)
			}
		}
		switch {
		case u.MCP.Prefix != "" && !u.MCP.Resources && !u.MCP.Prompts:
			v.add(p+".mcp.prefix", "a prefix names resources and prompts; set resources: true or prompts: true, or remove it")
		case u.MCP.Prefix != "" && !prefixRE.MatchString(u.MCP.Prefix):
			v.add(p+".mcp.prefix", "%q is not a prefix: want a letter, then letters, digits or - (at most 32)", u.MCP.Prefix)
		}
		switch u.MCP.Sessions {
		case "", SessionsShared, SessionsPerAgent:
		default:
			v.add(p+".mcp.sessions", "%q: want shared (the default) or per_agent", u.MCP.Sessions)
		}
	}
}

var prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,31}$`)

// checkUpstream checks that a tool's upstream is one the manifest names,
// with what that kind of upstream needs (an airlock.ToolCheck).
func (m *Manifest) checkUpstream(t *airlock.Tool, p string) []airlock.Problem {
	if t.Upstream == nil {
		return nil
	}
	v := &validator{}
	if len(t.Upstream.Workers) > 0 && (!t.Upstream.Caller || t.Kind != airlock.KindIrreversible) {
		v.add(p+".upstream.workers", "tool %s: workers name who carries out the approved plans of an irreversible tool run by its caller (caller: true); this tool has no such plans", t.Name)
	}
	for i, w := range t.Upstream.Workers {
		if strings.TrimSpace(w) == "" || w != strings.TrimSpace(w) || airlock.HasInvisible(w) {
			v.add(fmt.Sprintf("%s.upstream.workers[%d]", p, i), "%q is not a principal's name (a token's name, or jwt:ISSUER#NAME)", w)
		}
	}
	if t.Upstream.Caller {
		switch {
		case t.Upstream.Name != "" || t.Upstream.Path != "" || t.Upstream.Tool != "":
			v.add(p+".upstream", "tool %s: a tool run by its caller (caller: true) names no upstream, path or tool", t.Name)
		case t.Kind == airlock.KindRead:
			v.add(p+".upstream.caller", "tool %s: caller: true is for write and irreversible tools (the caller runs each piece of work once through the claims API); a read tool has nothing to guard", t.Name)
		}
		return v.problems
	}
	if t.Upstream.HonorsIdempotencyKey {
		v.add(p+".upstream.honors_idempotency_key", "tool %s: only a tool run by its caller says this on the tool; for an upstream, say it on the upstream (upstreams.%s.honors_idempotency_key)", t.Name, t.Upstream.Name)
	}
	u, ok := m.Upstreams[t.Upstream.Name]
	if !ok {
		names := make([]string, 0, len(m.Upstreams))
		for n := range m.Upstreams {
			names = append(names, n)
		}
		sort.Strings(names)
		v.add(p+".upstream.name", "tool %s: no upstream named %q (have: %s)", t.Name, t.Upstream.Name, strings.Join(names, ", "))
		return v.problems
	}
	switch {
	case u.HTTP != "" && !strings.HasPrefix(t.Upstream.Path, "/"):
		v.add(p+".upstream.path", "tool %s: required for an HTTP upstream: a path starting with /", t.Name)
	case u.MCP != nil && t.Upstream.Tool == "":
		v.add(p+".upstream.tool", "tool %s: required for an MCP upstream: the upstream's tool name", t.Name)
	}
	return v.problems
}

func durOr(d *airlock.Duration, def time.Duration) time.Duration {
	if d == nil || !d.IsSet() {
		return def
	}
	return d.Duration
}

// validator gathers the problems of a manifest, each with its path.
type validator struct{ problems []airlock.Problem }

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, airlock.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &airlock.ValidationError{Problems: slices.Clone(v.problems)}
}
