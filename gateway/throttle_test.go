package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/gateway"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Wrong bearer tokens from one address: five are answered 401, then the
// address waits 1 s, 2 s, 4 s … (429 with Retry-After, even for a right
// token, counted); a success after the wait forgets it. A missing token is
// no guess and costs nothing.
func TestWrongTokensAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	var mu sync.Mutex
	failed, refused := 0, 0
	th := gateway.NewThrottle(&gateway.ThrottleConfig{Now: clock.Now,
		Failed:  func(string) { mu.Lock(); failed++; mu.Unlock() },
		Refused: func(string) { mu.Lock(); refused++; mu.Unlock() }})
	g := frontGatewayWith(t, testManifest, frontFuncs(), func(c *gateway.Config) { c.Throttle = th })
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	call := func(token string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/calls", strings.NewReader(`{"tool":"lookup","args":{}}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for range 10 {
		if code, _ := call(""); code != http.StatusUnauthorized {
			t.Fatalf("no token: %d", code)
		}
	}
	for i := range 5 {
		if code, _ := call("guess"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, code)
		}
	}
	if code, _ := call("guess"); code != http.StatusUnauthorized { // the sixth closes the address
		t.Fatalf("sixth wrong token: %d", code)
	}
	if code, retry := call(frontToken); code != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("while the address waits: %d Retry-After %q, want 429 and 1", code, retry)
	}
	clock.advance(1100 * time.Millisecond)
	if code, _ := call("guess"); code != http.StatusUnauthorized {
		t.Fatalf("after the wait: %d", code)
	}
	if code, retry := call("guess"); code != http.StatusTooManyRequests || retry != "2" {
		t.Fatalf("the next wait doubles: %d Retry-After %q", code, retry)
	}
	clock.advance(2100 * time.Millisecond)
	if code, _ := call(frontToken); code != http.StatusOK {
		t.Fatalf("the right token after the wait: %d", code)
	}
	for range 5 { // forgotten: five free failures again
		if code, _ := call("guess"); code != http.StatusUnauthorized {
			t.Fatalf("after a success: %d", code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != 12 || refused != 2 {
		t.Fatalf("counted %d failures and %d refusals, want 12 and 2", failed, refused)
	}
}
