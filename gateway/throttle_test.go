package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock/gateway"
)

// Wrong bearer tokens from one address: five are answered 401, then the
// address waits 1 s, 2 s, 4 s … (429 with Retry-After, even for a right
// token, counted). A success forgets nothing — an agent putting its own
// token between its guesses gets no more of them — and the failures are
// forgotten only after 15 minutes without one. A missing token is no
// guess and costs nothing.
func TestWrongTokensAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Unix(1e9, 0))
	var mu sync.Mutex
	failed, refused := 0, 0
	th := gateway.NewThrottle(&gateway.ThrottleConfig{Clock: clock,
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
	clock.Advance(1100 * time.Millisecond)
	if code, _ := call("guess"); code != http.StatusUnauthorized {
		t.Fatalf("after the wait: %d", code)
	}
	if code, retry := call("guess"); code != http.StatusTooManyRequests || retry != "2" {
		t.Fatalf("the next wait doubles: %d Retry-After %q", code, retry)
	}
	clock.Advance(2100 * time.Millisecond)
	if code, _ := call(frontToken); code != http.StatusOK {
		t.Fatalf("the right token after the wait: %d", code)
	}
	// The success forgot nothing: the next guess waits twice as long again.
	if code, _ := call("guess"); code != http.StatusUnauthorized {
		t.Fatalf("a guess after the wait: %d", code)
	}
	if code, retry := call(frontToken); code != http.StatusTooManyRequests || retry != "4" {
		t.Fatalf("after a success and one more guess: %d Retry-After %q, want 429 and 4", code, retry)
	}
	clock.Advance(15*time.Minute + time.Second)
	for range 5 { // forgotten after a quiet quarter hour: five free failures again
		if code, _ := call("guess"); code != http.StatusUnauthorized {
			t.Fatalf("after a quiet quarter hour: %d", code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != 13 || refused != 3 {
		t.Fatalf("counted %d failures and %d refusals, want 13 and 3", failed, refused)
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

// An agent that puts its own token between its guesses, every five, gets
// no more than the five free ones before the address waits (issue 45: 30
// guesses went through without a 429 when a success forgot the failures).
func TestAnOwnTokenBetweenGuessesDoesNotResetThem(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Unix(1e9, 0))
	g := frontGatewayWith(t, testManifest, frontFuncs(), func(c *gateway.Config) {
		c.Throttle = gateway.NewThrottle(&gateway.ThrottleConfig{Clock: clock})
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	call := func(token string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/calls", strings.NewReader(`{"tool":"lookup","args":{}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	answered := 0
	for i := range 30 {
		if i%5 == 0 {
			call(frontToken)
		}
		if call("guess") == http.StatusUnauthorized {
			answered++
		}
		clock.Advance(100 * time.Millisecond)
	}
	// Five free, the sixth closes the address for 1 s, the seventh (after
	// it) for 2 s: the three seconds the guesses take allow no more.
	if answered > 7 {
		t.Fatalf("%d of 30 interleaved guesses were answered; want at most 7", answered)
	}
}

// An IPv6 host holds a /64: its addresses share one count of failures.
func TestThrottleCountsAnIPv6SlashSixtyFourAsOneAddress(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Unix(1e9, 0))
	th := gateway.NewThrottle(&gateway.ThrottleConfig{Clock: clock})
	for i := range 6 {
		th.Fail(fmt.Sprintf("2001:db8:1:2::%x", i+1), "bearer")
	}
	if th.Wait("2001:db8:1:2::ffff", "bearer") == 0 {
		t.Fatal("six failures from one /64: another of its addresses may try at once")
	}
	if th.Wait("2001:db8:1:3::1", "bearer") != 0 || th.Wait("192.0.2.1", "bearer") != 0 {
		t.Fatal("another /64 or an IPv4 address waits for them")
	}
}
