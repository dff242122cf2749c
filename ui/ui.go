// Package ui is the approvers' and operators' web page, served under /ui/:
// server-rendered with html/template, assets embedded, no JavaScript. A
// person signs in through the identity provider (SSO, OpenID Connect) or
// with an approver or admin token, to a session kept in the store — every
// replica knows it — and a cookie (HttpOnly, SameSite=Strict, Secure under
// TLS); every form carries the session's CSRF token; decisions are bound to
// the plan's decision hash.
package ui

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/oidc"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/maintenance"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/policy"
	"github.com/airlockhq/airlock/reconcile"
)

//go:embed templates/*.html static/*
var files embed.FS

// Principal is who signed in.
type Principal struct {
	Name, Role string
	Groups     []string
	// Credential names the token that signed in without being it
	// (gateway.Token.Credential); Config.Current maps it back.
	Credential string
}

// Config configures the UI.
type Config struct {
	Manifest *manifest.Manifest // required
	Store    Store              // required (the lists and the figures)
	Guard    *guard.Guard       // required (settling)
	Plans    *plan.Service      // required (deciding)
	// Authenticate maps a bearer token to its principal, its Credential
	// set.
	Authenticate func(token string) (Principal, bool)
	// Current maps a session's credential to the principal it names as the
	// configuration now stands; false when no token has it (rotated or
	// removed). Every request of a token's session asks it, and the
	// session ends when it no longer names the session's person with a
	// role that may use the page. Required with Authenticate.
	Current func(credential string) (Principal, bool)
	// Reconcile tells the last answer of a tool's reconcile_with read tool
	// about an in-doubt record (reconcile.Reconciler, asked by the reaper
	// in the background), to show beside the record: a view of the page
	// never calls an upstream. Default: none (the page shows the record
	// only).
	Reconcile interface {
		Last(key string) (reconcile.Observation, bool)
	}
	// SSO signs people in through an OpenID Connect provider
	// (auth/oidc.Login); its button says the manifest's auth.oidc.label.
	// Default: none (tokens only).
	SSO SSO
	// SessionTTL is how long a sign-in lasts. Default 8h.
	SessionTTL time.Duration
	// Throttle slows down guessing at sign-in per client address (the
	// gateway's, shared with its bearer tokens). Default: none (no limit).
	Throttle Throttle
	// ClientAddr and Secure read a request through the trusted proxies
	// (gateway.Proxies): the client's address, and whether it came over
	// TLS (the cookies are then Secure). Default: the connection's own
	// address; Secure only over TLS to airlock itself.
	ClientAddr func(*http.Request) string
	Secure     func(*http.Request) bool
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Clock is the page's time source: sessions' expiry, the figures'
	// windows, "since" on the page and the session purge's passes.
	// Default: the system clock.
	Clock clockwork.Clock
}

// SSO is a sign-in through an identity provider (auth/oidc.Login).
type SSO interface {
	Start(ctx context.Context) (string, oidc.Flow, error)
	Finish(ctx context.Context, f oidc.Flow, code string) (oidc.Identity, error)
}

// Throttle is what the sign-in asks before and tells after an attempt
// (gateway.Throttle).
type Throttle interface {
	Wait(addr, kind string) time.Duration
	Fail(addr, kind string)
}

// Store is what the page reads of the store.
type Store interface {
	ListPlans(ctx context.Context, f airlock.PlanFilter) ([]*airlock.Plan, error)
	ListRecords(ctx context.Context, f airlock.RecordFilter) ([]*airlock.Record, error)
	AuditTrail(ctx context.Context, f airlock.AuditFilter) ([]*airlock.AuditEvent, error)
	metrics.Source
	airlock.SessionStore
}

// setFlash keeps a message for the session's next page: messages travel
// in the session, never in the URL, so that a link cannot put its own
// words in airlock's alert box.
func (u *UI) setFlash(r *http.Request, s *airlock.PageSession, msg string) {
	if err := u.cfg.Store.SetSessionFlash(r.Context(), &airlock.SetSessionFlashParams{ID: s.ID, Flash: msg}); err != nil {
		u.log.Error("airlock ui: keeping a message for the next page", "err", err)
	}
}

// popFlash is the message kept for this page, once.
func (u *UI) popFlash(r *http.Request) string {
	s := sessionOf(r)
	if s == nil || s.Flash == "" {
		return ""
	}
	if err := u.cfg.Store.SetSessionFlash(r.Context(), &airlock.SetSessionFlashParams{ID: s.ID}); err != nil {
		u.log.Error("airlock ui: clearing the page's message", "err", err)
	}
	return s.Flash
}

