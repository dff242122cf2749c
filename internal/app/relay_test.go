package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const relayManifest = `version: 1
upstreams:
  desk: {mcp: {url: "DESK", sessions: per_agent}}
tools:
  - name: ask
    kind: read
    input_schema: {type: object}
    upstream: {name: desk, tool: ask}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// agentEar is what one agent's client heard from the upstream through
// airlock.
type agentEar struct {
	mu   sync.Mutex
	logs []string
}

func (e *agentEar) heard() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.logs)
}

func (e *agentEar) options(answering bool) *mcp.ClientOptions {
	o := &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			e.mu.Lock()
			e.logs = append(e.logs, fmt.Sprint(req.Params.Data))
			e.mu.Unlock()
		},
	}
	if answering {
		o.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"account": "acme"}}, nil
		}
		o.CreateMessageHandler = func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "short"}}, nil
		}
	}
	return o
}

// An upstream with sessions: per_agent reaches the agent that made the
// read: its log messages, and its elicitation and sampling requests, which
// the agent's client answers; an agent whose client cannot answer gets the
// upstream's refusal; no agent hears another's; the upstream session ends
// with the agent's.
func TestMCPUpstreamRelaysLogsSamplingAndElicitationToItsAgent(t *testing.T) {
	t.Parallel()
	desk := mcp.NewServer(&mcp.Implementation{Name: "desk", Version: "v1"}, nil)
	desk.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "desk", Data: "looking up " + req.Session.ID()[:4]})
		er, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Which account?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"account": map[string]any{"type": "string"}}}})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no answer: " + err.Error()}}}, nil
		}
		cr, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "summarize"}}}})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no sample: " + err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("account=%v summary=%v", er.Content["account"], cr.Content.(*mcp.TextContent).Text)}}}, nil
	})
	up := upstreamServer(t, desk, nil)
	url := startApp(t, relayManifest, "DESK", up.URL)
	ctx := context.Background()

	var ear1, ear2 agentEar
	// Relays need a session: the revision before 2026-07-28.
	agent1 := connectAgent(t, url, ear1.options(true), "2025-11-25")
	agent2 := connectAgent(t, url, ear2.options(false), "2025-11-25")
	for _, s := range []*mcp.ClientSession{agent1, agent2} {
		if err := s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
	}
	text := func(res *mcp.CallToolResult) string {
		var parts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		return strings.Join(parts, "\n")
	}

	t.Run("answered by the agent's client", func(t *testing.T) {
		res, err := agent1.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
		if err != nil || res.IsError || text(res) != "account=acme summary=short" {
			t.Fatalf("ask: %v %+v %q", err, res, text(res))
		}
	})
	t.Run("refused for a client that cannot answer", func(t *testing.T) {
		res, err := agent2.CallTool(ctx, &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
		if err != nil || !res.IsError || !strings.Contains(text(res), "no answer") {
			t.Fatalf("ask: %v %+v %q", err, res, text(res))
		}
	})
	t.Run("each agent hears its own upstream session", func(t *testing.T) {
		deadline := time.Now().Add(5 * time.Second)
		for (len(ear1.heard()) < 1 || len(ear2.heard()) < 1) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		h1, h2 := ear1.heard(), ear2.heard()
		if len(h1) != 1 || len(h2) != 1 || h1[0] == h2[0] || !strings.HasPrefix(h1[0], "looking up ") {
			t.Fatalf("agent 1 heard %q, agent 2 heard %q: want one message each, from two upstream sessions", h1, h2)
		}
	})
	t.Run("the upstream session ends with the agent's", func(t *testing.T) {
		count := func() int {
			n := 0
			for range desk.Sessions() {
				n++
			}
			return n
		}
		if n := count(); n != 2 {
			t.Fatalf("upstream sessions: %d, want one per agent", n)
		}
		agent2.Close()
		deadline := time.Now().Add(5 * time.Second)
		for count() != 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := count(); n != 1 {
			t.Fatalf("upstream sessions after agent 2 left: %d, want 1", n)
		}
	})
}
