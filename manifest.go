package airlock

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// ToolKind says what a tool does to the world.
type ToolKind string

// Tool kinds.
const (
	KindRead         ToolKind = "read"         // no side effect
	KindWrite        ToolKind = "write"        // a side effect that can be undone or is harmless to repeat under a key
	KindIrreversible ToolKind = "irreversible" // money, mail, deletion, external systems: plan → approve → commit
)

// SideEffecting reports whether calls of this kind go through the guard.
func (k ToolKind) SideEffecting() bool { return k == KindWrite || k == KindIrreversible }

// Defaults for tool settings left out of the manifest.
const (
	DefaultGrace      = 10 * time.Minute
	DefaultTimeout    = 30 * time.Second
	DefaultRepeatWait = 15 * time.Second
)

// Manifest is the tool manifest, airlock.yaml (docs/configuration.md, "The manifest").
type Manifest struct {
	Version   int                 `yaml:"version" json:"version"`
	Calendar  Calendar            `yaml:"calendar" json:"calendar"`
	Auth      Auth                `yaml:"auth" json:"auth"`
	Upstreams map[string]Upstream `yaml:"upstreams" json:"upstreams,omitempty"`
	Tools     []*Tool             `yaml:"tools" json:"tools"`
	// Notify says where to announce plans that wait for a person.
	Notify Notify `yaml:"notify" json:"notify,omitempty"`
	// Retention says how long records, audit events and figures are kept.
	Retention Retention `yaml:"retention" json:"retention,omitzero"`
	// Limits bound what one request may carry.
	Limits Limits `yaml:"limits" json:"limits,omitzero"`

	// Source is the file the manifest came from, for messages; set by the loader.
	Source string `yaml:"-" json:"-"`
	// Files reads files the manifest names (rule tests), relative to the
	// manifest's directory; set by the loader, nil for a manifest built in code.
	Files fs.FS `yaml:"-" json:"-"`

	byName map[string]*Tool
}

