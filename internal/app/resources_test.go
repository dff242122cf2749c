package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	s := contentMCPServer(name, uri)
	srv := upstreamServer(t, s, nil)
	return srv.URL
}

// contentMCPServer is contentServer's MCP server.
func contentMCPServer(name, uri string) *mcp.Server {
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
	return s
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
	return serveApp(t, &app.Config{Manifest: m, Tokens: tokens}).URL
}

// served is an app serving on loopback.
type served struct {
	*app.App
	URL string
}

// serveApp starts the app cfg describes (on a fresh SQLite file when cfg
// names no DSN, migrated) with its gateway on loopback; cleanup closes both.
func serveApp(t *testing.T, cfg *app.Config) *served {
	t.Helper()
	if cfg.DSN == "" {
		cfg.DSN = "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	}
	cfg.Migrate = true
	a, err := app.New(context.Background(), cfg)
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
		// An upstream that a test stopped first cannot be told goodbye;
		// that is not the app's failure.
		if err := a.Close(ctx); err != nil {
			t.Logf("closing the app: %v", err)
		}
	})
	return &served{App: a, URL: srv.URL}
}

func TestMCPUpstreamResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	docs := contentServer(t, "docs", "file:///readme.txt")
	wiki := contentServer(t, "wiki", "file:///readme.txt") // the same URI: the first upstream keeps it
	hidden := contentServer(t, "hidden", "file:///secret.txt")
	url := startApp(t, resourcesManifest, "DOCS", docs, "WIKI", wiki, "HIDDEN", hidden)
	s := connectAgent(t, url, nil, "")
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
		// In a session, airlock names the missing field; on 2026-07-28
		// the SDK refuses first, naming the header that carries it.
		for _, tc := range []struct{ version, prompt, read string }{
			{"2025-11-25", "params.name", "params.uri"},
			{"", `missing required Mcp-Name header for method "prompts/get"`, `missing required Mcp-Name header for method "resources/read"`},
		} {
			s := connectAgent(t, url, nil, tc.version)
			_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{})
			if err == nil || !strings.Contains(err.Error(), tc.prompt) {
				t.Errorf("%s: prompt without a name: %v", tc.version, err)
			}
			_, err = s.ReadResource(ctx, &mcp.ReadResourceParams{})
			if err == nil || !strings.Contains(err.Error(), tc.read) {
				t.Errorf("%s: read without a URI: %v", tc.version, err)
			}
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

