package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A session is not closed while one of its requests is being answered,
// however long that takes, and is closed idle after the last one ends; a
// cancellation reaches only a request of the session's own principal.
func TestMCPSessionIdleCountsFromTheLastAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const idle = time.Minute
	clock := clockwork.NewFakeClock()
	m := newMCPSessions(10, idle, clock)
	if ok, _, _ := m.reserve("agent"); !ok {
		t.Fatal("no place for a session")
	}
	m.opened("s1", "agent")
	closed := make(chan time.Time, 1)
	m.watch("s1", func() { at := clock.Now(); m.ended("s1"); closed <- at })
	// fire advances the clock and waits until the idle timer has fired and
	// either closed the session (its time is returned) or set itself again.
	fire := func(d time.Duration) (time.Time, bool) {
		t.Helper()
		clock.Advance(d)
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		again := make(chan error, 1)
		go func() { again <- clock.BlockUntilContext(wait, 1) }()
		select {
		case at := <-closed:
			return at, true
		case err := <-again:
			if err != nil {
				t.Fatalf("the idle timer neither closed the session nor set itself again: %v", err)
			}
			return time.Time{}, false
		}
	}

	d := &dropWriter{ResponseWriter: httptest.NewRecorder(), gone: make(chan struct{})}
	s := m.begin("s1", "agent", "7", d)
	if s == nil {
		t.Fatal("the session's own principal was refused")
	}
	if m.begin("s1", "other", "8", nil) != nil {
		t.Fatal("another principal began a request of the session")
	}
	// Four idle periods pass while the request is being answered.
	for range 4 {
		if _, shut := fire(idle); shut {
			t.Fatal("the session closed while a request was being answered")
		}
	}

	m.cancel("s1", "other", "7")
	if d.dropped.Load() {
		t.Fatal("another principal cancelled the session's request")
	}
	m.cancel("s1", "agent", "7")
	select {
	case <-d.gone:
	default:
		t.Fatal("the cancelled request's wait did not end")
	}
	m.cancel("s1", "agent", "7") // twice is once

	// The answer ends half an idle period before the timer fires: the
	// session lives on until a whole idle period after the answer.
	clock.Advance(idle / 2)
	ended := clock.Now()
	m.end(s, "7", d)
	if at, shut := fire(idle / 2); shut {
		t.Fatalf("the session closed %v after its last answer, before idle (%v)", at.Sub(ended), idle)
	}
	at, shut := fire(idle / 2)
	if !shut {
		t.Fatal("the idle session did not close a whole idle period after its last answer")
	}
	if at.Sub(ended) != idle {
		t.Fatalf("the session closed %v after its last answer, want %v", at.Sub(ended), idle)
	}
	if m.begin("s1", "agent", "9", nil) != nil {
		t.Fatal("a closed session began a request")
	}
}

// jsonString reads every JSON string as encoding/json does, by its
// shortcut (no escapes, valid UTF-8) or through the decoder, and refuses
// what is not a string (null reads as "", as the decoder reads it).
func TestJSONStringReadsAsTheDecoder(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`"tools/call"`, `""`, `"a\"b"`, `"\u00e9t\u00e9"`, "\"caf\xc3\xa9\"", "\"bad \xff byte\"", `"\ud800"`, `1`, `null`, `{"a":1}`, `["x"]`} {
		var want string
		wantOK := json.Unmarshal([]byte(raw), &want) == nil
		got, ok := jsonString(json.RawMessage(raw))
		if ok != wantOK || got != want {
			t.Errorf("jsonString(%q) = %q, %v; encoding/json reads %q, %v", raw, got, ok, want, wantOK)
		}
	}
}

// At its cap, a token's least recently used idle session gives its place
// to the next; a session still being opened (its client has not had its
// id) or answering a request is never taken, and the closed session's end
// does not free a place twice.
func TestMCPSessionEvictionTakesOnlyIdleOpenSessions(t *testing.T) {
	t.Parallel()
	m := newMCPSessions(2, time.Minute, clockwork.NewFakeClock())
	closed := map[string]int{}
	open := func(id string) {
		t.Helper()
		ok, evicted, close := m.reserve("agent")
		if !ok || evicted != "" || close != nil {
			t.Fatalf("%s: reserve %v %q, want a free place", id, ok, evicted)
		}
		m.opened(id, "agent")
	}
	open("opening") // never watched: still being opened
	open("idle")
	m.watch("idle", func() { closed["idle"]++ })

	ok, evicted, close := m.reserve("agent")
	if !ok || evicted != "idle" || close == nil {
		t.Fatalf("at the cap: reserve %v %q, want the idle session's place", ok, evicted)
	}
	close()
	m.opened("new", "agent")
	m.watch("new", func() { closed["new"]++ })
	m.ended("idle") // its SDK session ends after the close
	if n := m.held("agent"); n != 2 || closed["idle"] != 1 {
		t.Fatalf("holds %d sessions (closed %v), want 2: the evicted one's end freed a place twice", n, closed)
	}
	if s := m.begin("new", "agent", "1", nil); s == nil {
		t.Fatal("the new session's request was refused")
	} else if ok, evicted, _ := m.reserve("agent"); ok {
		t.Fatalf("reserve took %q: one session is opening and the other answering a request", evicted)
	} else {
		m.end(s, "1", nil)
	}
	if ok, evicted, _ := m.reserve("agent"); !ok || evicted != "new" {
		t.Fatalf("after its request ended: reserve %v %q, want the new session's place", ok, evicted)
	}
	if m.begin("idle", "agent", "2", nil) != nil || m.ownerOf("new") != "" {
		t.Fatal("an evicted session is still known")
	}
}

// A session closed to make room is refused by airlock (404, to any token)
// for the idle time: the SDK serves its id a moment after it is closed,
// and then to any token, since airlock no longer knows whose it was.
func TestAnEvictedSessionIsRefusedUntilItEnds(t *testing.T) {
	t.Parallel()
	g := &Gateway{sessions: newMCPSessions(1, time.Hour, clockwork.NewFakeClock())}
	m := g.sessions
	if ok, _, _ := m.reserve("agent"); !ok {
		t.Fatal("no place for a session")
	}
	m.opened("s1", "agent")
	closed := false
	m.watch("s1", func() { closed = true })
	ok, evicted, closeIt := m.reserve("agent")
	if !ok || evicted != "s1" || closeIt == nil {
		t.Fatalf("reserve at the cap: %v %q; want s1 evicted", ok, evicted)
	}
	closeIt()
	served := false
	for _, principal := range []string{"agent", "another"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/mcp", nil)
		req.Header.Set("Mcp-Session-Id", "s1")
		g.guardSession(rec, req, principal, "ping", json.RawMessage(`1`), func(http.ResponseWriter) { served = true })
		if rec.Code != http.StatusNotFound || served {
			t.Fatalf("%s with the evicted session: %d (served %v); want 404 from airlock", principal, rec.Code, served)
		}
	}
	if !closed {
		t.Fatal("the evicted session was not closed")
	}
	m.ended("s1") // the SDK reports its end, and may still serve it a moment
	if !m.wasEvicted("s1") {
		t.Fatal("an evicted session is forgotten as soon as it ends")
	}
}
