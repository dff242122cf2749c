// Package oidc signs people in to airlock's page through an OpenID
// Connect provider: the authorization code flow with PKCE, the ID token
// verified (signature by the provider's published keys, issuer, audience,
// expiry, nonce), and the person's claims mapped to a name and a role. It
// wraps github.com/coreos/go-oidc and golang.org/x/oauth2; the page (ui)
// keeps the flow's state in a cookie and makes the session.
package oidc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
)

// Config configures a Login.
type Config struct {
	Spec manifest.OIDCSpec // required: the manifest's auth.oidc
	// ClientSecret is the client's secret (read from Spec.ClientSecretEnv
	// by the caller). Required.
	ClientSecret string
	// HTTPClient talks to the provider. Default: a client with a 10s
	// timeout.
	HTTPClient *http.Client
}

// Flow is what a sign-in carries from its start to its callback, kept by
// the browser (in a MAC-bound cookie) between the two.
type Flow struct {
	State    string // the state parameter: binds the callback to this browser
	Nonce    string // binds the ID token to this sign-in
	Verifier string // the PKCE code verifier
}

// Identity is who the provider says signed in.
type Identity struct {
	Subject string // issuer and subject: unique for the person
	Name    string // what the audit log records (NameClaim)
	Role    string // airlock.RoleApprover or airlock.RoleAdmin
	// Groups are the values of the roles claim, for approval.approvers'
	// group:NAME entries.
	Groups []string
}

// ErrRefused is a person the provider knows but airlock does not let in
// (no role, an unverified email); the message says why.
var ErrRefused = errors.New("oidc: refused")

// Login runs sign-ins against one provider. The provider is discovered on
// first use (and again after a failure), so airlock starts while the
// provider is down.
type Login struct {
	cfg    Config
	client *http.Client

	mu       sync.Mutex
	provider *gooidc.Provider
}

// New returns a Login; nothing is fetched yet.
func New(cfg Config) *Login {
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Login{cfg: cfg, client: client}
}

func (l *Login) ctx(ctx context.Context) context.Context { return gooidc.ClientContext(ctx, l.client) }

// discover returns the provider, fetching its discovery document the first
// time.
func (l *Login) discover(ctx context.Context) (*gooidc.Provider, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.provider != nil {
		return l.provider, nil
	}
	p, err := gooidc.NewProvider(l.ctx(ctx), l.cfg.Spec.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc: discovering %s: %w", l.cfg.Spec.Issuer, err)
	}
	l.provider = p
	return p, nil
}

func (l *Login) oauth(p *gooidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID: l.cfg.Spec.ClientID, ClientSecret: l.cfg.ClientSecret, RedirectURL: l.cfg.Spec.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: l.cfg.Spec.ScopesOr(),
	}
}

// Start begins a sign-in: the provider's URL to send the browser to, and
// the flow to keep until the callback.
func (l *Login) Start(ctx context.Context) (string, Flow, error) {
	p, err := l.discover(ctx)
	if err != nil {
		return "", Flow{}, err
	}
	f := Flow{State: oauth2.GenerateVerifier(), Nonce: oauth2.GenerateVerifier(), Verifier: oauth2.GenerateVerifier()}
	return l.oauth(p).AuthCodeURL(f.State, gooidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), f, nil
}

// Finish completes a sign-in with the code the provider sent back: the
// code is exchanged (with the PKCE verifier), the ID token verified, and
// its claims mapped to an identity. A person without a role is ErrRefused.
func (l *Login) Finish(ctx context.Context, f Flow, code string) (Identity, error) {
	p, err := l.discover(ctx)
	if err != nil {
		return Identity{}, err
	}
	tok, err := l.oauth(p).Exchange(l.ctx(ctx), code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, fmt.Errorf("oidc: exchanging the code: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return Identity{}, errors.New("oidc: the provider's answer has no id_token (is the openid scope asked for?)")
	}
	idt, err := p.Verifier(&gooidc.Config{ClientID: l.cfg.Spec.ClientID}).Verify(l.ctx(ctx), raw)
	if err != nil {
		return Identity{}, fmt.Errorf("oidc: verifying the ID token: %w", err)
	}
	if idt.Nonce != f.Nonce {
		return Identity{}, errors.New("oidc: the ID token's nonce is not this sign-in's")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Identity{}, fmt.Errorf("oidc: reading the ID token's claims: %w", err)
	}
	// Some providers put groups (or the name) in the userinfo answer only:
	// what the ID token lacks is taken from there, for the same subject.
	if claims[l.cfg.Spec.RolesClaimOr()] == nil || claims[l.cfg.Spec.NameClaimOr()] == nil {
		if info, err := p.UserInfo(l.ctx(ctx), oauth2.StaticTokenSource(tok)); err == nil && info.Subject == idt.Subject {
			var more map[string]any
			if info.Claims(&more) == nil {
				for k, v := range more {
					if _, ok := claims[k]; !ok {
						claims[k] = v
					}
				}
			}
		}
	}
	return MapClaims(&l.cfg.Spec, idt.Issuer, idt.Subject, claims)
}

// MapClaims maps a person's claims to an identity: the name from
// NameClaim (falling back to preferred_username, then the subject), the
// highest role any value of RolesClaim maps to. It refuses an email that
// the provider says is not verified when the email names the person, and a
// person with no role.
func MapClaims(spec *manifest.OIDCSpec, issuer, subject string, claims map[string]any) (Identity, error) {
	id := Identity{Subject: issuer + "#" + subject}
	nameClaim := spec.NameClaimOr()
	name, _ := claims[nameClaim].(string)
	if nameClaim == "email" && name != "" {
		if verified, ok := claims["email_verified"].(bool); ok && !verified {
			return Identity{}, fmt.Errorf("%w: the provider has not verified the email %s", ErrRefused, name)
		}
	}
	fallback := name == ""
	if name == "" {
		name, _ = claims["preferred_username"].(string)
	}
	if name == "" {
		name = subject
	}
	if fallback && nameClaim == "email" && strings.Contains(name, "@") {
		// oidc:ana@acme.example is the person whose email the provider
		// verified as that; a username or subject that reads as an email
		// would be another principal with the same name.
		return Identity{}, fmt.Errorf("%w: the provider gave no email, and %q, which reads as one, is not a verified email: names with @ are taken from the email claim only", ErrRefused, name)
	}
	if err := airlock.CheckText(nameClaim, name); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	id.Name = airlock.OIDCPrincipal(name)
	var values []string
	switch v := claims[spec.RolesClaimOr()].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				values = append(values, s)
			}
		}
	}
	id.Role, id.Groups = RoleOf(spec, values), values
	if id.Role == "" {
		return Identity{}, fmt.Errorf("%w: %s is in no group that may use airlock (the %s claim has %q; the manifest's auth.oidc.roles lists which do)",
			ErrRefused, name, spec.RolesClaimOr(), values)
	}
	return id, nil
}

// RoleOf is the highest role spec's roles give any of values (the values
// of its roles claim), "" when none makes an approver or an admin. The
// page asks it again of a session's groups on every request, so that a
// changed mapping holds at once (docs/hardening.md, "page sessions").
func RoleOf(spec *manifest.OIDCSpec, values []string) string {
	role := ""
	for _, v := range values {
		// The page has no agents: only approver and admin count.
		if r := spec.Roles[v]; (r == airlock.RoleApprover || r == airlock.RoleAdmin) && airlock.RoleRank(r) > airlock.RoleRank(role) {
			role = r
		}
	}
	return role
}