const watchManifest = `version: 1
upstreams:
  feed: {mcp: {url: "FEED", resources: true, prompts: true, prefix: feed}}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: feed, tool: lookup}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// watchServer is an MCP server with a resource that can be subscribed to
// and completions for its prompt's argument; it records its subscribers.
type watchServer struct {
	server *mcp.Server
	url    string

	mu     sync.Mutex
	events []string // "subscribe URI", "unsubscribe URI"
}

func (w *watchServer) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

func (w *watchServer) note(e string) {
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
}

func newWatchServer(t *testing.T) *watchServer {
	t.Helper()
	w := &watchServer{}
	w.server = mcp.NewServer(&mcp.Implementation{Name: "feed", Version: "v1"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			w.note("subscribe " + req.Params.URI)
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			w.note("unsubscribe " + req.Params.URI)
			return nil
		},
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			var vals []string
			for _, v := range []string{"paris", "park", "prague"} {
				if strings.HasPrefix(v, req.Params.Argument.Value) {
					vals = append(vals, req.Params.Ref.Type+":"+req.Params.Ref.Name+req.Params.Ref.URI+":"+v)
				}
			}
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: vals, Total: len(vals)}}, nil
		},
	})
	w.server.AddResource(&mcp.Resource{URI: "feed://prices", Name: "prices"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "42"}}}, nil
	})
	w.server.AddPrompt(&mcp.Prompt{Name: "trip", Arguments: []*mcp.PromptArgument{{Name: "city"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "plan"}}}}, nil
	})
	srv := upstreamServer(t, w.server, nil)
	w.url = srv.URL
	return w
}

// Subscriptions pass through once per URI: the upstream hears the first
// subscribe and the last unsubscribe (or the last subscriber's session
// ending); its updates reach the subscribed agents only. Completion of a
// prompt's argument goes to the upstream that has the prompt, by its own
// name.
func TestMCPUpstreamSubscriptionsAndCompletion(t *testing.T) {
	t.Parallel()
	w := newWatchServer(t)
	url := startApp(t, watchManifest, "FEED", w.url)
	ctx := context.Background()
	type ear struct {
		mu   sync.Mutex
		uris []string
	}
	listen := func(e *ear) *mcp.ClientOptions {
		return &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			e.mu.Lock()
			e.uris = append(e.uris, req.Params.URI)
			e.mu.Unlock()
		}}
	}
	heard := func(e *ear) []string {
		e.mu.Lock()
		defer e.mu.Unlock()
		return slices.Clone(e.uris)
	}
	var ear1, ear2, ear3 ear
	agent1 := connectAgent(t, url, listen(&ear1), "")
	agent2 := connectAgent(t, url, listen(&ear2), "")
	agent3 := connectAgent(t, url, listen(&ear3), "")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the upstream saw %q", what, w.seen())
			}
		}
	}

	t.Run("capabilities", func(t *testing.T) {
		caps := agent1.InitializeResult().Capabilities
		if caps.Resources == nil || !caps.Resources.Subscribe || caps.Completions == nil {
			t.Fatalf("capabilities %+v: want resources with subscribe, and completions", caps)
		}
	})
	t.Run("subscribed once for two agents", func(t *testing.T) {
		for _, s := range []*mcp.ClientSession{agent1, agent2} {
			if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: "feed://prices"}); err != nil {
				t.Fatal(err)
			}
		}
		if got := w.seen(); !slices.Equal(got, []string{"subscribe feed://prices"}) {
			t.Fatalf("upstream saw %q", got)
		}
	})
	t.Run("updates reach the subscribers only", func(t *testing.T) {
		if err := w.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "feed://prices"}); err != nil {
			t.Fatal(err)
		}
		waitFor("both subscribers hear the update", func() bool { return len(heard(&ear1)) == 1 && len(heard(&ear2)) == 1 })
		time.Sleep(50 * time.Millisecond)
		if h := heard(&ear3); len(h) != 0 {
			t.Fatalf("an agent that did not subscribe heard %q", h)
		}
	})
	t.Run("unsubscribed upstream when the last subscriber leaves", func(t *testing.T) {
		if err := agent1.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "feed://prices"}); err != nil {
			t.Fatal(err)
		}
		if got := w.seen(); len(got) != 1 {
			t.Fatalf("upstream unsubscribed while agent 2 still listens: %q", got)
		}
		agent2.Close() // its session ends without unsubscribing
		waitFor("the upstream is unsubscribed", func() bool { return slices.Contains(w.seen(), "unsubscribe feed://prices") })
	})
	t.Run("completion by the upstream's prompt name", func(t *testing.T) {
		res, err := agent3.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "feed_trip"},
			Argument: mcp.CompleteParamsArgument{Name: "city", Value: "pa"}})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"ref/prompt:trip:paris", "ref/prompt:trip:park"}; !slices.Equal(res.Completion.Values, want) {
			t.Fatalf("completion %q, want %q", res.Completion.Values, want)
		}
		res, err = agent3.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "nobody_has_it"},
			Argument: mcp.CompleteParamsArgument{Name: "city", Value: "pa"}})
		if err != nil || res.Completion.Values == nil || len(res.Completion.Values) != 0 {
			t.Fatalf("completion of an unknown prompt: %v %+v, want no suggestions", err, res)
		}
	})
}
