package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/gateway"
)

const passManifest = `version: 1
upstreams:
  media: {mcp: {url: "MEDIA"}}
tools:
  - name: snapshot
    kind: read
    input_schema: {type: object, properties: {id: {type: string}}}
    upstream: {name: media, tool: snapshot}
  - name: broken
    kind: read
    input_schema: {type: object, properties: {id: {type: string}}}
    upstream: {name: media, tool: broken}
  - name: steps
    kind: read
    input_schema: {type: object}
    upstream: {name: media, tool: steps}
  - name: picky
    kind: read
    input_schema: {type: object}
    upstream: {name: media, tool: picky}
  - name: render
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    natural_key: [{field: id}]
    window: forever
    upstream: {name: media, tool: render}
    answers: {undo: "yes", approver: "no one", on_repeat: "one render per id"}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// every content type an MCP tool result may carry.
func mediaContent() []mcp.Content {
	return []mcp.Content{
		&mcp.TextContent{Text: "a chart"},
		&mcp.ImageContent{Data: []byte("\x89PNG fake"), MIMEType: "image/png"},
		&mcp.AudioContent{Data: []byte("RIFF fake"), MIMEType: "audio/wav"},
		&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///chart.csv", MIMEType: "text/csv", Text: "a,b\n1,2\n"}},
		&mcp.ResourceLink{URI: "file:///chart.png", Name: "chart.png", MIMEType: "image/png"},
	}
}

type passBundle struct {
	session *mcp.ClientSession
	renders atomic.Int64

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams // what the agent heard
}

func (b *passBundle) heard() []*mcp.ProgressNotificationParams {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.progress)
}

// notifyProgress reports progress on req to its caller, when it asked.
func notifyProgress(ctx context.Context, req *mcp.CallToolRequest, n int) {
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return
	}
	for i := 1; i <= n; i++ {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(n), Message: fmt.Sprintf("step %d", i)})
	}
}

// setupPassthrough serves the media upstream through airlock and connects
// an agent at version ("": the newest, 2026-07-28 without a session).
func setupPassthrough(t *testing.T, version string) *passBundle {
	t.Helper()
	b := &passBundle{}
	media := mcp.NewServer(&mcp.Implementation{Name: "media", Version: "v1"}, nil)
	media.AddTool(&mcp.Tool{Name: "snapshot", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: mediaContent(), StructuredContent: map[string]any{"points": 2}, Meta: mcp.Meta{"vendor.example/trace": "abc"}}, nil
	})
	media.AddTool(&mcp.Tool{Name: "broken", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such chart"}}}, nil
	})
	media.AddTool(&mcp.Tool{Name: "render", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := b.renders.Add(1)
		notifyProgress(ctx, req, 2)
		return &mcp.CallToolResult{Content: mediaContent(), StructuredContent: map[string]any{"render": n}, Meta: mcp.Meta{"vendor.example/trace": "abc"}}, nil
	})
	media.AddTool(&mcp.Tool{Name: "picky", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32021, Message: "this tool needs a client that can sample", Data: json.RawMessage(`{"requiredCapabilities":{"sampling":{}}}`)}
	})
	media.AddTool(&mcp.Tool{Name: "steps", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		notifyProgress(ctx, req, 3)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	up := upstreamServer(t, media, nil)
	url := startApp(t, passManifest, "MEDIA", up.URL)
	b.session = connectAgent(t, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			b.mu.Lock()
			b.progress = append(b.progress, req.Params)
			b.mu.Unlock()
		},
	}, version)
	return b
}

// kinds lists a result's content types, in order.
func kinds(t *testing.T, cs []mcp.Content) []string {
	t.Helper()
	var out []string
	for _, c := range cs {
		switch v := c.(type) {
		case *mcp.TextContent:
			out = append(out, "text")
		case *mcp.ImageContent:
			if string(v.Data) != "\x89PNG fake" || v.MIMEType != "image/png" {
				t.Errorf("image %q %s", v.Data, v.MIMEType)
			}
			out = append(out, "image")
		case *mcp.AudioContent:
			if string(v.Data) != "RIFF fake" {
				t.Errorf("audio %q", v.Data)
			}
			out = append(out, "audio")
		case *mcp.EmbeddedResource:
			if v.Resource == nil || v.Resource.URI != "file:///chart.csv" || v.Resource.Text != "a,b\n1,2\n" {
				t.Errorf("resource %+v", v.Resource)
			}
			out = append(out, "resource")
		case *mcp.ResourceLink:
			if v.URI != "file:///chart.png" {
				t.Errorf("resource link %+v", v)
			}
			out = append(out, "resource_link")
		default:
			out = append(out, fmt.Sprintf("%T", c))
		}
	}
	return out
}

func TestMCPUpstreamResultsPassThrough(t *testing.T) {
	t.Parallel()
	// Both revisions: 2026-07-28 without a session, 2025-11-25 in one.
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("revision="+version, func(t *testing.T) {
			t.Parallel()
			testMCPUpstreamResultsPassThrough(t, setupPassthrough(t, version))
		})
	}
}

func testMCPUpstreamResultsPassThrough(t *testing.T, b *passBundle) {
	ctx := context.Background()
	all := "text image audio resource resource_link"

	t.Run("ARead", func(t *testing.T) {
		res, err := b.session.CallTool(ctx, &mcp.CallToolParams{Name: "snapshot", Arguments: map[string]any{"id": "c1"}})
		if err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
		if got := strings.Join(kinds(t, res.Content), " "); got != all {
			t.Errorf("content %s, want %s", got, all)
		}
		if fmt.Sprint(res.StructuredContent) != "map[points:2]" || res.Meta["vendor.example/trace"] != "abc" {
			t.Errorf("structured %v meta %v", res.StructuredContent, res.Meta)
		}
	})

	t.Run("AReadTheServerRefuses", func(t *testing.T) {
		// Its JSON-RPC error reaches the agent as it came: code and data.
		_, err := b.session.CallTool(ctx, &mcp.CallToolParams{Name: "picky", Arguments: map[string]any{}})
		var refusal *jsonrpc.Error
		if !errors.As(err, &refusal) || refusal.Code != -32021 || !strings.Contains(refusal.Message, "needs a client that can sample") ||
			!strings.Contains(string(refusal.Data), "requiredCapabilities") {
			t.Fatalf("%v (%T)", err, err)
		}
	})

	t.Run("AReadThatFails", func(t *testing.T) {
		res, err := b.session.CallTool(ctx, &mcp.CallToolParams{Name: "broken", Arguments: map[string]any{}})
		if err != nil || !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "no such chart" {
			t.Fatalf("%v %+v", err, res)
		}
	})

	t.Run("AWriteAndItsRepeat", func(t *testing.T) {
		var first *mcp.CallToolResult
		for i := range 2 {
			res, err := b.session.CallTool(ctx, &mcp.CallToolParams{Name: "render", Arguments: map[string]any{"id": "r1"}})
			if err != nil || res.IsError {
				t.Fatalf("%v %+v", err, res)
			}
			// airlock's words first, then the first call's content, every type.
			if got := strings.Join(kinds(t, res.Content), " "); got != "text "+all {
				t.Errorf("call %d: content %s, want text %s", i, got, all)
			}
			if res.Meta["vendor.example/trace"] != "abc" || (i == 1) != (res.Meta[gateway.MetaRepeat] == true) {
				t.Errorf("call %d: meta %v", i, res.Meta)
			}
			sc := fmt.Sprint(res.StructuredContent)
			if !strings.Contains(sc, "render:1") || strings.Contains(sc, "repeat:true") != (i == 1) {
				t.Errorf("call %d: structured %s", i, sc)
			}
			if i == 0 {
				first = res
			}
		}
		if b.renders.Load() != 1 || first == nil {
			t.Errorf("render executed %d times", b.renders.Load())
		}
	})
}

// Progress notifications of an MCP upstream reach the agent that asked for
// them, with the agent's own token, before the answer.
func TestMCPUpstreamProgressIsRelayed(t *testing.T) {
	t.Parallel()
	// Both revisions: 2026-07-28 without a session, 2025-11-25 in one.
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("revision="+version, func(t *testing.T) {
			t.Parallel()
			testMCPUpstreamProgressIsRelayed(t, setupPassthrough(t, version))
		})
	}
}

func testMCPUpstreamProgressIsRelayed(t *testing.T, b *passBundle) {
	ctx := context.Background()
	want := func(t *testing.T, token string, n int) {
		t.Helper()
		var exp []string
		for i := 1; i <= n; i++ {
			exp = append(exp, fmt.Sprintf("%d/%d step %d", i, n, i))
		}
		var got []string
		// The agent's SDK may hand a notification to its handler just
		// after the answer; wait for the last (up to 10 s: under the race
		// detector on a loaded two-core machine 2 s may be short, a guess at
		// a flake seen once; the wait ends as soon as all have come).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got = got[:0]
			for _, p := range b.heard() {
				if p.ProgressToken == token {
					got = append(got, fmt.Sprintf("%g/%g %s", p.Progress, p.Total, p.Message))
				}
			}
			if len(got) >= len(exp) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(got, exp) {
			t.Errorf("token %s heard %q, want %q", token, got, exp)
		}
	}

	t.Run("ARead", func(t *testing.T) {
		params := &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{}}
		params.SetProgressToken("agent-read-1")
		res, err := b.session.CallTool(ctx, params)
		if err != nil || res.IsError {
			t.Fatalf("%v %+v", err, res)
		}
		want(t, "agent-read-1", 3)
	})

	t.Run("AWriteAndItsRepeat", func(t *testing.T) {
		for i, tok := range []string{"agent-write-1", "agent-write-2"} {
			params := &mcp.CallToolParams{Name: "render", Arguments: map[string]any{"id": "p1"}}
			params.SetProgressToken(tok)
			res, err := b.session.CallTool(ctx, params)
			if err != nil || res.IsError {
				t.Fatalf("call %d: %v %+v", i, err, res)
			}
		}
		want(t, "agent-write-1", 2)
		want(t, "agent-write-2", 0) // the repeat ran nothing
		if n := b.renders.Load(); n != 1 {
			t.Errorf("render executed %d times", n)
		}
	})

	t.Run("NoTokenNoProgress", func(t *testing.T) {
		before := len(b.heard())
		if _, err := b.session.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		if after := len(b.heard()); after != before {
			t.Errorf("heard %d notifications without asking", after-before)
		}
	})
}

// upstreamServer serves an MCP server as an upstream over streamable HTTP
// until the test ends, and then closes the sessions airlock left open (a
// client that did not say goodbye leaves its server session reading).
func upstreamServer(t *testing.T, s *mcp.Server, opts *mcp.StreamableHTTPOptions) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts))
	t.Cleanup(func() {
		up.Close()
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	})
	return up
}
