package gateway

import (
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
	m.watch("s1", func() { closed <- time.Now(); m.ended("s1") })

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