// UI serves /ui/.
type UI struct {
	cfg  Config
	tmpl map[string]*template.Template
	log  *slog.Logger

	mu     sync.Mutex
	preKey []byte // MACs the pre-session tokens; shared by every replica (Store.Secret)
}

const cookieName = "airlock_session"

// New parses the templates.
func New(cfg Config) (*UI, error) {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.Authenticate != nil && cfg.Current == nil {
		return nil, errors.New("ui: Config.Current is required with Config.Authenticate (a session must end with its token)")
	}
	if cfg.Throttle == nil {
		cfg.Throttle = noThrottle{}
	}
	cfg.Clock = clocks.Or(cfg.Clock)
	u := &UI{cfg: cfg, tmpl: map[string]*template.Template{}, log: cfg.Logger}
	if u.log == nil {
		u.log = slog.Default()
	}
	funcs := template.FuncMap{
		"json":   shownJSON,
		"cell":   cell,
		"note":   func(s string) template.HTML { return shown(s, airlock.MaxNoteBytes) },
		"part":   planPart,
		"fields": planFields,
		"since":  func(t time.Time) string { return cfg.Clock.Since(t).Round(time.Second).String() },
		"pct":    func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
		"join":   strings.Join,
		"evaluation": func(b json.RawMessage) []policy.RuleResult {
			var out []policy.RuleResult
			_ = json.Unmarshal(b, &out)
			return out
		},
		"bar":   bar,
		"spark": spark,
	}
	for _, page := range []string{"signin", "queue", "plan", "history", "indoubt", "tools", "watch"} {
		t, err := template.New(page).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		u.tmpl[page] = t
	}
	return u, nil
}

// bar is a small server-rendered SVG: a value against its limit.
func bar(v, limit float64) template.HTML {
	if limit <= 0 {
		return ""
	}
	w := min(100, 100*v/limit)
	color := "#1e7a3c"
	if w >= 90 {
		color = "#b3261e"
	}
	return template.HTML(fmt.Sprintf(`<svg width="100" height="8" role="img" aria-label="%.0f%% of the limit"><rect width="100" height="8" fill="#eef1f6"/><rect width="%.0f" height="8" fill="%s"/></svg>`, w, w, color))
}

// spark is a 7-day bar chart as server-rendered SVG.
func spark(values []int, color string) template.HTML {
	peak := 1
	for _, v := range values {
		peak = max(peak, v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="140" height="32" role="img" aria-label="per day: %v">`, values)
	for i, v := range values {
		h := 30 * v / peak
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="16" height="%d" fill="%s"><title>%d</title></rect>`, i*20, 31-h, max(h, 1), color, v)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// Handler serves /ui/ (mount it at /ui/).
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/signin", u.signinPage)
	mux.HandleFunc("POST /ui/signin", u.signin)
	if u.cfg.SSO != nil {
		mux.HandleFunc("GET /ui/oidc/start", u.ssoStart)
		mux.HandleFunc("GET "+manifest.OIDCCallbackPath, u.ssoCallback)
	}
	mux.HandleFunc("POST /ui/signout", u.signed(u.csrf(u.signout)))
	mux.HandleFunc("GET /ui/{$}", u.signed(u.queue))
	mux.HandleFunc("GET /ui/plans/{id}", u.signed(u.planPage))
	mux.HandleFunc("POST /ui/plans/{id}/decide", u.signed(u.csrf(u.decide)))
	mux.HandleFunc("GET /ui/plans/{id}/{part}", u.signed(u.planJSON))
	mux.HandleFunc("GET /ui/history", u.signed(u.history))
	mux.HandleFunc("GET /ui/in-doubt", u.signed(u.inDoubt))
	mux.HandleFunc("POST /ui/records/{key}/settle", u.signed(u.csrf(u.settle)))
	mux.HandleFunc("GET /ui/tools", u.signed(u.tools))
	mux.HandleFunc("GET /ui/watch", u.signed(u.watch))
	return securityHeaders(mux)
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type ctxKey struct{}

// sessionKey is what the store keeps of a session cookie's value.
func sessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// current is the request's session, nil when it has none (or it expired,
// or was signed out on any replica).
func (u *UI) current(r *http.Request) (*airlock.PageSession, error) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil, nil
	}
	s, err := u.cfg.Store.GetSession(r.Context(), &airlock.GetSessionParams{ID: sessionKey(c.Value), Now: u.cfg.Clock.Now()})
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, nil
	}
	return s, err
}

