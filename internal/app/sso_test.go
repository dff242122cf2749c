package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"
)

const ssoManifest = `version: 1
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
auth:
  oidc:
    issuer: "ISSUER"
    client_id: "CLIENT"
    client_secret_env: SECRET_ENV
    redirect_url: "http://127.0.0.1:9/ui/oidc/callback"
    scopes: [openid, email, groups]
    roles: {ops: admin, approvers: approver}
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// The callback believes only a flow this browser started: no cookie, a
// forged cookie, another state, or a code used twice are refused before
// anything is asked of the provider; the provider's own refusal is shown.
// A completed flow signs in with the role of the person's groups. (An
// unverified email is refused: auth/oidc's TestMapClaims; mockoidc never
// sends email_verified false.)
func TestSingleSignOnCallback(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	env := "AIRLOCK_TEST_OIDC_SECRET_CALLBACK"
	os.Setenv(env, idp.ClientSecret)
	base := startApp(t, ssoManifest, "ISSUER", idp.Issuer(), "CLIENT", idp.ClientID, "SECRET_ENV", env)

	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	browser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, CheckRedirect: noRedirect}
	}
	get := func(c *http.Client, u string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// start begins a sign-in as user and returns the callback's query the
	// provider sends the browser back with.
	start := func(c *http.Client, user *mockoidc.MockUser) url.Values {
		t.Helper()
		idp.QueueUser(user)
		resp, _ := get(c, base+"/ui/oidc/start")
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), idp.AuthorizationEndpoint()) {
			t.Fatalf("start: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		auth, _ := url.Parse(resp.Header.Get("Location"))
		if auth.Query().Get("code_challenge_method") != "S256" || auth.Query().Get("code_challenge") == "" || auth.Query().Get("nonce") == "" {
			t.Fatalf("the authorization request has no PKCE challenge or nonce: %s", auth)
		}
		resp, _ = get(c, auth.String())
		back, _ := url.Parse(resp.Header.Get("Location"))
		return back.Query()
	}
	callback := func(c *http.Client, q url.Values) (int, string) {
		t.Helper()
		resp, body := get(c, base+"/ui/oidc/callback?"+q.Encode())
		return resp.StatusCode, body
	}
	ana := &mockoidc.MockUser{Subject: "u-ana", Email: "ana@x.example", EmailVerified: true, Groups: []string{"ops"}}

	t.Run("NoFlowCookie", func(t *testing.T) {
		q := start(browser(), ana)
		if st, body := callback(browser(), q); st != http.StatusBadRequest || !strings.Contains(body, "started in another browser") {
			t.Fatalf("%d %s", st, body)
		}
	})
	t.Run("ForgedCookie", func(t *testing.T) {
		c := browser()
		q := start(c, ana)
		u, _ := url.Parse(base + "/ui/oidc/")
		for _, ck := range c.Jar.Cookies(u) {
			if ck.Name == "airlock_oidc" {
				parts := strings.Split(ck.Value, ".")
				parts[3] = strings.Repeat("0", len(parts[3]))
				c.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: strings.Join(parts, "."), Path: "/ui/oidc/"}})
			}
		}
		if st, _ := callback(c, q); st != http.StatusBadRequest {
			t.Fatalf("forged flow cookie: %d", st)
		}
	})
	t.Run("OtherState", func(t *testing.T) {
		c := browser()
		q := start(c, ana)
		q.Set("state", "someone-elses")
		if st, _ := callback(c, q); st != http.StatusBadRequest {
			t.Fatalf("another state: %d", st)
		}
	})
	t.Run("ProviderRefused", func(t *testing.T) {
		c := browser()
		start(c, ana)
		st, body := callback(c, url.Values{"error": {"access_denied"}, "error_description": {"the user said no"}})
		if st != http.StatusUnauthorized || !strings.Contains(body, "the user said no") {
			t.Fatalf("%d %s", st, body)
		}
	})
	t.Run("SignedInOnceAsAdmin", func(t *testing.T) {
		c := browser()
		q := start(c, ana)
		st, body := callback(c, q)
		if st != http.StatusOK || !strings.Contains(body, `http-equiv="refresh" content="0;url=/ui/"`) {
			t.Fatalf("callback: %d %s", st, body)
		}
		resp, page := get(c, base+"/ui/")
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, "ana@x.example (admin)") {
			t.Fatalf("the queue after signing in: %d %s", resp.StatusCode, page)
		}
		// The flow was used: the same answer again is refused.
		if st, _ := callback(c, q); st != http.StatusBadRequest {
			t.Fatalf("the same callback twice: %d", st)
		}
	})
	t.Run("ASecondSignInEndsTheFirst", func(t *testing.T) {
		c := browser()
		sessionCookie := func() string {
			u, _ := url.Parse(base + "/ui/")
			for _, ck := range c.Jar.Cookies(u) {
				if ck.Name == "airlock_session" {
					return ck.Value
				}
			}
			return ""
		}
		if st, _ := callback(c, start(c, ana)); st != http.StatusOK {
			t.Fatalf("first sign-in: %d", st)
		}
		first := sessionCookie()
		if st, _ := callback(c, start(c, ana)); st != http.StatusOK {
			t.Fatalf("second sign-in: %d", st)
		}
		if second := sessionCookie(); second == "" || second == first {
			t.Fatalf("the second sign-in kept the session cookie %q", second)
		}
		req, _ := http.NewRequest("GET", base+"/ui/", nil)
		req.AddCookie(&http.Cookie{Name: "airlock_session", Value: first})
		resp, err := (&http.Client{CheckRedirect: noRedirect}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("the first session after the second sign-in: %d, want a redirect to sign in", resp.StatusCode)
		}
	})
}
