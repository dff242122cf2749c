package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/gateway"
)

const signinManifest = `version: 1
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
auth:
  trusted_proxies: [127.0.0.1]
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
    - {name: alice, role: approver, sha256: "PHASH"}
`

// The sign-in form: its pre-session token must be one the server made (a
// cookie the client made up is refused), a link's ?msg= text is never
// shown, and failed sign-ins from one address are throttled (429).
func TestSignInIsNotAGuessingGame(t *testing.T) {
	t.Parallel()
	ph := gateway.HashToken(approverToken)
	base := startApp(t, signinManifest, "PHASH", fmt.Sprintf("%x", ph[:]))
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) string {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	post := func(form url.Values, cookie string) (int, string) {
		req, _ := http.NewRequest("POST", base+"/ui/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		cl := c
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
			cl = &http.Client{CheckRedirect: c.CheckRedirect}
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("a link's message is not shown", func(t *testing.T) {
		if page := get("/ui/signin?msg=Your+token+expired%2C+paste+it+at+evil.example"); strings.Contains(page, "evil.example") {
			t.Fatal("the sign-in page shows the link's text")
		}
	})
	t.Run("a pre-session token the client made up is refused", func(t *testing.T) {
		code, page := post(url.Values{"csrf": {"aaaa"}, "token": {agentToken}}, "airlock_pre=aaaa")
		if code != http.StatusForbidden || !strings.Contains(page, "expired") {
			t.Fatalf("forged pre-session cookie: %d", code)
		}
	})
	t.Run("behind a proxy that says https, the session cookie is Secure, HttpOnly and Strict", func(t *testing.T) {
		jar2, _ := cookiejar.New(nil)
		c2 := &http.Client{Jar: jar2, CheckRedirect: c.CheckRedirect}
		req, _ := http.NewRequest("GET", base+"/ui/signin", nil)
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Forwarded-For", "198.51.100.7")
		resp, err := c2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(page))
		if m == nil || !strings.Contains(resp.Header.Get("Set-Cookie"), "Secure") {
			t.Fatalf("pre-sign-in cookie %q", resp.Header.Get("Set-Cookie"))
		}
		u, _ := url.Parse(base + "/ui/")
		var pre string
		for _, ck := range jar2.Cookies(u) {
			if ck.Name == "airlock_pre" {
				pre = ck.Value
			}
		}
		form := url.Values{"csrf": {m[1]}, "token": {approverToken}}
		req, _ = http.NewRequest("POST", base+"/ui/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("Cookie", "airlock_pre="+pre)
		resp, err = (&http.Client{CheckRedirect: c.CheckRedirect}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		set := resp.Header.Get("Set-Cookie")
		if resp.StatusCode != http.StatusSeeOther || !strings.Contains(set, "Secure") || !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") {
			t.Fatalf("sign-in: %d, cookie %q", resp.StatusCode, set)
		}
	})
	t.Run("failed sign-ins are throttled", func(t *testing.T) {
		page := get("/ui/signin")
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no csrf field in the sign-in page")
		}
		statuses := []int{}
		for range 7 {
			code, _ := post(url.Values{"csrf": {m[1]}, "token": {"a-guess"}}, "")
			statuses = append(statuses, code)
		}
		want := []int{401, 401, 401, 401, 401, 401, 429}
		for i := range want {
			if statuses[i] != want[i] {
				t.Fatalf("statuses %v, want %v", statuses, want)
			}
		}
	})
}