// signed sends visitors without a session to the sign-in page.
func (u *UI) signed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := u.current(r)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		if s == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if why := u.recheck(s); why != "" {
			u.endSession(w, r, s, why)
			return
		}
		if !u.cfg.Clock.Now().Before(s.RenewAt) && r.URL.Path != "/ui/signout" {
			// The provider's word on the person has run out (a token's
			// session never gets here: its RenewAt is its expiry). Signing
			// out needs no word.
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/ui/oidc/start", http.StatusSeeOther)
				return
			}
			u.signinForm(w, r, http.StatusUnauthorized, "Your sign-in must be confirmed by the identity provider again before you decide: nothing was done. Sign in, then decide again.")
			return
		}
		ctx := context.WithValue(r.Context(), ctxKey{}, s)
		ctx = airlock.WithActor(ctx, s.Name)
		next(w, r.WithContext(ctx))
	}
}

// recheck holds session s against the configuration as it now stands and
// sets its role to the one its credential or groups give now; "" when it
// may go on, else why it has ended (docs/hardening.md, "page sessions").
func (u *UI) recheck(s *airlock.PageSession) string {
	switch {
	case s.Credential != "":
		if u.cfg.Current == nil {
			return "the page no longer signs in with tokens"
		}
		p, ok := u.cfg.Current(s.Credential)
		if !ok || p.Name != s.Name {
			return "the token it was made with was changed or removed"
		}
		if p.Role != airlock.RoleApprover && p.Role != airlock.RoleAdmin {
			return fmt.Sprintf("its token's role is now %s, which may not use the page", p.Role)
		}
		s.Role = p.Role
	case s.Subject != "":
		spec := u.cfg.Manifest.Auth.OIDC
		if u.cfg.SSO == nil || spec == nil || !strings.HasPrefix(s.Subject, spec.Issuer+"#") {
			return "sign-in through that identity provider is no longer configured"
		}
		role := oidc.RoleOf(spec, s.Groups)
		if role == "" {
			return "your groups no longer make you an approver or an admin (auth.oidc.roles)"
		}
		s.Role = role
	default:
		// Made before sessions were bound to what opened them.
		return "it was made before sessions were bound to their credential"
	}
	return ""
}

// endSession ends session s for why: deleted on every replica, its cookie
// cleared, and the sign-in form says why.
func (u *UI) endSession(w http.ResponseWriter, r *http.Request, s *airlock.PageSession, why string) {
	if err := u.cfg.Store.DeleteSession(r.Context(), s.ID); err != nil {
		u.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	u.log.Info("airlock ui: session ended", "name", s.Name, "why", why)
	u.signinForm(w, r, http.StatusUnauthorized, "Your sign-in has ended: "+why+". Nothing was done; sign in again.")
}

// clientAddr is the address a request came from.
func (u *UI) clientAddr(r *http.Request) string {
	if u.cfg.ClientAddr != nil {
		return u.cfg.ClientAddr(r)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// secure reports whether the page's cookies are to be Secure.
func (u *UI) secure(r *http.Request) bool {
	if u.cfg.Secure != nil {
		return u.cfg.Secure(r)
	}
	return r.TLS != nil
}

func sessionOf(r *http.Request) *airlock.PageSession {
	s, _ := r.Context().Value(ctxKey{}).(*airlock.PageSession)
	return s
}

// csrf refuses a form without the session's token.
func (u *UI) csrf(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := sessionOf(r)
		got := r.PostFormValue("csrf")
		if s == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) != 1 {
			u.render(w, r, http.StatusForbidden, "signin", "Refused", nil, "The form is missing its CSRF token or it does not match your session. Reload the page and try again.")
			return
		}
		next(w, r)
	}
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data map[string]any, flash string) {
	d := map[string]any{"Title": title, "Flash": flash}
	if s := sessionOf(r); s != nil {
		d["Principal"], d["CSRF"], d["Admin"] = &Principal{Name: s.Name, Role: s.Role, Groups: s.Groups}, s.CSRF, s.Role == airlock.RoleAdmin
	} else if pre, ok := u.preToken(r); ok {
		d["CSRF"] = pre
	}
	if u.cfg.SSO != nil && page == "signin" {
		spec := u.cfg.Manifest.Auth.OIDC
		if spec == nil {
			spec = &manifest.OIDCSpec{}
		}
		d["SSO"] = spec.LabelOr()
	}
	for k, v := range data {
		d[k] = v
	}
	var buf bytes.Buffer
	if err := u.tmpl[page].ExecuteTemplate(&buf, page+".html", d); err != nil {
		u.log.Error("airlock ui: rendering", "page", page, "err", err)
		http.Error(w, "the page could not be rendered; the operator's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(revealRest(buf.Bytes()))
}

func (u *UI) signinPage(w http.ResponseWriter, r *http.Request) {
	u.signinForm(w, r, http.StatusOK, "")
}

// signinForm answers the sign-in form with status and msg.
func (u *UI) signinForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	// A pre-session token protects the sign-in form itself (login CSRF).
	// The cookie carries it with the server's MAC, so that a value the
	// client made up is not taken for one.
	pre := randomHex(16)
	mac, err := u.mac(r.Context(), "pre-sign-in", pre)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: "airlock_pre", Value: pre + "." + mac, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r), MaxAge: 600})
	u.render(w, r, status, "signin", "Sign in", map[string]any{"CSRF": pre}, msg)
}

