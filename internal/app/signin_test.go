package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

const signinManifest = `version: 1
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// The sign-in form: its pre-session token must be one the server made (a
// cookie the client made up is refused), a link's ?msg= text is never
// shown, and failed sign-ins from one address are throttled (429).
func TestSignInIsNotAGuessingGame(t *testing.T) {
	t.Parallel()
	base := startApp(t, signinManifest)
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
