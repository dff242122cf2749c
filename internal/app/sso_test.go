package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
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

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// ssoFixture drives sign-ins at base through idp, as a browser without
// JavaScript would.
type ssoFixture struct {
	idp  *mockoidc.MockOIDC
	base string
}

func (f *ssoFixture) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: noRedirect}
}

func (f *ssoFixture) get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
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
func (f *ssoFixture) start(t *testing.T, c *http.Client, user *mockoidc.MockUser) url.Values {
	t.Helper()
	f.idp.QueueUser(user)
	resp, _ := f.get(t, c, f.base+"/ui/oidc/start")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), f.idp.AuthorizationEndpoint()) {
		t.Fatalf("start: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	auth, _ := url.Parse(resp.Header.Get("Location"))
	if auth.Query().Get("code_challenge_method") != "S256" || auth.Query().Get("code_challenge") == "" || auth.Query().Get("nonce") == "" {
		t.Fatalf("the authorization request has no PKCE challenge or nonce: %s", auth)
	}
	resp, _ = f.get(t, c, auth.String())
	back, _ := url.Parse(resp.Header.Get("Location"))
	return back.Query()
}

func (f *ssoFixture) callback(t *testing.T, c *http.Client, q url.Values) (int, string) {
	t.Helper()
	resp, body := f.get(t, c, f.base+"/ui/oidc/callback?"+q.Encode())
	return resp.StatusCode, body
}

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

	f := &ssoFixture{idp: idp, base: base}
	browser := f.browser
	get := func(c *http.Client, u string) (*http.Response, string) { t.Helper(); return f.get(t, c, u) }
	start := func(c *http.Client, user *mockoidc.MockUser) url.Values { t.Helper(); return f.start(t, c, user) }
	callback := func(c *http.Client, q url.Values) (int, string) { t.Helper(); return f.callback(t, c, q) }
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
				parts[len(parts)-1] = strings.Repeat("0", len(parts[len(parts)-1]))
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
		if st != http.StatusUnauthorized || !strings.Contains(body, "did not sign you in (access_denied)") || strings.Contains(body, "the user said no") {
			t.Fatalf("%d %s", st, body)
		}
	})
	// A link's words never reach the alert box: the description is logged,
	// and an error code no standard defines is not named.
	t.Run("ALinksWordsAreNotShown", func(t *testing.T) {
		st, body := callback(browser(), url.Values{"error": {"Airlock moved: approve at https://evil.example"}, "error_description": {"call 555-0100"}})
		if st != http.StatusUnauthorized || strings.Contains(body, "evil.example") || strings.Contains(body, "555-0100") || !strings.Contains(body, "did not sign you in.") {
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

// A provider that puts the groups in its userinfo answer only (not in the
// ID token): the role comes from there.
func TestSingleSignOnReadsGroupsFromUserinfo(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The token endpoint's ID token is signed again without its groups.
	_ = idp.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, mockoidc.TokenEndpoint) {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var body map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if raw, ok := body["id_token"].(string); ok {
				payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(raw, ".")[1])
				var claims gojwt.MapClaims
				_ = json.Unmarshal(payload, &claims)
				delete(claims, "groups")
				body["id_token"], _ = idp.Keypair.SignJWT(claims)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.Code)
			_ = json.NewEncoder(w).Encode(body)
		})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	env := "AIRLOCK_TEST_OIDC_SECRET_USERINFO"
	os.Setenv(env, idp.ClientSecret)
	f := &ssoFixture{idp: idp, base: startApp(t, ssoManifest, "ISSUER", idp.Issuer(), "CLIENT", idp.ClientID, "SECRET_ENV", env)}
	c := f.browser()
	st, body := f.callback(t, c, f.start(t, c, &mockoidc.MockUser{Subject: "u-kim", Email: "kim@x.example", EmailVerified: true, Groups: []string{"approvers"}}))
	if st != http.StatusOK {
		t.Fatalf("callback: %d %s", st, body)
	}
	if resp, page := f.get(t, c, f.base+"/ui/"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "kim@x.example (approver)") {
		t.Fatalf("the queue: %d %s", resp.StatusCode, page)
	}
}

// A secret the manifest names the variable of must be set at start: the
// error names the field and the variable.
func TestUnsetSecretsStopTheStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, manifest, want string }{
		{"oidc", strings.NewReplacer("ISSUER", "https://idp.example.com", "CLIENT", "airlock", "SECRET_ENV", "AIRLOCK_TEST_UNSET_OIDC").Replace(ssoManifest),
			"auth.oidc.client_secret_env: environment variable AIRLOCK_TEST_UNSET_OIDC is not set"},
		{"notify", "version: 1\nnotify: {webhook: \"https://hooks.example.com/x\", secret_env: AIRLOCK_TEST_UNSET_NOTIFY}\ntools:\n  - {name: lookup, kind: read, input_schema: {type: object}}\n",
			"notify.secret_env: environment variable AIRLOCK_TEST_UNSET_NOTIFY is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := manifest.Parse([]byte(strings.ReplaceAll(tc.manifest, "HASH", strings.Repeat("0", 64))), "m.yaml")
			if err != nil {
				t.Fatal(err)
			}
			_, err = app.New(context.Background(), &app.Config{Manifest: m, DSN: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Migrate: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