// key is the MAC key of the pre-session tokens, the same on every replica
// (kept in the store; the first replica's wins).
func (u *UI) key(ctx context.Context) ([]byte, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.preKey != nil {
		return u.preKey, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	k, err := u.cfg.Store.Secret(ctx, "ui_pre_sign_in", fresh)
	if err != nil {
		return nil, err
	}
	u.preKey = k
	return k, nil
}

// mac binds value to the server (every replica's key), for one purpose:
// the pre-session token, or a single sign-on's flow.
func (u *UI) mac(ctx context.Context, purpose, value string) (string, error) {
	k, err := u.key(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(purpose + ":" + value))
	return hex.EncodeToString(m.Sum(nil)), nil
}

// preToken is the pre-session token of the request's cookie, when a
// replica made it.
func (u *UI) preToken(r *http.Request) (string, bool) {
	c, err := r.Cookie("airlock_pre")
	if err != nil {
		return "", false
	}
	pre, mac, ok := strings.Cut(c.Value, ".")
	if !ok || pre == "" {
		return "", false
	}
	want, err := u.mac(r.Context(), "pre-sign-in", pre)
	if err != nil || !hmac.Equal([]byte(mac), []byte(want)) {
		return "", false
	}
	return pre, true
}

// throttled answers 429 when addr must wait before its next sign-in.
func (u *UI) throttled(w http.ResponseWriter, r *http.Request, addr string) bool {
	wait := u.cfg.Throttle.Wait(addr, "signin")
	if wait <= 0 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
	u.render(w, r, http.StatusTooManyRequests, "signin", "Sign in", nil, fmt.Sprintf("Too many failed sign-ins from this address; try again in %s.", wait.Round(time.Second)))
	return true
}

// noThrottle lets every attempt through (Config.Throttle unset).
type noThrottle struct{}

func (noThrottle) Wait(string, string) time.Duration { return 0 }
func (noThrottle) Fail(string, string)               {}

func (u *UI) signin(w http.ResponseWriter, r *http.Request) {
	addr := u.clientAddr(r)
	if u.throttled(w, r, addr) {
		return
	}
	pre, ok := u.preToken(r)
	if !ok || r.PostFormValue("csrf") == "" || subtle.ConstantTimeCompare([]byte(pre), []byte(r.PostFormValue("csrf"))) != 1 {
		u.render(w, r, http.StatusForbidden, "signin", "Sign in", nil, "The sign-in form expired. Try again.")
		return
	}
	p, ok := u.cfg.Authenticate(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		u.cfg.Throttle.Fail(addr, "signin")
		u.render(w, r, http.StatusUnauthorized, "signin", "Sign in", nil, "Unknown token.")
		return
	}
	if p.Role != airlock.RoleApprover && p.Role != airlock.RoleAdmin {
		u.render(w, r, http.StatusForbidden, "signin", "Sign in", nil, "Agent tokens cannot sign in; use an approver or admin token.")
		return
	}
	if u.startSession(w, r, p, "") {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	}
}

// startSession signs p in: a new session in the store, its cookie set.
// On false the answer (an error page) has been sent.
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, p Principal, subject string) bool {
	// A sign-in replaces the browser's session, if it had one: the old
	// cookie must not go on working beside the new one.
	if old, err := r.Cookie(cookieName); err == nil && old.Value != "" {
		if err := u.cfg.Store.DeleteSession(r.Context(), sessionKey(old.Value)); err != nil {
			u.fail(w, r, err)
			return false
		}
	}
	value := randomHex(32)
	now := u.cfg.Clock.Now().UTC()
	expires := now.Add(u.cfg.SessionTTL)
	renew := expires
	if subject != "" {
		// The provider's word holds for auth.oidc.recheck; the person is
		// then sent through the provider again.
		recheck := manifest.DefaultOIDCRecheck
		if spec := u.cfg.Manifest.Auth.OIDC; spec != nil {
			recheck = spec.RecheckOr()
		}
		if at := now.Add(recheck); at.Before(expires) {
			renew = at
		}
	}
	err := u.cfg.Store.CreateSession(r.Context(), &airlock.PageSession{ID: sessionKey(value), Name: p.Name, Role: p.Role, Subject: subject, Groups: p.Groups,
		Credential: p.Credential, CSRF: randomHex(16), CreatedAt: now, RenewAt: renew, ExpiresAt: expires})
	if err != nil {
		u.fail(w, r, err)
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: u.secure(r), Expires: now.Add(u.cfg.SessionTTL)})
	return true
}

