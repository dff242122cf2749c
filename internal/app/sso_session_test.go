package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const ssoPlansManifest = `version: 1
upstreams:
  payments: {http: "http://127.0.0.1:1"}
tools:
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, additionalProperties: false}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /pay}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first payout."}
    approval: {rules: [{name: people, when: "true", decide: human}]}
auth:
  oidc:
    issuer: "ISSUER"
    client_id: "CLIENT"
    client_secret_env: SECRET_ENV
    redirect_url: "http://127.0.0.1:9/ui/oidc/callback"
    scopes: [openid, email, groups]
    roles: ROLES
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
    - {name: root, role: admin, sha256: "AHASH"}
`

const ssoAdminToken = "sso-session-test-admin-token"

var pageFormToken = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// A sign-in through the provider holds only as long as the provider's
// word (auth.oidc.recheck) and the manifest's roles (docs/hardening.md,
// "page sessions"): once the recheck is due, the page sends the person
// through the provider before showing anything and takes no decision;
// the provider no longer naming them an approver ends the session; and a
// replica whose auth.oidc.roles no longer maps their group ends it at the
// next request. A renewal the provider confirms replaces the session.
func TestSingleSignOnSessionsEndWithTheGroup(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	env := "AIRLOCK_TEST_OIDC_SECRET_SESSIONS"
	os.Setenv(env, idp.ClientSecret)
	clock := clockwork.NewFakeClockAt(time.Now())
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	serve := func(roles string) string {
		t.Helper()
		hash, admin := gateway.HashToken(agentToken), gateway.HashToken(ssoAdminToken)
		m, err := manifest.Parse([]byte(strings.NewReplacer("ISSUER", idp.Issuer(), "CLIENT", idp.ClientID, "SECRET_ENV", env,
			"ROLES", roles, "AHASH", fmt.Sprintf("%x", admin[:]), "HASH", fmt.Sprintf("%x", hash[:])).Replace(ssoPlansManifest)), "sso.yaml")
		if err != nil {
			t.Fatal(err)
		}
		tokens, err := gateway.TokensFromManifest(m.Auth.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		return serveApp(t, &app.Config{Manifest: m, Tokens: tokens, DSN: dsn, Clock: clock}).URL
	}
	base := serve("{approvers: approver}")
	f := &ssoFixture{idp: idp, base: base}
	ana := &mockoidc.MockUser{Subject: "u-ana", Email: "ana@x.example", EmailVerified: true, Groups: []string{"approvers"}}
	anaLeft := &mockoidc.MockUser{Subject: "u-ana", Email: "ana@x.example", EmailVerified: true, Groups: []string{"staff"}}

	status, out := callAPI(t, base+"/v1/calls", agentToken, `{"tool":"plan_pay_out","args":{"record_id":"PO-1"},"run_id":"sso"}`)
	if status != http.StatusOK {
		t.Fatalf("propose: %d %v", status, out)
	}
	id := out["plan"].(map[string]any)["id"].(string)

	signIn := func(c *http.Client, user *mockoidc.MockUser) (csrf, hash string) {
		t.Helper()
		if st, body := f.callback(t, c, f.start(t, c, user)); st != http.StatusOK {
			t.Fatalf("sign in: %d %s", st, body)
		}
		resp, page := f.get(t, c, base+"/ui/plans/"+id)
		m := pageFormToken.FindStringSubmatch(page)
		h := regexp.MustCompile(`name="decision_hash" value="([0-9a-f]+)"`).FindStringSubmatch(page)
		if resp.StatusCode != http.StatusOK || m == nil || h == nil {
			t.Fatalf("the plan page: %d %s", resp.StatusCode, page)
		}
		return m[1], h[1]
	}
	decide := func(c *http.Client, base, csrf, hash string) (int, string) {
		t.Helper()
		resp, err := c.PostForm(base+"/ui/plans/"+id+"/decide", url.Values{"csrf": {csrf}, "action": {"approve"}, "decision_hash": {hash}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	stillWaits := func(t *testing.T) {
		t.Helper()
		if _, plan := callAPI(t, base+"/v1/plans/"+id, ssoAdminToken, ""); plan["status"] != "awaiting_approval" {
			t.Fatalf("the plan: %v", plan)
		}
	}

	t.Run("recheck due: no page, no decision, until the provider confirms", func(t *testing.T) {
		c := f.browser()
		csrf, hash := signIn(c, ana)
		clock.Advance(manifest.DefaultOIDCRecheck + time.Second)
		if resp, _ := f.get(t, c, base+"/ui/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/oidc/start" {
			t.Fatalf("the queue with the recheck due: %d %q, want a redirect through the provider", resp.StatusCode, resp.Header.Get("Location"))
		}
		if st, body := decide(c, base, csrf, hash); st != http.StatusUnauthorized || !strings.Contains(body, "confirmed by the identity provider again") {
			t.Fatalf("a decision with the recheck due: %d %s", st, body)
		}
		stillWaits(t)
		// The provider confirms her: a new session, the old one gone.
		old := sessionCookie(c, base)
		signIn(c, ana)
		if st := pageWithCookie(t, base, old); st != http.StatusSeeOther {
			t.Fatalf("the renewed-away session: %d", st)
		}
	})
	t.Run("the provider drops her from the group: signed out", func(t *testing.T) {
		c := f.browser()
		csrf, hash := signIn(c, ana)
		clock.Advance(manifest.DefaultOIDCRecheck + time.Second)
		old := sessionCookie(c, base)
		if st, body := f.callback(t, c, f.start(t, c, anaLeft)); st != http.StatusForbidden || !strings.Contains(body, "in no group") {
			t.Fatalf("the renewal without the group: %d %s", st, body)
		}
		// The session is gone (not waiting for a renewal): sign in.
		if resp, _ := f.get(t, c, base+"/ui/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/signin" {
			t.Fatalf("the queue after the refused renewal: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if st := pageWithCookie(t, base, old); st != http.StatusSeeOther {
			t.Fatalf("the old session after the refused renewal: %d", st)
		}
		if st, _ := decide(c, base, csrf, hash); st != http.StatusUnauthorized {
			t.Fatalf("a decision after the refused renewal: %d", st)
		}
		stillWaits(t)
	})
	t.Run("the provider refuses the renewal: signed out", func(t *testing.T) {
		c := f.browser()
		signIn(c, ana)
		clock.Advance(manifest.DefaultOIDCRecheck + time.Second)
		old := sessionCookie(c, base)
		f.start(t, c, ana)
		if st, _ := f.callback(t, c, url.Values{"error": {"access_denied"}}); st != http.StatusUnauthorized {
			t.Fatalf("the refused renewal: %d", st)
		}
		if st := pageWithCookie(t, base, old); st != http.StatusSeeOther {
			t.Fatalf("the session after the provider refused its renewal: %d", st)
		}
	})
	t.Run("signing out needs no renewal", func(t *testing.T) {
		c := f.browser()
		csrf, _ := signIn(c, ana)
		clock.Advance(manifest.DefaultOIDCRecheck + time.Second)
		old := sessionCookie(c, base)
		resp, err := c.PostForm(base+"/ui/signout", url.Values{"csrf": {csrf}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign out with the recheck due: %d", resp.StatusCode)
		}
		if st := pageWithCookie(t, base, old); st != http.StatusSeeOther {
			t.Fatalf("the signed-out session: %d", st)
		}
	})
	t.Run("the manifest no longer maps her group: signed out at once", func(t *testing.T) {
		c := f.browser()
		csrf, hash := signIn(c, ana)
		other := serve("{ops: admin}") // a replica (or a restart) with the new roles
		resp, page := f.get(t, c, other+"/ui/")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "no longer make you an approver") {
			t.Fatalf("the queue on the new roles: %d %s", resp.StatusCode, page)
		}
		if st, _ := decide(c, other, csrf, hash); st != http.StatusUnauthorized {
			t.Fatalf("a decision on the new roles: %d", st)
		}
		if st, _ := decide(c, base, csrf, hash); st != http.StatusUnauthorized {
			t.Fatalf("a decision on the old replica after the session ended: %d", st)
		}
		stillWaits(t)
	})
}

// sessionCookie is the page's session cookie c holds for base.
func sessionCookie(c *http.Client, base string) string {
	u, _ := url.Parse(base + "/ui/")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "airlock_session" {
			return ck.Value
		}
	}
	return ""
}

// pageWithCookie is the status of the queue for a browser with only the
// session cookie value, 0 for a redirect anywhere but to the sign-in form.
func pageWithCookie(t *testing.T, base, value string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: "airlock_session", Value: value})
	resp, err := (&http.Client{CheckRedirect: noRedirect}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther && resp.Header.Get("Location") != "/ui/signin" {
		return 0
	}
	return resp.StatusCode
}

// callAPI posts body to u with token (GET when body is ""), and returns
// the status and the decoded answer.
func callAPI(t *testing.T, u, token, body string) (int, map[string]any) {
	t.Helper()
	method := "POST"
	if body == "" {
		method = "GET"
	}
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}
