package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const resourcesManifest = `version: 1
upstreams:
  docs: {mcp: {url: "DOCS", resources: true, prompts: true, prefix: docs}}
  wiki: {mcp: {url: "WIKI", resources: true, prompts: true}}
  hidden: {mcp: {url: "HIDDEN"}}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: hidden, tool: lookup}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// contentServer is an MCP server with one resource, one template and one
// prompt, each marked with the server's name.
func contentServer(t *testing.T, name, uri string) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "v1"}, nil)
	s.AddResource(&mcp.Resource{URI: uri, Name: "readme", MIMEType: "text/plain"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "from " + name}}}, nil
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "notes://" + name + "/{id}", Name: "note"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "note " + req.Params.URI + " from " + name}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "summarize", Arguments: []*mcp.PromptArgument{{Name: "topic", Required: true}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Description: name, Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "summarize " + req.Params.Arguments["topic"] + " (" + name + ")"}}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

func setupResources(t *testing.T, manifestText string, replace ...string) *mcp.ClientSession {
	t.Helper()
	return connectAgent(t, startApp(t, manifestText, replace...), nil, "")
}

// connectAgent opens an agent's MCP session with the test token.
// version: the protocol revision it asks for ("": the SDK's latest).
func connectAgent(t *testing.T, url string, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer(agentToken)}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startApp serves the manifest (with replace applied) and returns the
// server's URL.
func startApp(t *testing.T, manifestText string, replace ...string) string {
	t.Helper()
	hash := gateway.HashToken(agentToken)
	replace = append(replace, "HASH", fmt.Sprintf("%x", hash[:]))
	m, err := manifest.Parse([]byte(strings.NewReplacer(replace...).Replace(manifestText)), "res.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.TokensFromManifest(m.Auth.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), &app.Config{Manifest: m, DSN: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Migrate: true, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Gateway.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return srv.URL
}

func TestMCPUpstreamResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	docs := contentServer(t, "docs", "file:///readme.txt")
	wiki := contentServer(t, "wiki", "file:///readme.txt") // the same URI: the first upstream keeps it
	hidden := contentServer(t, "hidden", "file:///secret.txt")
	s := setupResources(t, resourcesManifest, "DOCS", docs, "WIKI", wiki, "HIDDEN", hidden)
	ctx := context.Background()

	t.Run("CapabilitiesSayBoth", func(t *testing.T) {
		caps := s.InitializeResult().Capabilities
		if caps.Resources == nil || caps.Prompts == nil || caps.Tools == nil {
			t.Fatalf("capabilities %+v: want tools, resources and prompts", caps)
		}
	})

	t.Run("ResourcesListed", func(t *testing.T) {
		var got []string
		for r, err := range s.Resources(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Name+" "+r.URI)
		}
		// docs comes first by name and keeps the URI both offer; hidden did not opt in.
		if want := []string{"docs_readme file:///readme.txt"}; !slices.Equal(got, want) {
			t.Errorf("resources %q, want %q", got, want)
		}
	})

	t.Run("TemplatesListed", func(t *testing.T) {
		var got []string
		for r, err := range s.ResourceTemplates(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Name+" "+r.URITemplate)
		}
		if want := []string{"docs_note notes://docs/{id}", "note notes://wiki/{id}"}; !slices.Equal(got, want) {
			t.Errorf("templates %q, want %q", got, want)
		}
	})

	t.Run("ResourceRead", func(t *testing.T) {
		for uri, want := range map[string]string{
			"file:///readme.txt": "from docs",
			"notes://wiki/7":     "note notes://wiki/7 from wiki",
			"notes://docs/8":     "note notes://docs/8 from docs",
		} {
			res, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil {
				t.Fatalf("%s: %v", uri, err)
			}
			if len(res.Contents) != 1 || res.Contents[0].Text != want {
				t.Errorf("%s: %+v, want %q", uri, res.Contents, want)
			}
		}
		if _, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///secret.txt"}); err == nil {
			t.Error("read a resource of an upstream that did not opt in")
		}
	})

	t.Run("PromptsListedWithPrefixes", func(t *testing.T) {
		var got []string
		for p, err := range s.Prompts(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Name)
		}
		if want := []string{"docs_summarize", "summarize"}; !slices.Equal(got, want) {
			t.Errorf("prompts %q, want %q", got, want)
		}
	})

	t.Run("PromptGetRoutedByName", func(t *testing.T) {
		for name, want := range map[string]string{"docs_summarize": "summarize dogs (docs)", "summarize": "summarize dogs (wiki)"} {
			res, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"topic": "dogs"}})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != want {
				t.Errorf("%s: %+v, want %q", name, res.Messages, want)
			}
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{})
		if err == nil || !strings.Contains(err.Error(), "params.name") {
			t.Errorf("prompt without a name: %v", err)
		}
		_, err = s.ReadResource(ctx, &mcp.ReadResourceParams{})
		if err == nil || !strings.Contains(err.Error(), "params.uri") {
			t.Errorf("read without a URI: %v", err)
		}
	})
}

// Without opting in, the gateway offers no resources or prompts at all.
func TestMCPUpstreamResourcesOffByDefault(t *testing.T) {
	t.Parallel()
	hidden := contentServer(t, "hidden", "file:///secret.txt")
	s := setupResources(t, `version: 1
upstreams:
  hidden: {mcp: {url: "HIDDEN"}}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: hidden, tool: lookup}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`, "HIDDEN", hidden)
	if caps := s.InitializeResult().Capabilities; caps.Resources != nil || caps.Prompts != nil {
		t.Fatalf("capabilities %+v: want no resources or prompts", caps)
	}
	// (The SDK answers the lists itself, with nothing.)
	if res, err := s.ListPrompts(context.Background(), nil); err == nil && len(res.Prompts) > 0 {
		t.Errorf("prompts %+v offered without any upstream opted in", res.Prompts)
	}
	if res, err := s.ListResources(context.Background(), nil); err == nil && len(res.Resources) > 0 {
		t.Errorf("resources %+v offered without any upstream opted in", res.Resources)
	}
}