func (u *UI) signout(w http.ResponseWriter, r *http.Request) {
	if s := sessionOf(r); s != nil {
		if err := u.cfg.Store.DeleteSession(r.Context(), s.ID); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}

// queuePage is how many waiting plans one page of the queue shows.
const queuePage = 100

// queueRow is one waiting plan as the queue shows it: what it is about
// (its natural-key arguments, the facts its tool's rules read) and how
// many approvals it has of how many.
type queueRow struct {
	*airlock.Plan
	// Note is the agent's note about the work (the tool's display.note).
	Work, Facts, Note template.HTML
	// Marked: a natural-key value or the run id holds invisible characters
	// (two plans can then look alike and be different work).
	Marked bool
}

// badCursor is what a page whose position (?after=) is not one this
// server gave says: the request's text is never shown back (a link could
// put words in the page's mouth).
const badCursor = "This page's position in the list is not one this page gave. Start again from the first page."

func (u *UI) queue(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	plans, err := u.cfg.Store.ListPlans(r.Context(), airlock.PlanFilter{Status: airlock.PlanAwaitingApproval, After: after, Limit: queuePage})
	if airlock.ErrorCode(err) == airlock.CodeInvalidArgument {
		u.render(w, r, http.StatusBadRequest, "signin", "Bad request", nil, badCursor)
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	waiting, err := u.cfg.Store.WaitingPlans(r.Context())
	if err != nil {
		u.fail(w, r, err)
		return
	}
	total := airlock.TotalWaiting(waiting)
	data := map[string]any{"Plans": u.rows(plans), "Total": total}
	if after != "" {
		data["First"] = "/ui/"
	}
	if len(plans) == queuePage {
		data["Next"] = "/ui/?" + url.Values{"after": {airlock.PlanCursor(plans[len(plans)-1])}}.Encode()
	}
	u.render(w, r, http.StatusOK, "queue", fmt.Sprintf("(%d) Queue", total), data, u.popFlash(r))
}

// rows are plans as the lists show them, each with what it is about.
func (u *UI) rows(plans []*airlock.Plan) []queueRow {
	rows := make([]queueRow, len(plans))
	for i, p := range plans {
		rows[i] = queueRow{Plan: p, Marked: airlock.HasInvisible(p.RunID)}
		if tool := u.cfg.Manifest.Tool(p.Tool); tool != nil {
			work, facts := naturalKeyValues(tool, p.Args), factsRead(tool, p.Facts)
			rows[i].Marked = rows[i].Marked || hasInvisible(work)
			// Money as people read it: "amount_minor: 2,500.00 USD".
			if money := tool.Money(p.Args, p.Facts); len(money) > 0 {
				for j := range work {
					work[j].value = cmp.Or(money["args."+work[j].name], work[j].value)
				}
				for j := range facts {
					facts[j].value = cmp.Or(money["facts."+facts[j].name], facts[j].value)
				}
			}
			rows[i].Work, rows[i].Facts, rows[i].Note = pairsHTML(work), pairsHTML(facts), cell(tool.AgentNote(p.Args))
		}
	}
	return rows
}

// pair is a named value a list shows: a natural-key argument, a fact.
type pair struct{ name, value string }

// pairsHTML is pairs as a list's cell shows them, "record_id: WD-2, …",
// each value cut at maxCell bytes and its invisible characters badges.
func pairsHTML(pairs []pair) template.HTML {
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(shown(p.name, maxCell)))
		b.WriteString(": ")
		b.WriteString(string(shown(p.value, maxCell)))
	}
	return template.HTML(b.String())
}

// hasInvisible reports whether a name or a value of pairs holds an
// invisible character.
func hasInvisible(pairs []pair) bool {
	for _, p := range pairs {
		if airlock.HasInvisible(p.name) || airlock.HasInvisible(p.value) {
			return true
		}
	}
	return false
}

