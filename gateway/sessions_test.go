package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
)

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// An MCP session belongs to the token that opened it; a token holds at
// most limits.mcp_sessions_per_token, its least recently used idle one
// closed to make room for a new one; sessions idle for
// limits.mcp_session_idle are closed and their places freed.
func TestMCPSessionsAreBoundCappedAndExpire(t *testing.T) {
	t.Parallel()
	g := frontGatewayWith(t, testManifest, frontFuncs(), func(c *gateway.Config) {
		c.MCPSessionsPerToken, c.MCPSessionIdle = 2, 500*time.Millisecond
		c.Tokens = []gateway.Token{
			{Name: "agent-a", Role: airlock.RoleAgent, SHA256: gateway.HashToken("token-a")},
			{Name: "agent-b", Role: airlock.RoleAgent, SHA256: gateway.HashToken("token-b")},
		}
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.CloseSessions)
	ctx := context.Background()
	connect := func(token string) (*mcp.ClientSession, error) {
		s, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "v1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: srv.URL + "/mcp", MaxRetries: -1, DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: bearerTransport(token)}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() }) // its reader would outlive the test
		}
		return s, err
	}
	// ping with a session id and a token, as a client that found the id would.
	ping := func(token, session string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}

	a1, err := connect("token-a")
	if err != nil {
		t.Fatal(err)
	}
	var a2 *mcp.ClientSession // opened at the cap
	t.Run("another token cannot use a session", func(t *testing.T) {
		if code, body := ping("token-b", a1.ID()); code != http.StatusForbidden || !strings.Contains(body, "another token") {
			t.Fatalf("token b with token a's session: %d %s", code, body)
		}
		if code, body := ping("token-a", a1.ID()); code != http.StatusOK {
			t.Fatalf("token a with its own session: %d %s", code, body)
		}
	})
	t.Run("at its cap a token's least recently used idle session makes room", func(t *testing.T) {
		var err error
		a2, err = connect("token-a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a2.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		waitAnswered(t, g, "agent-a", 0)
		a3, err := connect("token-a") // a1 is the least recently used
		if err != nil {
			t.Fatalf("a third session for token a: %v, want the least recently used one closed instead", err)
		}
		if code, _ := ping("token-a", a1.ID()); code != http.StatusNotFound {
			t.Fatalf("the least recently used session answers %d, want 404", code)
		}
		if code, _ := ping("token-a", a2.ID()); code != http.StatusOK {
			t.Fatalf("the session used since answers %d, want 200", code)
		}
		b1, err := connect("token-b")
		if err != nil {
			t.Fatalf("token b is not held to token a's sessions: %v", err)
		}
		b1.Close()
		a3.Close() // DELETE: its place is free again
		deadline := time.Now().Add(5 * time.Second)
		for gateway.MCPSessionsHeld(g, "agent-a") != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("after closing one, token a holds %d sessions, want 1", gateway.MCPSessionsHeld(g, "agent-a"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("idle sessions close and free their places", func(t *testing.T) {
		id := a2.ID()
		time.Sleep(1200 * time.Millisecond)
		if code, _ := ping("token-a", id); code != http.StatusNotFound {
			t.Fatalf("a session idle past the limit answered %d, want 404", code)
		}
		var open []*mcp.ClientSession
		for range 2 {
			s, err := connect("token-a")
			if err != nil {
				t.Fatalf("the idle sessions' places were not freed: %v", err)
			}
			open = append(open, s)
		}
		for _, s := range open {
			s.Close()
		}
	})
}

// The authentication scheme is case-insensitive (RFC 9110).
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	url := setupFront(t)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, _ := http.NewRequest("POST", url+"/v1/calls", strings.NewReader(`{"tool":"lookup","args":{}}`))
		req.Header.Set("Authorization", scheme+" "+frontToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want 200", scheme, resp.StatusCode)
		}
	}
}
