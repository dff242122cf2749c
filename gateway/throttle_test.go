package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
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

func TestProxiesAreBelievedOnlyWhenTrusted(t *testing.T) {
	t.Parallel()
	ps := gateway.Proxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	for _, tc := range []struct {
		name, remote, xff, proto string
		addr                     string
		secure                   bool
	}{
		{"direct client", "203.0.113.5:4000", "198.51.100.1", "https", "203.0.113.5", false},
		{"through a trusted proxy", "10.1.2.3:4000", "198.51.100.1", "https", "198.51.100.1", true},
		{"a spoofed hop left of the real client", "10.1.2.3:4000", "6.6.6.6, 198.51.100.1", "http", "198.51.100.1", false},
		{"two trusted proxies", "127.0.0.1:4000", "198.51.100.1, 10.9.9.9", "HTTPS", "198.51.100.1", true},
		{"a trusted proxy without the header", "10.1.2.3:4000", "", "", "10.1.2.3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if tc.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			if got := ps.ClientAddr(r); got != tc.addr {
				t.Errorf("ClientAddr %q, want %q", got, tc.addr)
			}
			if got := ps.Secure(r); got != tc.secure {
				t.Errorf("Secure %v, want %v", got, tc.secure)
			}
		})
	}
}