// naturalKeyValues is a plan's natural-key arguments.
func naturalKeyValues(t *airlock.Tool, args json.RawMessage) []pair {
	m, err := airlock.ParseArgs(args)
	if err != nil {
		return nil
	}
	pairs := make([]pair, 0, len(t.NaturalKey))
	for _, kf := range t.NaturalKey {
		if v, ok := airlock.LookupPath(m, kf.Field); ok {
			pairs = append(pairs, pair{kf.Field, fmt.Sprint(v)})
		}
	}
	return pairs
}

var factRef = regexp.MustCompile(`\bfacts\.([A-Za-z_][A-Za-z0-9_]*)`)

// factsRead is the facts the tool's rules read (facts.NAME in a rule's
// condition), with their values in this plan.
func factsRead(t *airlock.Tool, facts json.RawMessage) []pair {
	m, err := airlock.ParseArgs(facts)
	if err != nil || t.Approval == nil {
		return nil
	}
	var parts []pair
	seen := map[string]bool{}
	for _, rule := range t.Approval.Rules {
		for _, ref := range factRef.FindAllStringSubmatch(rule.When, -1) {
			if name := ref[1]; !seen[name] {
				seen[name] = true
				if v, ok := m[name]; ok {
					parts = append(parts, pair{name, fmt.Sprint(v)})
				}
			}
		}
	}
	return parts
}

func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	u.log.Error("airlock ui", "err", err)
	u.render(w, r, http.StatusInternalServerError, "signin", "Error", nil, "Something went wrong; the operator's log has the details.")
}

func (u *UI) planPage(w http.ResponseWriter, r *http.Request) {
	p, err := u.cfg.Plans.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		u.render(w, r, http.StatusNotFound, "signin", "Not found", nil, "No such plan.")
		return
	}
	// The plan's trail, read by its id and its key (the commit record's
	// events); a page of the first events is enough to show.
	trail, err := u.cfg.Store.AuditTrail(r.Context(), airlock.AuditFilter{Key: p.Key, PlanID: p.ID, Limit: airlock.MaxAuditPage})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	// Who may not approve, and why (separation of duties): the page then
	// offers no Approve button, and says so. Who may not decide at all
	// (not among the tool's approvers) gets no form: a Reject button would
	// only be refused.
	cannotApprove, cannotDecide := "", ""
	if s := sessionOf(r); s != nil {
		if tool := u.cfg.Manifest.Tool(p.Tool); tool != nil {
			dp := tool.Approval.DecisionPolicy()
			cannotApprove = dp.Forbidden(p, s.Name, s.Groups)
			if !dp.Allows(s.Name, s.Groups) {
				cannotDecide = cannotApprove // the approvers' refusal, first of the checks
			}
		}
	}
	marked := airlock.HasInvisible(p.RunID)
	tool := u.cfg.Manifest.Tool(p.Tool)
	if tool != nil {
		marked = marked || hasInvisible(naturalKeyValues(tool, p.Args))
	}
	u.render(w, r, http.StatusOK, "plan", "Plan "+p.ID, map[string]any{"Plan": p, "Trail": trail, "CannotApprove": cannotApprove, "CannotDecide": cannotDecide,
		"Marked": marked, "Tool": tool, "Money": tool.Money(p.Args, p.Facts), "Note": tool.AgentNote(p.Args)}, u.popFlash(r))
}

// planJSON is a plan's arguments, facts or result whole (the plan's page
// cuts long values): the same JSON, its invisible characters as \u
// escapes, so that nothing in it acts where it is shown.
func (u *UI) planJSON(w http.ResponseWriter, r *http.Request) {
	p, err := u.cfg.Plans.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		u.render(w, r, http.StatusNotFound, "signin", "Not found", nil, "No such plan.")
		return
	}
	var part json.RawMessage
	switch r.PathValue("part") {
	case "arguments.json":
		part = p.Args
	case "facts.json":
		part = p.Facts
	case "result.json":
		part = p.Result
	default:
		u.render(w, r, http.StatusNotFound, "signin", "Not found", nil, "No such page.")
		return
	}
	if len(part) == 0 {
		part = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(airlock.EscapeInvisibleJSON(part))
}

func (u *UI) decide(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	id := r.PathValue("id")
	action := r.PostFormValue("action")
	if action != "approve" && action != "reject" {
		http.Error(w, "action must be approve or reject", http.StatusBadRequest)
		return
	}
	msg := ""
	if _, err := u.cfg.Plans.Decide(r.Context(), airlock.PlanDecision{
		ID: id, Approve: action == "approve", By: s.Name, Role: s.Role, Groups: s.Groups, Reason: r.PostFormValue("reason"), DecisionHash: r.PostFormValue("decision_hash"),
	}); err != nil {
		var e *airlock.Error
		if errors.As(err, &e) {
			msg = e.Message
		} else {
			msg = "The decision could not be recorded."
		}
	}
	if msg != "" {
		u.setFlash(r, s, msg)
	}
	http.Redirect(w, r, "/ui/plans/"+url.PathEscape(id), http.StatusSeeOther)
}