// Calendar defines business days for business_day windows.
type Calendar struct {
	Timezone Timezone `yaml:"timezone" json:"timezone"`
	// Cutoff: a call at or after it belongs to the next business day.
	// Default: none (the day ends at midnight).
	Cutoff   *ClockTime `yaml:"cutoff" json:"cutoff,omitempty"`
	Holidays []Date     `yaml:"holidays" json:"holidays,omitempty"`
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
	Records *Duration `yaml:"records" json:"records,omitempty"`
	// Audit: how long sealed audit events are kept; older ones are purged
	// and the chain stays verifiable from an anchor. Archive them first
	// with `airlock audit export --until`. Default: kept forever. At least 1d.
	Audit *Duration `yaml:"audit" json:"audit,omitempty"`
	// Figures: how long the per-minute rollup behind the report and the
	// page's figures is kept. Default 400d. At least 1d.
	Figures *Duration `yaml:"figures" json:"figures,omitempty"`
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
		d    *Duration
		min  time.Duration
	}{
		{"retention.records", r.Records, time.Minute},
		{"retention.audit", r.Audit, 24 * time.Hour},
		{"retention.figures", r.Figures, 24 * time.Hour},
	} {
		switch {
		case f.d == nil:
		case f.d.err != nil:
			v.add(f.path, "%v", f.d.err)
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
	RequestBytes *ByteSize `yaml:"request_bytes" json:"request_bytes,omitempty"`
	// RunIDBytes caps a call's run id (MCP _meta, X-Airlock-Run, run_id).
	// Default 256 bytes; from 16 bytes to 4 KiB.
	RunIDBytes *ByteSize `yaml:"run_id_bytes" json:"run_id_bytes,omitempty"`
	// CacheBytes bounds the in-process cache of completed records by the
	// bytes they hold (it also holds at most 10,000). Default 64 MiB; from
	// 1 MiB to 16 GiB.
	CacheBytes *ByteSize `yaml:"cache_bytes" json:"cache_bytes,omitempty"`
	// MCPSessionIdle closes an MCP session (over HTTP) that has had no
	// request for this long. Default 30m; from 1s to 7d.
	MCPSessionIdle Duration `yaml:"mcp_session_idle" json:"mcp_session_idle,omitzero"`
	// MCPSessionsPerToken caps the MCP sessions one token holds open; an
	// initialize beyond it gets 429. Default 100; from 1 to 100,000.
	MCPSessionsPerToken int `yaml:"mcp_sessions_per_token" json:"mcp_sessions_per_token,omitempty"`
	// Connections caps the HTTP connections served at once; more wait to
	// be accepted. Default 1024; from 16 to 1,000,000.
	Connections int `yaml:"connections" json:"connections,omitempty"`
	// BodyTimeout is how long a request's body may take to arrive. Default
	// 30s; from 1s to 10m.
	BodyTimeout Duration `yaml:"body_timeout" json:"body_timeout,omitzero"`
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
	if l.RunIDBytes == nil || l.RunIDBytes.err != nil {
		return DefaultMaxRunIDBytes
	}
	return int(l.RunIDBytes.Bytes)
}

// DefaultCacheBytes bounds the record cache by bytes (Config.CacheBytes).
const DefaultCacheBytes = 64 << 20

// CacheBytesOr returns the cache's byte bound, DefaultCacheBytes when unset.
func (l *Limits) CacheBytesOr() int64 {
	if l.CacheBytes == nil || l.CacheBytes.err != nil {
		return DefaultCacheBytes
	}
	return l.CacheBytes.Bytes
}

// RequestBytesOr returns the request limit, DefaultRequestBytes when unset.
func (l *Limits) RequestBytesOr() int64 {
	if l.RequestBytes == nil || l.RequestBytes.err != nil {
		return DefaultRequestBytes
	}
	return l.RequestBytes.Bytes
}

func (l *Limits) validate(v *validator) {
	switch b := l.RequestBytes; {
	case b == nil:
	case b.err != nil:
		v.add("limits.request_bytes", "%v", b.err)
	case b.Bytes < minRequestBytes || b.Bytes > maxRequestBytes:
		v.add("limits.request_bytes", "must be from 1KiB to 64MiB, not %d bytes", b.Bytes)
	}
	switch b := l.RunIDBytes; {
	case b == nil:
	case b.err != nil:
		v.add("limits.run_id_bytes", "%v", b.err)
	case b.Bytes < 16 || b.Bytes > 4<<10:
		v.add("limits.run_id_bytes", "must be from 16 bytes to 4KiB, not %d bytes", b.Bytes)
	}
	switch d := l.MCPSessionIdle; {
	case d.problem() != nil:
		v.add("limits.mcp_session_idle", "%v", d.problem())
	case d.raw != "" && (d.Duration < time.Second || d.Duration > 7*24*time.Hour):
		v.add("limits.mcp_session_idle", "must be from 1s to 7d, not %s", d.raw)
	}
	switch d := l.BodyTimeout; {
	case d.problem() != nil:
		v.add("limits.body_timeout", "%v", d.problem())
	case d.raw != "" && (d.Duration < time.Second || d.Duration > 10*time.Minute):
		v.add("limits.body_timeout", "must be from 1s to 10m, not %s", d.raw)
	}
	if n := l.Connections; n != 0 && (n < 16 || n > 1_000_000) {
		v.add("limits.connections", "must be from 16 to 1000000, not %d", n)
	}
	if n := l.MCPSessionsPerToken; n < 0 || n > 100_000 {
		v.add("limits.mcp_sessions_per_token", "must be from 1 to 100000, not %d", n)
	}
	switch b := l.CacheBytes; {
	case b == nil:
	case b.err != nil:
		v.add("limits.cache_bytes", "%v", b.err)
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
	ClockSkew Duration `yaml:"clock_skew" json:"clock_skew,omitempty"`
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
}

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
	if o.Issuer == "" {
		v.add(p+".issuer", "required: the provider's issuer URL")
	} else if !secureURL(o.Issuer) {
		v.add(p+".issuer", "%q is not an https URL (http only on a loopback host)", o.Issuer)
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
	if len(o.Roles) == 0 {
		v.add(p+".roles", "required: which values of the %s claim make an approver or an admin", o.RolesClaimOr())
	}
	for _, value := range slices.Sorted(maps.Keys(o.Roles)) {
		if role := o.Roles[value]; role != RoleApprover && role != RoleAdmin {
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

// Roles.
const (
	RoleAgent    = "agent"
	RoleApprover = "approver"
	RoleAdmin    = "admin"
	// RoleSystem is airlock acting by itself (reconciliation); no token
	// can hold it.
	RoleSystem = "system"
)

// RoleRank orders the roles for "the highest wins": agent < approver <
// admin; any other string is 0.
func RoleRank(role string) int {
	switch role {
	case RoleAgent:
		return 1
	case RoleApprover:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
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

// Tool is one operation an agent may call.
type Tool struct {
	Name        string         `yaml:"name" json:"name"`
	Kind        ToolKind       `yaml:"kind" json:"kind"`
	Description string         `yaml:"description" json:"description,omitempty"`
	InputSchema map[string]any `yaml:"input_schema" json:"input_schema,omitempty"`
	NaturalKey  []KeyField     `yaml:"natural_key" json:"natural_key,omitempty"`
	Window      *Window        `yaml:"window" json:"window,omitempty"`
	// Grace: a repeat from the same run this long after a window boundary
	// matches the previous window's record. Default 10m.
	Grace *Duration `yaml:"grace" json:"grace,omitempty"`
	// Timeout: the upstream call limit. Default 30s.
	Timeout *Duration `yaml:"timeout" json:"timeout,omitempty"`
	// RespondWithin: answer in_progress after this long while the call goes
	// on. Default: wait for the outcome (bounded by Timeout).
	RespondWithin *Duration `yaml:"respond_within" json:"respond_within,omitempty"`
	// RepeatWait: how long a repeat waits for a running first call. Default 15s.
	RepeatWait *Duration `yaml:"repeat_wait" json:"repeat_wait,omitempty"`
	// OnMismatch: what a repeat with other arguments gets. Default replay.
	OnMismatch     MismatchPolicy `yaml:"on_mismatch" json:"on_mismatch,omitempty"`
	MaxCallsPerRun int            `yaml:"max_calls_per_run" json:"max_calls_per_run,omitempty"` // 0: no limit
	ReconcileWith  string         `yaml:"reconcile_with" json:"reconcile_with,omitempty"`
	// Reconcile says how reconcile_with's answer tells whether in-doubt work
	// happened, so that the reaper settles such records by itself. Default:
	// none (a person reads the answer and settles).
	Reconcile *Reconcile    `yaml:"reconcile" json:"reconcile,omitempty"`
	Upstream  *ToolUpstream `yaml:"upstream" json:"upstream,omitempty"`
	Answers   Answers       `yaml:"answers" json:"answers"`
	Approval  *Approval     `yaml:"approval" json:"approval,omitempty"`

	// HonorsKey is set by Prepare from the upstream's honors_idempotency_key:
	// an outcome-unknown call may be re-driven with the same key.
	HonorsKey bool `yaml:"-" json:"-"`
}

// Reconcile holds CEL conditions over the reconcile_with tool's answer
// (result), the in-doubt call's arguments (args) and the tool's name (tool).
// When HappenedWhen holds, the record is settled as happened, with the
// answer as its result; when NotHappenedWhen holds, it is settled as not
// happened and its key is freed. When neither holds (or the read tool
// fails), the record stays in doubt and is asked about again later.
type Reconcile struct {
	HappenedWhen    string `yaml:"happened_when" json:"happened_when"`
	NotHappenedWhen string `yaml:"not_happened_when" json:"not_happened_when,omitempty"`
}

// MismatchPolicy is what a repeat with the same key and other arguments gets.
type MismatchPolicy string

// Mismatch policies.
const (
	MismatchReplay MismatchPolicy = "replay" // the first result, repeat: true, and a conflict naming the fields
	MismatchReject MismatchPolicy = "reject" // a clear refusal
)

// KeyField is one natural-key field: a path into the arguments and the
// normalizers applied, in order, before it goes into the key.
type KeyField struct {
	Field     string   `yaml:"field" json:"field"`
	Normalize []string `yaml:"normalize" json:"normalize,omitempty"`
}

// ToolUpstream names the upstream that executes a tool: a path for HTTP
// upstreams, a tool name for MCP upstreams.
type ToolUpstream struct {
	Name string `yaml:"name" json:"name"`
	Path string `yaml:"path" json:"path,omitempty"`
	Tool string `yaml:"tool" json:"tool,omitempty"`
}

// Answers are the three questions every side-effecting tool must answer.
type Answers struct {
	Undo     string `yaml:"undo" json:"undo,omitempty"`
	Approver string `yaml:"approver" json:"approver,omitempty"`
	OnRepeat string `yaml:"on_repeat" json:"on_repeat,omitempty"`
}

// Approval is the plan → approve → commit configuration of an irreversible tool.
type Approval struct {
	Lookup        *Lookup   `yaml:"lookup" json:"lookup,omitempty"`
	Rules         []Rule    `yaml:"rules" json:"rules"`
	ExpiresAfter  *Duration `yaml:"expires_after" json:"expires_after,omitempty"`
	WaitForCommit *Duration `yaml:"wait_for_commit" json:"wait_for_commit,omitempty"`
	Tests         string    `yaml:"tests" json:"tests,omitempty"`
}

// ExpiresAfterOr is how long a plan waits for a person before it expires:
// expires_after, default 24h.
func (a *Approval) ExpiresAfterOr() time.Duration {
	if a != nil && a.ExpiresAfter != nil && a.ExpiresAfter.IsSet() {
		return a.ExpiresAfter.Duration
	}
	return 24 * time.Hour
}

// Lookup names the read tool whose result becomes the facts, and how its
// arguments are taken from the plan's arguments (CEL expressions).
type Lookup struct {
	Tool string            `yaml:"tool" json:"tool"`
	Args map[string]string `yaml:"args" json:"args,omitempty"`
}

// Rule is a named approval rule; the first whose When holds decides.
type Rule struct {
	Name   string `yaml:"name" json:"name"`
	When   string `yaml:"when" json:"when"`
	Decide string `yaml:"decide" json:"decide"`
}

// Tool returns the tool with that name, or nil. It needs Prepare.
func (m *Manifest) Tool(name string) *Tool {
	if m.byName == nil {
		return nil
	}
	return m.byName[name]
}

// ToolNames returns the tools' names in manifest order.
func (m *Manifest) ToolNames() []string {
	names := make([]string, len(m.Tools))
	for i, t := range m.Tools {
		names[i] = t.Name
	}
	return names
}

// Prepare applies defaults, indexes the tools and validates. Call it once
// after building or loading a manifest.
func (m *Manifest) Prepare() error {
	m.applyDefaults()
	return m.Validate()
}

func (m *Manifest) applyDefaults() {
	m.byName = make(map[string]*Tool, len(m.Tools))
	for _, t := range m.Tools {
		if t == nil {
			continue
		}
		if _, dup := m.byName[t.Name]; !dup {
			m.byName[t.Name] = t
		}
		if t.OnMismatch == "" {
			t.OnMismatch = MismatchReplay
		}
		if t.Upstream != nil {
			if u, ok := m.Upstreams[t.Upstream.Name]; ok {
				t.HonorsKey = u.HonorsIdempotencyKey
			}
		}
	}
}

// GraceOr returns the tool's grace, DefaultGrace when unset.
func (t *Tool) GraceOr() time.Duration { return durOr(t.Grace, DefaultGrace) }

// TimeoutOr returns the tool's timeout, DefaultTimeout when unset.
func (t *Tool) TimeoutOr() time.Duration { return durOr(t.Timeout, DefaultTimeout) }

// RepeatWaitOr returns the tool's repeat_wait, DefaultRepeatWait when unset.
func (t *Tool) RepeatWaitOr() time.Duration { return durOr(t.RepeatWait, DefaultRepeatWait) }

// RespondWithinOr returns respond_within, 0 (wait for the outcome) when unset.
func (t *Tool) RespondWithinOr() time.Duration { return durOr(t.RespondWithin, 0) }

func durOr(d *Duration, def time.Duration) time.Duration {
	if d == nil || !d.IsSet() {
		return def
	}
	return d.Duration
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// ValidToolName reports whether name may name a tool: a letter, then
// letters, digits, _ . or - (at most 64).
func ValidToolName(name string) bool { return toolNameRE.MatchString(name) }

// Validate reports every problem with the manifest, each with its path.
func (m *Manifest) Validate() error {
	v := &validator{}
	if m.Version != 1 {
		v.add("version", "must be 1 (got %d)", m.Version)
	}
	m.Calendar.validate(v)
	m.Auth.validate(v)
	m.Retention.validate(v)
	m.Limits.validate(v)
	if m.Notify.Webhook != "" {
		if pu, err := url.Parse(m.Notify.Webhook); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			v.add("notify.webhook", "%q is not an http(s) URL", m.Notify.Webhook)
		}
	}
	upNames := make([]string, 0, len(m.Upstreams))
	for n := range m.Upstreams {
		upNames = append(upNames, n)
	}
	sort.Strings(upNames)
	for _, n := range upNames {
		m.Upstreams[n].validate(v, "upstreams."+n)
	}
	if len(m.Tools) == 0 {
		v.add("tools", "at least one tool is required")
	}
	seen := map[string]int{}
	usesBusinessDay := false
	for i, t := range m.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t == nil {
			v.add(p, "empty tool entry")
			continue
		}
		if j, dup := seen[t.Name]; dup && t.Name != "" {
			v.add(p+".name", "tool %q is declared twice (first at tools[%d])", t.Name, j)
		}
		seen[t.Name] = i
		t.validate(v, p, m)
		if t.Window != nil && t.Window.Kind == WindowBusinessDay {
			usesBusinessDay = true
		}
	}
	if usesBusinessDay && m.Calendar.Timezone.Name == "" {
		v.add("calendar.timezone", "required: a tool uses the business_day window (for example America/New_York)")
	}
	return v.err()
}

func (c *Calendar) validate(v *validator) {
	if c.Timezone.Name != "" && c.Timezone.err != nil {
		v.add("calendar.timezone", "%v", c.Timezone.err)
	}
	if c.Cutoff != nil && c.Cutoff.err != nil {
		v.add("calendar.cutoff", "%v", c.Cutoff.err)
	}
	for i, d := range c.Holidays {
		if d.err != nil {
			v.add(fmt.Sprintf("calendar.holidays[%d]", i), "%v", d.err)
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
			if role := is.Roles[value]; RoleRank(role) == 0 {
				v.add(fmt.Sprintf("%s.roles[%q]", p, value), "%q is not a role: want agent, approver or admin", role)
			}
		}
		if is.Role != "" && RoleRank(is.Role) == 0 {
			v.add(p+".role", "%q is not a role: want agent, approver or admin", is.Role)
		}
		if is.ClockSkew.err != nil {
			v.add(p+".clock_skew", "%v", is.ClockSkew.err)
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
	for i, tok := range a.Tokens {
		p := fmt.Sprintf("auth.tokens[%d]", i)
		if tok.Name == "" {
			v.add(p+".name", "required: a name for the token (it appears in the audit log)")
		} else if seen[tok.Name] {
			v.add(p+".name", "token name %q is used twice", tok.Name)
		}
		seen[tok.Name] = true
		switch tok.Role {
		case RoleAgent, RoleApprover, RoleAdmin:
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

func (t *Tool) validate(v *validator, p string, m *Manifest) {
	if !toolNameRE.MatchString(t.Name) {
		v.add(p+".name", "%q is not a tool name: want a letter, then letters, digits, _ . or - (at most 64)", t.Name)
	}
	name := t.Name
	switch t.Kind {
	case KindRead, KindWrite, KindIrreversible:
	case "":
		v.add(p+".kind", "tool %s: required: read, write or irreversible", name)
	default:
		v.add(p+".kind", "tool %s: %q is not a kind: want read, write or irreversible", name, t.Kind)
	}
	if t.InputSchema != nil {
		if typ, _ := t.InputSchema["type"].(string); typ != "object" {
			v.add(p+".input_schema.type", "tool %s: the input schema must be {type: object, ...}", name)
		}
	}
	for _, d := range []struct {
		field string
		d     *Duration
	}{{"grace", t.Grace}, {"timeout", t.Timeout}, {"respond_within", t.RespondWithin}, {"repeat_wait", t.RepeatWait}} {
		if d.d != nil && d.d.problem() != nil {
			v.add(p+"."+d.field, "tool %s: %v", name, d.d.problem())
		}
	}
	if t.Window != nil && t.Window.err != nil {
		v.add(p+".window", "tool %s: %v", name, t.Window.err)
	}
	switch t.OnMismatch {
	case MismatchReplay, MismatchReject, "":
	default:
		v.add(p+".on_mismatch", "tool %s: %q is not allowed: want replay or reject", name, t.OnMismatch)
	}
	if t.MaxCallsPerRun < 0 {
		v.add(p+".max_calls_per_run", "tool %s: must be 0 (no limit) or more", name)
	}
	if t.Upstream != nil {
		t.validateUpstream(v, p, m)
	}
	if !t.Kind.SideEffecting() {
		if len(t.NaturalKey) > 0 {
			v.add(p+".natural_key", "tool %s: a read tool has no key; make it write or irreversible to guard it", name)
		}
		if t.Approval != nil {
			v.add(p+".approval", "tool %s: only irreversible tools have an approval", name)
		}
		return
	}
	// The three questions (docs/concepts.md, "The three questions").
	for _, q := range []struct{ field, question, answer string }{
		{"undo", "can it be undone", t.Answers.Undo},
		{"approver", "who approves it", t.Answers.Approver},
		{"on_repeat", "what happens if it repeats", t.Answers.OnRepeat},
	} {
		if strings.TrimSpace(q.answer) == "" {
			v.add(p+".answers."+q.field, "tool %s: missing answer to %q (answers.%s); without the three answers a tool can only be read", name, q.question, q.field)
		}
	}
	if len(t.NaturalKey) == 0 {
		v.add(p+".natural_key", "tool %s: required for %s tools: the argument fields that make one piece of work unique", name, t.Kind)
	}
	seenField := map[string]bool{}
	for i, kf := range t.NaturalKey {
		fp := fmt.Sprintf("%s.natural_key[%d]", p, i)
		if kf.Field == "" {
			v.add(fp+".field", "tool %s: required: a path into the arguments such as record_id or payee.account", name)
			continue
		}
		if seenField[kf.Field] {
			v.add(fp+".field", "tool %s: field %q is listed twice", name, kf.Field)
		}
		seenField[kf.Field] = true
		if !schemaHasPath(t.InputSchema, kf.Field) {
			v.add(fp+".field", "tool %s: natural-key field %q is not in the input schema's properties", name, kf.Field)
		}
		for j, n := range kf.Normalize {
			if _, ok := normalizers[n]; !ok {
				v.add(fmt.Sprintf("%s.normalize[%d]", fp, j), "tool %s: %q is not a normalizer: want one of %s", name, n, strings.Join(NormalizerNames(), ", "))
			}
		}
	}
	if t.Window == nil {
		v.add(p+".window", "tool %s: required for %s tools: business_day, run, forever or a duration such as 24h", name, t.Kind)
	}
	if t.Reconcile != nil {
		switch {
		case t.ReconcileWith == "":
			v.add(p+".reconcile", "tool %s: reconcile needs reconcile_with: the read tool whose answer it reads", name)
		case strings.TrimSpace(t.Reconcile.HappenedWhen) == "":
			v.add(p+".reconcile.happened_when", "tool %s: required: a CEL condition over result that holds when the work happened", name)
		}
	}
	if t.ReconcileWith != "" {
		if r := m.Tool(t.ReconcileWith); r == nil {
			v.add(p+".reconcile_with", "tool %s: no tool named %q", name, t.ReconcileWith)
		} else if r.Kind != KindRead {
			v.add(p+".reconcile_with", "tool %s: %q must be a read tool", name, t.ReconcileWith)
		}
	}
	switch {
	case t.Kind == KindIrreversible && t.Approval == nil:
		v.add(p+".approval", "tool %s: required for irreversible tools: the rules that decide auto or human approval", name)
	case t.Kind == KindWrite && t.Approval != nil:
		v.add(p+".approval", "tool %s: only irreversible tools have an approval", name)
	case t.Approval != nil:
		t.Approval.validate(v, p+".approval", name, m)
	}
}

func (t *Tool) validateUpstream(v *validator, p string, m *Manifest) {
	u, ok := m.Upstreams[t.Upstream.Name]
	if !ok {
		names := make([]string, 0, len(m.Upstreams))
		for n := range m.Upstreams {
			names = append(names, n)
		}
		sort.Strings(names)
		v.add(p+".upstream.name", "tool %s: no upstream named %q (have: %s)", t.Name, t.Upstream.Name, strings.Join(names, ", "))
		return
	}
	switch {
	case u.HTTP != "" && !strings.HasPrefix(t.Upstream.Path, "/"):
		v.add(p+".upstream.path", "tool %s: required for an HTTP upstream: a path starting with /", t.Name)
	case u.MCP != nil && t.Upstream.Tool == "":
		v.add(p+".upstream.tool", "tool %s: required for an MCP upstream: the upstream's tool name", t.Name)
	}
}

func (a *Approval) validate(v *validator, p, name string, m *Manifest) {
	if a.Lookup != nil {
		if r := m.Tool(a.Lookup.Tool); r == nil {
			v.add(p+".lookup.tool", "tool %s: no tool named %q", name, a.Lookup.Tool)
		} else if r.Kind != KindRead {
			v.add(p+".lookup.tool", "tool %s: %q must be a read tool (facts come from the system of record)", name, a.Lookup.Tool)
		}
	}
	if len(a.Rules) == 0 {
		v.add(p+".rules", "tool %s: at least one rule is required", name)
	}
	seen := map[string]bool{}
	for i, r := range a.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", p, i)
		if r.Name == "" {
			v.add(rp+".name", "tool %s: every rule needs a name", name)
		} else if seen[r.Name] {
			v.add(rp+".name", "tool %s: rule %q is declared twice", name, r.Name)
		}
		seen[r.Name] = true
		if strings.TrimSpace(r.When) == "" {
			v.add(rp+".when", "tool %s: rule %q: required: a CEL condition", name, r.Name)
		}
		if r.Decide != "auto" && r.Decide != "human" {
			v.add(rp+".decide", "tool %s: rule %q: %q is not a decision: want auto or human", name, r.Name, r.Decide)
		}
	}
	for _, d := range []struct {
		field string
		d     *Duration
	}{{"expires_after", a.ExpiresAfter}, {"wait_for_commit", a.WaitForCommit}} {
		if d.d != nil && d.d.problem() != nil {
			v.add(p+"."+d.field, "tool %s: %v", name, d.d.problem())
		}
	}
}

// schemaHasPath reports whether a dotted path names a property of a JSON
// schema (through nested objects' properties and arrays' items).
func schemaHasPath(schema map[string]any, path string) bool {
	cur := schema
	for _, seg := range strings.Split(path, ".") {
		if cur == nil {
			return false
		}
		if items, ok := cur["items"].(map[string]any); ok && isIndex(seg) {
			cur = items
			continue
		}
		props, _ := cur["properties"].(map[string]any)
		next, ok := props[seg].(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	return true
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

type validator struct{ problems []Problem }

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: slices.Clone(v.problems)}
}

// ToolInfo is a tool as the registry shows it: what it is, its key, its
// window and its three answers (the page "Things you cannot undo").
type ToolInfo struct {
	Name        string   `json:"name"`
	Kind        ToolKind `json:"kind"`
	Description string   `json:"description,omitempty"`
	NaturalKey  []string `json:"natural_key,omitempty"`
	Window      string   `json:"window,omitempty"`
	Undo        string   `json:"undo,omitempty"`
	Approver    string   `json:"approver,omitempty"`
	OnRepeat    string   `json:"on_repeat,omitempty"`
	OnMismatch  string   `json:"on_mismatch,omitempty"`
	Rules       []Rule   `json:"rules,omitempty"`
}

// Info describes the tool for the registry.
func (t *Tool) Info() ToolInfo {
	ti := ToolInfo{Name: t.Name, Kind: t.Kind, Description: t.Description}
	if !t.Kind.SideEffecting() {
		return ti
	}
	for _, kf := range t.NaturalKey {
		f := kf.Field
		if len(kf.Normalize) > 0 {
			f += " (" + strings.Join(kf.Normalize, ", ") + ")"
		}
		ti.NaturalKey = append(ti.NaturalKey, f)
	}
	if t.Window != nil {
		ti.Window = t.Window.String()
	}
	ti.Undo, ti.Approver, ti.OnRepeat = t.Answers.Undo, t.Answers.Approver, t.Answers.OnRepeat
	ti.OnMismatch = string(t.OnMismatch)
	if t.Approval != nil {
		ti.Rules = t.Approval.Rules
	}
	return ti
}
