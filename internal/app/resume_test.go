package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/gateway"
)

const resumeManifest = `version: 1
upstreams:
  slow: {mcp: {url: "SLOW"}}
tools:
  - name: file_report
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    natural_key: [{field: id}]
    window: forever
    upstream: {name: slow, tool: file_report}
    answers: {undo: "no", approver: "no one", on_repeat: "one report per id"}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// An MCP upstream that closes the call's stream before it answers (as
// 2025-11-25 allows, with an event store to resume from): the write runs
// once, its result is stored, and a repeat gets it.
func TestMCPUpstreamStreamClosedMidCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "v1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	s.AddTool(&mcp.Tool{Name: "file_report", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := runs.Add(1)
		if req.Extra != nil && req.Extra.CloseSSEStream != nil {
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
		}
		time.Sleep(100 * time.Millisecond)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("report %d filed", n)}}}, nil
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}))
	t.Cleanup(func() {
		up.CloseClientConnections()
		up.Close()
	})
	agent := connectAgent(t, startApp(t, resumeManifest, "SLOW", up.URL), nil, "")
	ctx := context.Background()
	for i := range 2 {
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "file_report", Arguments: map[string]any{"id": "r1"}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
		var text []string
		for _, c := range res.Content {
			text = append(text, c.(*mcp.TextContent).Text)
		}
		if !strings.Contains(strings.Join(text, " "), "report 1 filed") {
			t.Errorf("call %d: %q, want the first run's result", i, text)
		}
		if (i == 1) != (res.Meta[gateway.MetaRepeat] == true) {
			t.Errorf("call %d: meta %v", i, res.Meta)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
}