func (u *UI) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := struct{ Tool, Status, Approver, Date string }{q.Get("tool"), q.Get("status"), q.Get("approver"), q.Get("date")}
	// One page from the store, newest first, after the cursor of the page
	// before: nothing is loaded to be filtered or paged here.
	const pageSize = 50
	f := airlock.PlanFilter{Tool: filter.Tool, Status: airlock.PlanStatus(filter.Status), DecidedBy: filter.Approver,
		Decided: filter.Status == "", Newest: true, After: q.Get("after"), Limit: pageSize}
	// A filter is one the form offers, or refused in the page's own words:
	// the request's text is never shown back in the alert (a link could put
	// words in the page's mouth), and only a filter that passes is kept in
	// the form.
	bad := ""
	switch {
	case filter.Tool != "" && u.cfg.Manifest.Tool(filter.Tool) == nil:
		bad = "The tool filter names no tool of this server; choose one from the list."
	case filter.Status != "" && !slices.Contains(airlock.PlanStatuses, airlock.PlanStatus(filter.Status)):
		bad = "The status filter is not a plan status; choose one from the list."
	case len(filter.Approver) > 256 || airlock.HasInvisible(filter.Approver) || !utf8.ValidString(filter.Approver):
		bad = "The approver filter is not a name: at most 256 bytes of visible text."
	}
	if filter.Date != "" && bad == "" {
		day, err := time.Parse("2006-01-02", filter.Date)
		if err != nil {
			bad = "The date must be YYYY-MM-DD."
		}
		f.Since, f.Until = day, day.AddDate(0, 0, 1)
	}
	if bad != "" {
		u.render(w, r, http.StatusBadRequest, "signin", "Bad request", nil, bad)
		return
	}
	plans, err := u.cfg.Store.ListPlans(r.Context(), f)
	if airlock.ErrorCode(err) == airlock.CodeInvalidArgument {
		u.render(w, r, http.StatusBadRequest, "signin", "Bad request", nil, badCursor)
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	link := func(after string) string {
		v := url.Values{"tool": {filter.Tool}, "status": {filter.Status}, "approver": {filter.Approver}, "date": {filter.Date}}
		if after != "" {
			v.Set("after", after)
		}
		return "/ui/history?" + v.Encode()
	}
	statuses := make([]string, 0, len(airlock.PlanStatuses))
	for _, st := range airlock.PlanStatuses[1:] {
		statuses = append(statuses, string(st))
	}
	data := map[string]any{"Plans": u.rows(plans), "Filter": filter, "Tools": u.cfg.Manifest.ToolNames(),
		"Statuses": append(statuses, string(airlock.PlanAwaitingApproval))}
	if f.After != "" {
		data["Prev"] = link("") // the newest page
	}
	if len(plans) == pageSize {
		data["Next"] = link(airlock.PlanCursor(plans[len(plans)-1]))
	}
	u.render(w, r, http.StatusOK, "history", "History", data, "")
}

