package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/upstream"
)

// noGoodbye is a client's HTTP transport that never sends DELETE, as TS
// SDK 1.x, LangChain, the Inspector CLI and mcp-remote close: the client
// side closes, the server is never told.
type noGoodbye struct {
	token   string
	dropped *atomic.Int64
}

func (n noGoodbye) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete {
		n.dropped.Add(1)
		return &http.Response{StatusCode: http.StatusNoContent, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
	}
	return bearerTransport(n.token).RoundTrip(r)
}

// holdingGateway serves testManifest with at most perToken sessions per
// token, on a fake clock that never moves (no session is ever idle long
// enough to close), and a lookup that, for record "hold-N", signals held
// and waits for release (called at cleanup too, so that a failed test
// does not hang on the calls it holds).
func holdingGateway(t *testing.T, perToken int) (url string, g *gateway.Gateway, held chan string, release func()) {
	t.Helper()
	held = make(chan string, 16)
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	funcs := frontFuncs()
	funcs["lookup"] = upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		var in struct {
			RecordID string `json:"record_id"`
		}
		_ = json.Unmarshal(req.Args, &in)
		if strings.HasPrefix(in.RecordID, "hold") {
			held <- in.RecordID
			<-released
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"found":true}`)}
	})
	g = frontGatewayWith(t, testManifest, funcs, func(c *gateway.Config) {
		c.MCPSessionsPerToken = perToken
		c.Clock = clockwork.NewFakeClock()
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.CloseSessions)
	t.Cleanup(release)
	return srv.URL, g, held, release
}

// connectNoGoodbye opens a session with the go-sdk client on a session
// revision, through a transport that never says goodbye. The client's side
// is closed when the test ends (its DELETE dropped like the others): its
// reader would outlive the test.
func connectNoGoodbye(t *testing.T, url string, dropped *atomic.Int64) (*mcp.ClientSession, error) {
	s, err := mcp.NewClient(&mcp.Implementation{Name: "no-goodbye", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: noGoodbye{token: frontToken, dropped: dropped}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

// pingSession pings with a session's id, as its client would.
func pingSession(t *testing.T, url, session string) int {
	t.Helper()
	status, _, _, _ := rawPost(t, url, `{"jsonrpc":"2.0","id":9,"method":"ping"}`,
		"Mcp-Session-Id", session, "Mcp-Protocol-Version", "2025-11-25")
	return status
}

// 200 connections of a client that never sends DELETE, at the default cap
// of 100 sessions per token and with no session ever idle long enough to
// close: every one connects, lists and calls a tool. At the cap, the
// token's least recently used idle session is closed to make room; a
// session with a request in flight is never closed, and the newest
// sessions live on (decision 77).
func TestMCPSessionsWithoutGoodbyeDoNotLockTheTokenOut(t *testing.T) {
	t.Parallel()
	url, g, held, release := holdingGateway(t, gateway.DefaultMCPSessionsPerToken)
	var dropped atomic.Int64
	ctx := context.Background()

	// The first session has a request in flight throughout.
	busy, err := connectNoGoodbye(t, url, &dropped)
	if err != nil {
		t.Fatal(err)
	}
	busyDone := make(chan error, 1)
	go func() {
		_, err := busy.CallTool(ctx, &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"record_id": "hold-1"}})
		busyDone <- err
	}()
	<-held

	ids := make([]string, 0, 200)
	for i := range 200 {
		s, err := connectNoGoodbye(t, url, &dropped)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Fatalf("connection %d: tools/list: %v", i+1, err)
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"record_id": fmt.Sprint(i)}})
		if err != nil || res.IsError {
			t.Fatalf("connection %d: tools/call: %v %+v", i+1, err, res)
		}
		ids = append(ids, s.ID())
		if err := s.Close(); err != nil {
			t.Fatalf("connection %d: close: %v", i+1, err)
		}
	}
	if n := dropped.Load(); n != 200 {
		t.Fatalf("%d DELETEs were kept from the server, want 200 (one per connection)", n)
	}
	if n := gateway.MCPSessionsHeld(g, "agent"); n != gateway.DefaultMCPSessionsPerToken {
		t.Errorf("the token holds %d sessions, want its cap %d", n, gateway.DefaultMCPSessionsPerToken)
	}
	// Open: the busy one and the 99 newest (102nd to 200th); the 101
	// older ones were closed, least recently used first.
	for i, want := range map[int]int{0: 404, 100: 404, 101: 200, 199: 200} {
		if got := pingSession(t, url, ids[i]); got != want {
			t.Errorf("connection %d's session answers %d, want %d", i+1, got, want)
		}
	}
	if got := pingSession(t, url, busy.ID()); got != 200 {
		t.Errorf("the session with a request in flight answers %d, want 200: it was closed", got)
	}
	release()
	if err := <-busyDone; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	_ = busy.Close()
}

// When every session of a token at its cap is answering a request, none
// may be closed: the next initialize gets 429 with a message saying why,
// and once they have answered, the least recently used makes room.
func TestMCPSessionsAllBusyRefuseTheNext(t *testing.T) {
	t.Parallel()
	url, g, held, release := holdingGateway(t, 2)
	var dropped atomic.Int64
	ctx := context.Background()
	done := make(chan error, 2)
	var sessions []*mcp.ClientSession
	for i := range 2 {
		s, err := connectNoGoodbye(t, url, &dropped)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
		go func() {
			_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"record_id": fmt.Sprintf("hold-%d", i)}})
			done <- err
		}()
		<-held
	}
	status, _, out, _ := rawPost(t, url,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		"Mcp-Protocol-Version", "2025-11-25")
	e, _ := out["error"].(map[string]any)
	if msg, _ := e["message"].(string); status != http.StatusTooManyRequests || e["code"] != float64(-32600) ||
		!strings.Contains(msg, "limits.mcp_sessions_per_token") || !strings.Contains(msg, "answering a request") {
		t.Fatalf("an initialize with every session busy: HTTP %d %v, want 429 saying why", status, out)
	}
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitAnswered(t, g, "agent", 0)
	// The second is used again: the first is now the least recently used.
	if got := pingSession(t, url, sessions[1].ID()); got != http.StatusOK {
		t.Fatalf("the second session answers %d, want 200", got)
	}
	waitAnswered(t, g, "agent", 0)
	s, err := connectNoGoodbye(t, url, &dropped)
	if err != nil {
		t.Fatalf("once the calls answered, a new session: %v", err)
	}
	if got := pingSession(t, url, sessions[0].ID()); got != http.StatusNotFound {
		t.Errorf("the least recently used session answers %d, want 404 (closed to make room)", got)
	}
	if got := pingSession(t, url, sessions[1].ID()); got != http.StatusOK {
		t.Errorf("the other session answers %d, want 200", got)
	}
	for _, s := range append(sessions, s) {
		_ = s.Close()
	}
}

// waitAnswered waits until the gateway answers no more than busy requests
// of principal's sessions: a client has its answer a moment before the
// server is done with the request, and a session is idle (one that may be
// closed to make room) only then.
func waitAnswered(t *testing.T, g *gateway.Gateway, principal string, busy int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gateway.MCPSessionsBusy(g, principal) > busy {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still answers %d requests of %s's sessions, want %d", gateway.MCPSessionsBusy(g, principal), principal, busy)
		}
		time.Sleep(time.Millisecond)
	}
}
