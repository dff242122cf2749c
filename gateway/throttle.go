package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock/internal/clocks"
)

// Throttle makes guessing tokens slow: per client address, the first few
// failed attempts (a wrong bearer token, a failed sign-in) cost nothing,
// each one after that closes the address for twice as long as the one
// before (1 s, 2 s, 4 s … at most MaxBackoff). A success forgets nothing
// (an agent's own token between its guesses would otherwise wipe them);
// an address's failures are forgotten after Forget without one. While an
// address waits, every attempt from it is refused, a right token too:
// answering it would tell a guesser which guess was right
// (docs/hardening.md, "guessing tokens"). The gateway's bearer tokens and
// the page's sign-in share one.
type Throttle struct {
	free       int
	forget     time.Duration
	maxBackoff time.Duration
	now        func() time.Time
	onFail     func(kind string) // the metric of failures, or nil
	onRefuse   func(kind string) // the metric of refusals, or nil

	mu        sync.Mutex
	byAddr    map[string]*strikes
	lastSweep time.Time // when addresses quiet long enough were last dropped
	// struck is len(byAddr), read without the lock: with no failures
	// anywhere (the usual case) a request takes no lock here.
	struck atomic.Int64
}

type strikes struct {
	fails int
	until time.Time // closed until
	last  time.Time
}

// ThrottleConfig configures NewThrottle; nil means defaults.
type ThrottleConfig struct {
	// Free is how many failures an address may make before it waits.
	// Default 5.
	Free int
	// MaxBackoff caps the wait. Default 5 minutes.
	MaxBackoff time.Duration
	// Forget is how long an address must go without a failure for its
	// failures to be forgotten. Default 15 minutes.
	Forget time.Duration
	// Clock tells the time. Default: the system clock.
	Clock clockwork.Clock
	// Failed and Refused, when set, count failed attempts and attempts
	// refused while an address waits, by kind ("bearer", "signin").
	Failed, Refused func(kind string)
}

// NewThrottle returns a Throttle.
func NewThrottle(cfg *ThrottleConfig) *Throttle {
	if cfg == nil {
		cfg = &ThrottleConfig{}
	}
	t := &Throttle{free: cfg.Free, forget: cfg.Forget, maxBackoff: cfg.MaxBackoff, now: clocks.Or(cfg.Clock).Now, onFail: cfg.Failed, onRefuse: cfg.Refused, byAddr: map[string]*strikes{}}
	if t.free <= 0 {
		t.free = 5
	}
	if t.forget <= 0 {
		t.forget = 15 * time.Minute
	}
	if t.maxBackoff <= 0 {
		t.maxBackoff = 5 * time.Minute
	}
	return t
}

// Proxies are the trusted proxies in front of airlock (the manifest's
// auth.trusted_proxies): only a request that comes from one of them has
// its X-Forwarded-For and X-Forwarded-Proto believed.
type Proxies []netip.Prefix

func (ps Proxies) trusts(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// ClientAddr is the address a request came from: the connection's, or,
// when that is a trusted proxy, the last address in X-Forwarded-For that
// is not one (the client as the nearest untrusted hop says; anything to
// its left the client could have written itself).
func (ps Proxies) ClientAddr(r *http.Request) string {
	addr := remoteHost(r)
	if !ps.trusts(addr) {
		return addr
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		if !ps.trusts(hop) {
			return hop
		}
		addr = hop
	}
	return addr
}

// Secure reports whether the client reached airlock over TLS: directly, or
// through a trusted proxy that says so (X-Forwarded-Proto: https).
func (ps Proxies) Secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return ps.trusts(remoteHost(r)) && strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-Proto"), ",")[0]), "https")
}

// Wait reports how long addr must wait before it may try again (0: it
// may now); a wait is counted as a refusal of kind.
func (t *Throttle) Wait(addr, kind string) time.Duration {
	if t == nil {
		return 0
	}
	if t.struck.Load() == 0 {
		return 0
	}
	addr = throttleKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byAddr[addr]
	if s == nil {
		return 0
	}
	now := t.now()
	if now.Sub(s.last) > t.forget && !now.Before(s.until) {
		// Forgotten: with no address left, requests take no lock here.
		delete(t.byAddr, addr)
		t.struck.Store(int64(len(t.byAddr)))
		return 0
	}
	if wait := s.until.Sub(now); wait > 0 {
		if t.onRefuse != nil {
			t.onRefuse(kind)
		}
		return wait
	}
	return 0
}

// Fail records a failed attempt from addr.
func (t *Throttle) Fail(addr, kind string) {
	if t == nil {
		return
	}
	if t.onFail != nil {
		t.onFail(kind)
	}
	addr = throttleKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.byAddr) > 10_000 && now.Sub(t.lastSweep) > time.Minute {
		// At most once a minute: a sweep reads every address under the lock.
		t.lastSweep = now
		for a, s := range t.byAddr { // forget addresses quiet long enough
			if now.Sub(s.last) > t.forget && !now.Before(s.until) {
				delete(t.byAddr, a)
			}
		}
	}
	s := t.byAddr[addr]
	if s == nil {
		s = &strikes{}
		t.byAddr[addr] = s
	}
	t.struck.Store(int64(len(t.byAddr)))
	if now.Sub(s.last) > t.forget && !now.Before(s.until) {
		s.fails = 0 // quiet long enough: a fresh start
	}
	s.fails++
	s.last = now
	if over := s.fails - t.free; over > 0 {
		backoff := t.maxBackoff
		if over < 30 {
			backoff = min(t.maxBackoff, time.Second<<(over-1))
		}
		s.until = now.Add(backoff)
	}
}

// refuse answers 429 with Retry-After (whole seconds, at least 1).
func refuse(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
}

// throttleKey is what the throttle counts an address under: an IPv4
// address itself, an IPv6 address its /64 — one host holds a /64, and
// would otherwise have five free guesses from each of its addresses.
func throttleKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil || ip.Unmap().Is4() {
		return addr
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}