func (u *UI) inDoubt(w http.ResponseWriter, r *http.Request) {
	const pageSize = 50
	f := airlock.RecordFilter{State: airlock.StateInDoubt, After: r.URL.Query().Get("after"), Limit: pageSize}
	recs, err := u.cfg.Store.ListRecords(r.Context(), f)
	if airlock.ErrorCode(err) == airlock.CodeInvalidArgument {
		u.render(w, r, http.StatusBadRequest, "signin", "Bad request", nil, badCursor)
		return
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	type view struct {
		*airlock.Record
		Reconciled   json.RawMessage
		ReconcileErr string
		AskedAt      time.Time
		NotAsked     bool // the tool has a reconcile tool that has not answered yet
	}
	views := make([]view, 0, len(recs))
	pending := false
	for _, rec := range recs {
		v := view{Record: rec}
		if t := u.cfg.Manifest.Tool(rec.Tool); u.cfg.Reconcile != nil && t != nil && t.ReconcileWith != "" {
			if o, ok := u.cfg.Reconcile.Last(rec.Key); !ok {
				v.NotAsked, pending = true, true
			} else if o.Err != "" {
				v.ReconcileErr, v.AskedAt = o.Err, o.At
			} else {
				v.Reconciled, v.AskedAt = o.Found.Answer, o.At
			}
		}
		views = append(views, v)
	}
	data := map[string]any{"Records": views, "Pending": pending}
	if f.After != "" {
		data["Prev"] = "/ui/in-doubt" // the newest page
	}
	if len(recs) == pageSize {
		data["Next"] = "/ui/in-doubt?after=" + url.QueryEscape(airlock.RecordCursor(recs[len(recs)-1]))
	}
	u.render(w, r, http.StatusOK, "indoubt", "In doubt", data, u.popFlash(r))
}

func (u *UI) settle(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	msg := "Settled."
	_, err := u.cfg.Guard.Settle(r.Context(), airlock.SettleRequest{
		Key: r.PathValue("key"), Happened: r.PostFormValue("happened") == "true",
		Result: json.RawMessage(strings.TrimSpace(r.PostFormValue("result"))), Note: r.PostFormValue("note"), By: s.Name, Role: s.Role,
	})
	if err != nil {
		var e *airlock.Error
		if errors.As(err, &e) {
			msg = e.Message
		} else {
			msg = err.Error()
		}
		if airlock.ErrorCode(err) == airlock.CodeForbidden {
			u.render(w, r, http.StatusForbidden, "signin", "Refused", nil, msg)
			return
		}
	}
	u.setFlash(r, s, msg)
	http.Redirect(w, r, "/ui/in-doubt", http.StatusSeeOther)
}

func (u *UI) tools(w http.ResponseWriter, r *http.Request) {
	var infos []airlock.ToolInfo
	for _, t := range u.cfg.Manifest.Tools {
		infos = append(infos, t.Info())
	}
	u.render(w, r, http.StatusOK, "tools", "Things you cannot undo", map[string]any{"Tools": infos}, "")
}

func (u *UI) watch(w http.ResponseWriter, r *http.Request) {
	type rep struct {
		Label  string
		Report *metrics.Report
	}
	var reports []rep
	for _, p := range []struct {
		label string
		d     time.Duration
	}{{"24 hours", 24 * time.Hour}, {"7 days", 7 * 24 * time.Hour}} {
		rr, err := metrics.Compute(r.Context(), u.cfg.Store, &u.cfg.Manifest.Catalog, p.d, u.cfg.Clock.Now())
		if err != nil {
			u.fail(w, r, err)
			return
		}
		reports = append(reports, rep{p.label, rr})
	}
	// Calls and repeats per day over the last 7 days, per tool, from the
	// rollup: one query a day.
	type series struct {
		Tool           string
		Calls, Repeats []int
	}
	byTool := map[string]*series{}
	var order []string
	for _, t := range u.cfg.Manifest.Tools {
		if t.Kind.SideEffecting() {
			byTool[t.Name] = &series{Tool: t.Name, Calls: make([]int, 7), Repeats: make([]int, 7)}
			order = append(order, t.Name)
		}
	}
	now := u.cfg.Clock.Now()
	for d := range 7 {
		until := now.Add(time.Minute - time.Duration(6-d)*24*time.Hour)
		f, err := u.cfg.Store.Figures(r.Context(), &airlock.FiguresParams{Since: until.Add(-24 * time.Hour), Until: until})
		if err != nil {
			u.fail(w, r, err)
			return
		}
		for tool, sr := range byTool {
			sr.Calls[d] = int(f.ByTool[tool][airlock.FigureCalls] + f.ByTool[tool][airlock.FigurePlans])
			sr.Repeats[d] = int(f.ByTool[tool][airlock.FigureRepeats])
		}
	}
	var charts []*series
	for _, name := range order {
		charts = append(charts, byTool[name])
	}
	u.render(w, r, http.StatusOK, "watch", "What to watch", map[string]any{"Reports": reports, "Charts": charts}, "")
}

// purgeBatch is how many expired sessions one statement deletes; a pass
// goes on until a statement deletes fewer.
const purgeBatch = 1000

// SessionPurger is the service that deletes expired sessions every
// interval until stopped (they are refused once expired whether purged
// or not).
func (u *UI) SessionPurger(every time.Duration) *maintenance.Service {
	return maintenance.New(func(ctx context.Context) {
		for {
			n, err := u.cfg.Store.PurgeSessions(ctx, &airlock.PurgeSessionsParams{Now: u.cfg.Clock.Now(), Limit: purgeBatch})
			if err != nil {
				if ctx.Err() == nil {
					u.log.Warn("airlock ui: purging expired sessions", "err", err)
				}
				return
			}
			if n < purgeBatch {
				return
			}
		}
	}, maintenance.Config{Interval: every, Clock: u.cfg.Clock})
}
