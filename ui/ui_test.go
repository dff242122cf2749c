package ui_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/ui"
	"github.com/airlockhq/airlock/upstream"
)

const pageManifest = `version: 1
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /pay}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first."}
    approval:
      rules:
        - {name: people, when: "true", decide: human}
`

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	planLink  = regexp.MustCompile(`href="/ui/plans/(pl_[0-9a-f]+)"`)
	nextLink  = regexp.MustCompile(`<a href="([^"]+)" id="next">`)
)

// pageDeps are what a page needs: a manifest, a migrated SQLite
// store, a guard and the plan service over them.
func pageDeps(t testing.TB, manifestText string) (*manifest.Manifest, *sqlite.Store, *guard.Guard, *plan.Service) {
	t.Helper()
	m, err := manifest.Parse([]byte(manifestText), "page.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := guard.New(s, nil)
	t.Cleanup(g.Close)
	noop := upstream.Func(func(context.Context, *upstream.Request) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded}
	})
	plans, err := plan.New(plan.Config{Manifest: m, Store: s, Guard: g, Callers: func(*airlock.Tool) (upstream.Caller, bool) { return noop, true }})
	if err != nil {
		t.Fatal(err)
	}
	return m, s, g, plans
}

// signInAs signs client c in at the page served at base with token: it
// reads the sign-in form, takes its CSRF token and posts the token. It
// returns the form's headers and the post's status.
func signInAs(t testing.TB, c *http.Client, base, token string) (http.Header, int) {
	t.Helper()
	resp, err := c.Get(base + "/ui/signin")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f := csrfField.FindStringSubmatch(string(b))
	if f == nil {
		t.Fatalf("no CSRF token in the sign-in form: %s", b)
	}
	posted, err := c.PostForm(base+"/ui/signin", url.Values{"csrf": {f[1]}, "token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	posted.Body.Close()
	return resp.Header, posted.StatusCode
}

// withTokens signs in with who's tokens: cfg's Authenticate and Current
// from who, a token's principal (a test's credential is the token itself).
func withTokens(cfg ui.Config, who func(token string) (ui.Principal, bool)) ui.Config {
	cfg.Authenticate = func(token string) (ui.Principal, bool) {
		p, ok := who(token)
		p.Credential = token
		return p, ok
	}
	cfg.Current = cfg.Authenticate
	return cfg
}

// purgeCounter tells each PurgeSessions' count, so a test waits on the
// purge's statements instead of on time.
type purgeCounter struct {
	*sqlite.Store
	purged chan int
}

func (p purgeCounter) PurgeSessions(ctx context.Context, params *airlock.PurgeSessionsParams) (int, error) {
	n, err := p.Store.PurgeSessions(ctx, params)
	if err == nil {
		p.purged <- n
	}
	return n, err
}

// The session purge deletes the sessions expired by the page's clock, in
// statements of a thousand until one deletes fewer, and keeps the others.
func TestSessionPurgerDeletesExpiredSessionsByThePageClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, s, g, plans := pageDeps(t, pageManifest)
	start := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(start)
	// 1,500 sessions expire 90 s from now (more than one statement's
	// worth); 3 last a day.
	for i := range 1503 {
		expires := start.Add(90 * time.Second)
		if i >= 1500 {
			expires = start.Add(24 * time.Hour)
		}
		if err := s.CreateSession(ctx, &airlock.PageSession{ID: fmt.Sprintf("%064x", i), Name: "ana", Role: airlock.RoleApprover, Credential: "0f3a",
			CSRF: "c", CreatedAt: start, RenewAt: expires, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	store := purgeCounter{Store: s, purged: make(chan int, 8)}
	page, err := ui.New(ui.Config{Manifest: m, Store: store, Guard: g, Plans: plans, Clock: clock,
		Authenticate: func(string) (ui.Principal, bool) { return ui.Principal{}, false },
		Current:      func(string) (ui.Principal, bool) { return ui.Principal{}, false }})
	if err != nil {
		t.Fatal(err)
	}
	purger := page.SessionPurger(time.Minute)
	if err := purger.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(purger.Stop)
	next := func() int {
		t.Helper()
		select {
		case n := <-store.purged:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no purge statement ran")
			return 0
		}
	}
	// A minute in: nothing has expired yet.
	clock.Advance(time.Minute)
	if n := next(); n != 0 {
		t.Fatalf("a minute in, %d sessions were purged; none had expired", n)
	}
	// Two minutes in: the 1,500 in two statements, the pass ends there.
	clock.Advance(time.Minute)
	if a, b := next(), next(); a != 1000 || b != 500 {
		t.Fatalf("two minutes in, the statements purged %d and %d sessions; want 1000 then 500", a, b)
	}
	for i, want := range map[int]error{0: airlock.ErrNotFound, 1499: airlock.ErrNotFound, 1500: nil, 1502: nil} {
		if _, err := s.GetSession(ctx, &airlock.GetSessionParams{ID: fmt.Sprintf("%064x", i), Now: start}); !errors.Is(err, want) {
			t.Errorf("session %d after the purge: %v, want %v", i, err, want)
		}
	}
}

// A signed-in approver who is not among the tool's approvers gets no
// decision form (its Reject would be refused as its Approve would); one
// who is gets both buttons.
func TestPlanPageOffersNoDecisionToWhoMayNotDecide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, s, g, plans := pageDeps(t, strings.Replace(pageManifest, "    approval:\n", "    approval:\n      approvers: [ana]\n", 1))
	page, err := ui.New(withTokens(ui.Config{Manifest: m, Store: s, Guard: g, Plans: plans},
		func(token string) (ui.Principal, bool) {
			return ui.Principal{Name: token, Role: airlock.RoleApprover}, true
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler())
	t.Cleanup(srv.Close)
	args, _ := airlock.NewArgs([]byte(`{"record_id":"WD-2"}`))
	p, _, err := plans.Propose(ctx, m.Tool("pay"), args, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	planPage := func(name string) string {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		signInAs(t, c, srv.URL, name)
		resp, err := c.Get(srv.URL + "/ui/plans/" + p.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's plan page: %d %s", name, resp.StatusCode, b)
		}
		return string(b)
	}
	bob := planPage("bob")
	if strings.Contains(bob, `id="reject"`) || strings.Contains(bob, `id="approve"`) || !strings.Contains(bob, `id="cannot-decide"`) ||
		!strings.Contains(bob, "may not decide plans of pay") {
		t.Errorf("bob, not among pay's approvers, is offered a decision or not told why:\n%s", bob)
	}
	ana := planPage("ana")
	if !strings.Contains(ana, `<dt>Who approves it?</dt><dd>A person.</dd>`) || !strings.Contains(ana, `<dt>Can it be undone?</dt><dd>No.</dd>`) {
		t.Errorf("the plan page does not show the tool's three answers:\n%s", ana)
	}
	if !strings.Contains(ana, `id="reject"`) || !strings.Contains(ana, `id="approve"`) || strings.Contains(ana, `id="cannot-decide"`) || !strings.Contains(ana, `id="expires"`) {
		t.Errorf("ana, pay's approver, is not offered both decisions:\n%s", ana)
	}
}

// The page without a browser: the sign-in form is bound to its cookie, an
// approver's token signs in and an agent's does not, a form without the
// session's CSRF token is refused, every answer carries the security
// headers, a withdrawn plan shows as withdrawn, and signing out ends the
// session.
func TestSignInFormsAndPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, s, guard, plans := pageDeps(t, pageManifest)
	page, err := ui.New(withTokens(ui.Config{Manifest: m, Store: s, Guard: guard, Plans: plans},
		func(token string) (ui.Principal, bool) {
			switch token {
			case "approver-token":
				return ui.Principal{Name: "ana", Role: airlock.RoleApprover}, true
			case "agent-token":
				return ui.Principal{Name: "bot", Role: airlock.RoleAgent}, true
			}
			return ui.Principal{}, false
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler())
	t.Cleanup(srv.Close)
	args, _ := airlock.NewArgs([]byte(`{"record_id":"WD-1"}`))
	p, _, err := plans.Propose(airlock.WithActor(ctx, "bot"), m.Tool("pay"), args, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plans.Withdraw(ctx, p.ID, "bot"); err != nil {
		t.Fatal(err)
	}

	newClient := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	get := func(c *http.Client, path string) (int, string, http.Header) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	post := func(c *http.Client, path string, form url.Values) (int, string) {
		t.Helper()
		resp, err := c.PostForm(srv.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	signIn := func(c *http.Client, token string) int {
		t.Helper()
		h, code := signInAs(t, c, srv.URL, token)
		if h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("Cache-Control") != "no-store" {
			t.Fatalf("security headers: %v", h)
		}
		return code
	}

	if code := signIn(newClient(), "agent-token"); code != http.StatusForbidden {
		t.Errorf("an agent's token signed in: %d", code)
	}
	if code := signIn(newClient(), "no-such-token"); code != http.StatusUnauthorized {
		t.Errorf("an unknown token: %d", code)
	}
	// A form that did not come from this server's sign-in page.
	if code, _ := post(newClient(), "/ui/signin", url.Values{"csrf": {"0123"}, "token": {"approver-token"}}); code != http.StatusForbidden {
		t.Errorf("a sign-in without the form's cookie: %d", code)
	}

	ana := newClient()
	if code := signIn(ana, "approver-token"); code != http.StatusSeeOther {
		t.Fatalf("the approver's sign-in: %d", code)
	}
	code, body, _ := get(ana, "/ui/plans/"+p.ID)
	if code != http.StatusOK || !strings.Contains(body, `id="status">withdrawn<`) || strings.Contains(body, `id="expires"`) {
		t.Fatalf("the withdrawn plan's page (no expiry for a plan no one decides any more): %d\n%s", code, body)
	}
	// The queue pages past any count, shows the true count and names each
	// plan's work.
	const waiting = 205
	for i := range waiting {
		args, _ := airlock.NewArgs([]byte(fmt.Sprintf(`{"record_id":"Q-%03d"}`, i)))
		if _, _, err := plans.Propose(ctx, m.Tool("pay"), args, "run-q"); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	next, pages := "/ui/", 0
	for next != "" {
		pages++
		code, body, _ := get(ana, next)
		if code != http.StatusOK || !strings.Contains(body, `<span id="total">205</span>`) {
			t.Fatalf("queue page %d: %d, want the true count 205:\n%s", pages, code, body)
		}
		for _, id := range planLink.FindAllStringSubmatch(body, -1) {
			seen[id[1]] = true
		}
		if !strings.Contains(body, "record_id: Q-") {
			t.Fatalf("queue page %d does not name the work", pages)
		}
		next = ""
		if n := nextLink.FindStringSubmatch(body); n != nil {
			next = html.UnescapeString(n[1])
		}
	}
	if len(seen) != waiting || pages != 3 {
		t.Fatalf("%d plans over %d pages; want %d over 3", len(seen), pages, waiting)
	}
	if code, _ := post(ana, "/ui/signout", url.Values{}); code != http.StatusForbidden {
		t.Errorf("a sign-out without the session's CSRF token: %d", code)
	}
	f := csrfField.FindStringSubmatch(body)
	if f == nil {
		t.Fatal("no CSRF token on the plan's page")
	}
	if code, _ := post(ana, "/ui/signout", url.Values{"csrf": {f[1]}}); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	if code, _, h := get(ana, "/ui/"); code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "/ui/signin") {
		t.Errorf("after signing out: %d %v", code, h.Get("Location"))
	}
}

// A list page whose position (?after=) or filter is not one the page gave
// says so in its own words: the request's text is never shown back, so a
// link cannot put words in the page's mouth.
func TestABadPagePositionIsNotEchoed(t *testing.T) {
	t.Parallel()
	m, s, g, plans := pageDeps(t, pageManifest)
	page, err := ui.New(withTokens(ui.Config{Manifest: m, Store: s, Guard: g, Plans: plans},
		func(token string) (ui.Principal, bool) {
			return ui.Principal{Name: token, Role: airlock.RoleAdmin}, true
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler())
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	signInAs(t, c, srv.URL, "ana")
	const words = "Approved by the CEO, call 555-0100"
	for _, path := range []string{"/ui/?after=", "/ui/in-doubt?after=", "/ui/history?after=", "/ui/history?status=", "/ui/history?tool=",
		"/ui/history?date=", "/ui/history?approver=%E2%80%AE"} {
		resp, err := c.Get(srv.URL + path + url.QueryEscape(words))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "CEO") || !strings.Contains(string(b), `class="flash"`) {
			t.Errorf("%s with words of a link's making: %d; want 400 in the page's own words, without them:\n%s", path, resp.StatusCode, b)
		}
	}
}
