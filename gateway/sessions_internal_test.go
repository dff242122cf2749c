package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

// A session is not closed while one of its requests is being answered,
// however long that takes, and is closed idle after the last one ends; a
// cancellation reaches only a request of the session's own principal.
func TestMCPSessionIdleCountsFromTheLastAnswer(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	m := newMCPSessions(10, idle)
	if !m.reserve("agent") {
		t.Fatal("no place for a session")
	}
	m.opened("s1", "agent")
	closed := make(chan time.Time, 1)
	m.watch("s1", func() { at := time.Now(); m.ended("s1"); closed <- at })

	d := &dropWriter{ResponseWriter: httptest.NewRecorder(), gone: make(chan struct{})}
	s := m.begin("s1", "agent", "7", d)
	if s == nil {
		t.Fatal("the session's own principal was refused")
	}
	if m.begin("s1", "other", "8", nil) != nil {
		t.Fatal("another principal began a request of the session")
	}
	select {
	case <-closed:
		t.Fatal("the session closed while a request was being answered")
	case <-time.After(4 * idle):
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

	ended := time.Now()
	m.end(s, "7", d)
	select {
	case at := <-closed:
		if at.Sub(ended) < idle {
			t.Fatalf("the session closed %v after its last answer, before idle (%v)", at.Sub(ended), idle)
		}
	case <-time.After(10 * idle):
		t.Fatal("the idle session never closed")
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
