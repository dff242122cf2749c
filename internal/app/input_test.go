package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const inputManifest = `version: 1
upstreams:
  desk: {mcp: {url: "DESK"}}
tools:
  - name: ask_name
    kind: read
    input_schema: {type: object}
    upstream: {name: desk, tool: ask_name}
  - name: greet
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    natural_key: [{field: id}]
    window: forever
    upstream: {name: desk, tool: ask_name}
    answers: {undo: "yes", approver: "no one", on_repeat: "one greeting per id"}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// askServer's tool asks the client for a name (MCP multi round-trip: an
// input-required result) and greets it when the retry brings the answer.
func askServer(t *testing.T, asked *atomic.Int64) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "desk", Version: "v1"}, nil)
	s.AddTool(&mcp.Tool{Name: "ask_name", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok && r.Action == "accept" {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Hello, %v!", r.Content["name"])}}}, nil
		}
		asked.Add(1)
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"name": &mcp.ElicitParams{Message: "What is your name?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []any{"name"}}},
		}}, nil
	})
	// Stateless, so that airlock's client and this server agree on
	// 2026-07-28 (server/discover), where input requests travel in results;
	// a stateful SDK server settles on 2025-11-25 and asks the client
	// directly, which airlock does not relay (docs/gateway.md).
	srv := upstreamServer(t, s, &mcp.StreamableHTTPOptions{Stateless: true})
	return srv.URL
}

// An upstream's request for input during a read reaches the agent's client
// (its elicitation handler answers), and the read completes with the
// answer: for an agent on 2026-07-28 (multi round-trip through airlock) and
// on 2025-11-25 (the SDK asks the agent directly). A write that asks for
// input fails clearly instead of storing a question as its result.
func TestMCPUpstreamInputRequestsReachTheAgent(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	url := startApp(t, inputManifest, "DESK", askServer(t, &asked))
	var elicited atomic.Int64
	opts := func() *mcp.ClientOptions {
		return &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				elicited.Add(1)
				if req.Params.Message != "What is your name?" {
					return nil, fmt.Errorf("elicited %q", req.Params.Message)
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
			},
		}
	}
	ctx := context.Background()
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "latest"
		}
		t.Run("ARead/"+name, func(t *testing.T) {
			before := elicited.Load()
			s := connectAgent(t, url, opts(), version)
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "ask_name", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("%v %+v", err, res)
			}
			if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "Hello, Ada!" {
				t.Fatalf("content %+v, want the greeting", res.Content)
			}
			if elicited.Load() != before+1 {
				t.Errorf("the agent was asked %d times, want once", elicited.Load()-before)
			}
		})
	}

	t.Run("AWriteThatAsksFails", func(t *testing.T) {
		s := connectAgent(t, url, opts(), "")
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"id": "g1"}})
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, "asked for input") {
			t.Fatalf("result %+v (%s): want a failure that says the upstream asked for input", res, text)
		}
	})
}
