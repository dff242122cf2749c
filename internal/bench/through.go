package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/upstream"
	"github.com/airlockhq/airlock/upstream/httpjson"
)

// Call paths for --through.
const (
	ThroughDirect = "direct" // POST to the upstream, no airlock
	ThroughCore   = "core"   // the guard in process, the upstream over HTTP
	ThroughHTTP   = "http"   // POST /v1/calls to a gateway on loopback
	ThroughMCP    = "mcp"    // an MCP client to the gateway's /mcp
	// ThroughBareMCP is an MCP server on the same SDK, with the same
	// transport options, that forwards the tool to the same upstream with
	// no guard: the floor any MCP gateway pays.
	ThroughBareMCP = "bare-mcp"
	// ThroughMCPStateless and ThroughBareMCPStateless are the same two on
	// MCP 2026-07-28: no session, each request whole. The session paths
	// above speak 2025-11-25.
	ThroughMCPStateless     = "mcp-stateless"
	ThroughBareMCPStateless = "bare-mcp-stateless"
	// ThroughClaims is the claims API (package client): a new call is a
	// claim and a completion, its work run by the caller; a repeat is one
	// request.
	ThroughClaims = "claims"
)

// ThroughPeerMCP and ThroughPeerMCPStateless are what a team writes by
// hand instead of airlock: a bare MCP server on the same SDK whose tool
// runs the baseline's claim/complete loop (baseline.go) on the same
// database, in a session and on 2026-07-28.
const (
	ThroughPeerMCP          = "peer-mcp"
	ThroughPeerMCPStateless = "peer-mcp-stateless"
)

// PeerFor is the hand-written peer an MCP path is held against.
func PeerFor(path string) string {
	if path == ThroughMCPStateless {
		return ThroughPeerMCPStateless
	}
	return ThroughPeerMCP
}

// BareFor is the bare MCP path an MCP path is held against.
func BareFor(path string) string {
	if path == ThroughMCPStateless {
		return ThroughBareMCPStateless
	}
	return ThroughBareMCP
}

// IsMCP reports whether path goes through airlock's /mcp.
func IsMCP(path string) bool { return path == ThroughMCP || path == ThroughMCPStateless }

const benchToken = "bench-agent-token"

// Through is an in-process upstream and gateway on loopback, for measuring
// the whole path of a call.
type Through struct {
	app         *app.App
	guard       *guard.Guard
	closeOnce   sync.Once
	tool        *airlock.Tool
	upstreamURL string
	gatewayURL  string
	client      *http.Client
	pending     sync.Map // record_id -> func() json.RawMessage
	servers     []*http.Server
	mcp         []*mcp.ClientSession
	bareURL     string
	peerURL     string
	baseline    Caller // the peer's claim/complete loop
	sessions    int    // MCP client sessions per path: one per caller
	claimed     *airlock.Tool
	claims      *client.Client
}

// ThroughConfig configures StartThrough; nil means defaults.
type ThroughConfig struct {
	// Tracer makes the server's spans. Default: none.
	Tracer airlock.Tracer
	// Sessions is how many MCP client sessions the mcp paths share among
	// their callers; set it to the concurrency, as each agent has its own.
	// Default: 1.
	Sessions int
}

// StartThrough starts the upstream and a whole airlock server (the same
// assembly as airlock serve, with its background loops) on the database
// dsn names, its gateway on loopback.
func StartThrough(ctx context.Context, dsn string, cfg *ThroughConfig) (*Through, error) {
	if cfg == nil {
		cfg = &ThroughConfig{}
	}
	t := &Through{sessions: cfg.Sessions}
	t.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}}
	up, err := t.serve(http.HandlerFunc(t.upstream))
	if err != nil {
		return nil, err
	}
	t.upstreamURL = up
	w := airlock.Window{Kind: airlock.WindowForever}
	t.tool = Tool()
	t.tool.Window = &w
	t.tool.Upstream = &airlock.ToolUpstream{Name: "bench", Path: "/do"}
	// The same work, run by its caller through the claims API.
	t.claimed = Tool()
	t.claimed.Name += "_claimed"
	t.claimed.Window = &w
	t.claimed.Upstream = &airlock.ToolUpstream{Caller: true}
	m := &manifest.Manifest{Version: 1, Upstreams: map[string]manifest.Upstream{"bench": {HTTP: up}}, Catalog: airlock.Catalog{Tools: []*airlock.Tool{t.tool, t.claimed}}}
	if err := m.Prepare(); err != nil {
		t.Close()
		return nil, err
	}
	a, err := app.New(ctx, &app.Config{
		Manifest: m, DSN: dsn, Migrate: true, Logger: slog.New(slog.DiscardHandler),
		// The upstream through a client that keeps enough idle connections
		// for the benchmark's concurrency.
		Funcs:  map[string]upstream.Caller{t.tool.Name: httpjson.New(up, &httpjson.Config{HTTPClient: t.client})},
		Tokens: []gateway.Token{{Name: "bench", Role: airlock.RoleAgent, SHA256: gateway.HashToken(benchToken)}},
		Tracer: cfg.Tracer,
	})
	if err != nil {
		t.Close()
		return nil, err
	}
	t.app, t.guard = a, a.Guard
	if err := a.Start(ctx); err != nil {
		t.Close()
		return nil, err
	}
	if t.gatewayURL, err = t.serve(a.Gateway.Handler()); err != nil {
		t.Close()
		return nil, err
	}
	t.claims = client.New(&client.Config{URL: t.gatewayURL, Token: benchToken, HTTPClient: &http.Client{Transport: t.client.Transport}})
	if t.bareURL, err = t.serve(t.bareMCP(false)); err != nil {
		t.Close()
		return nil, err
	}
	switch d := a.Store.(type) {
	case interface{ DB() *sql.DB }:
		b := &SQLBaseline{DB: d.DB()}
		err, t.baseline = b.Setup(ctx), b
	case interface{ Pool() *pgxpool.Pool }:
		b := &PgBaseline{Pool: d.Pool()}
		err, t.baseline = b.Setup(ctx), b
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("the peer's baseline table: %w", err)
	}
	if t.baseline != nil {
		if t.peerURL, err = t.serve(t.bareMCP(true)); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *Through) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	t.servers = append(t.servers, srv)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the servers and the guard (which writes its buffered audit
// events); a second Close does nothing.
func (t *Through) Close() {
	t.closeOnce.Do(func() {
		for _, s := range t.mcp {
			_ = s.Close()
		}
		for _, s := range t.servers {
			_ = s.Close()
		}
		if t.app != nil {
			_ = t.app.Close(context.Background()) // writes the buffered audit events
		}
	})
}

// AuditLost is how many audit events the guard gave up; read it after Close.
func (t *Through) AuditLost() int64 { return t.guard.AuditDropped() }

// upstream is the service: it runs the side effect registered for the record.
func (t *Through) upstream(w http.ResponseWriter, r *http.Request) {
	var in struct {
		RecordID string `json:"record_id"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	out := json.RawMessage(`{"ok":true}`)
	if fn, ok := t.pending.Load(in.RecordID); ok {
		out = fn.(func() json.RawMessage)()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Caller returns the Caller for a path.
func (t *Through) Caller(ctx context.Context, path string) (Caller, error) {
	switch path {
	case ThroughDirect:
		return callerFunc(t.direct), nil
	case ThroughCore:
		return callerFunc(t.core), nil
	case ThroughHTTP:
		return callerFunc(t.viaHTTP), nil
	case ThroughClaims:
		return callerFunc(t.viaClaims), nil
	case ThroughMCP, ThroughBareMCP, ThroughMCPStateless, ThroughBareMCPStateless, ThroughPeerMCP, ThroughPeerMCPStateless:
		endpoint := t.gatewayURL + "/mcp"
		switch path {
		case ThroughBareMCP:
			endpoint = t.bareURL + "/mcp"
		case ThroughBareMCPStateless:
			endpoint = t.bareURL + "/mcp-stateless"
		case ThroughPeerMCP, ThroughPeerMCPStateless:
			if t.peerURL == "" {
				return nil, fmt.Errorf("--through %s: no baseline for this store", path)
			}
			endpoint = t.peerURL + "/mcp"
			if path == ThroughPeerMCPStateless {
				endpoint += "-stateless"
			}
		}
		// The session revision, unless the path is a stateless one.
		version := "2025-11-25"
		if path == ThroughMCPStateless || path == ThroughBareMCPStateless || path == ThroughPeerMCPStateless {
			version = "2026-07-28"
		}
		// One session per caller, as agents each have their own.
		n := max(1, t.sessions)
		pool := make(chan *mcp.ClientSession, n)
		for range n {
			c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
			s, err := c.Connect(ctx, &mcp.StreamableClientTransport{
				Endpoint: endpoint, MaxRetries: -1,
				HTTPClient: &http.Client{Transport: tokenTransport{t.client.Transport}},
			}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				return nil, err
			}
			t.mcp = append(t.mcp, s)
			pool <- s
		}
		return callerFunc(func(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
			s := <-pool
			defer func() { pool <- s }()
			return t.viaMCP(ctx, s, key, fn)
		}), nil
	}
	return nil, fmt.Errorf("--through %q: want direct, core, http, claims, mcp, mcp-stateless, bare-mcp, bare-mcp-stateless, peer-mcp or peer-mcp-stateless", path)
}

type callerFunc func(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error)

func (f callerFunc) Call(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	return f(ctx, key, fn)
}

type tokenTransport struct{ next http.RoundTripper }

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+benchToken)
	return tt.next.RoundTrip(r)
}

// register makes the upstream run fn for key, and reports whether it did.
func (t *Through) register(key string, fn func() json.RawMessage) (executed *atomic.Bool, done func()) {
	ran := new(atomic.Bool)
	t.pending.Store(key, func() json.RawMessage {
		ran.Store(true)
		return fn()
	})
	return ran, func() { t.pending.Delete(key) }
}

func (t *Through) post(ctx context.Context, url string, body []byte, header ...string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return b, err
}

func (t *Through) direct(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	ran, done := t.register(key, fn)
	defer done()
	body, _ := json.Marshal(map[string]string{"record_id": key})
	out, err := t.post(ctx, t.upstreamURL+"/do", body)
	return out, ran.Load(), err
}

func (t *Through) core(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	ran, done := t.register(key, fn)
	defer done()
	args, _ := json.Marshal(map[string]string{"record_id": key})
	parsed, err := airlock.NewArgs(args)
	if err != nil {
		return nil, false, err
	}
	ans, err := t.guard.Do(ctx, &airlock.Call{Tool: t.tool, Args: parsed}, func(ctx context.Context, k string) airlock.Outcome {
		out, err := t.post(ctx, t.upstreamURL+"/do", args, "Idempotency-Key", k)
		if err != nil {
			return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: err}
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: out}
	})
	if err != nil {
		return nil, false, err
	}
	return ans.Result, ran.Load(), nil
}

func (t *Through) viaHTTP(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	ran, done := t.register(key, fn)
	defer done()
	body, _ := json.Marshal(map[string]any{"tool": t.tool.Name, "args": map[string]string{"record_id": key}})
	out, err := t.post(ctx, t.gatewayURL+"/v1/calls", body, "Authorization", "Bearer "+benchToken)
	return out, ran.Load(), err
}

// viaClaims runs fn in this process when the claims API says to execute.
func (t *Through) viaClaims(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	ran := false
	a, err := t.claims.Do(ctx, t.claimed.Name, map[string]string{"record_id": key}, "", func(context.Context) (any, error) {
		ran = true
		return fn(), nil
	})
	if err != nil {
		return nil, false, err
	}
	return a.Result, ran, nil
}

func (t *Through) viaMCP(ctx context.Context, s *mcp.ClientSession, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	ran, done := t.register(key, fn)
	defer done()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: t.tool.Name, Arguments: map[string]string{"record_id": key}})
	if err != nil {
		return nil, false, err
	}
	if res.IsError {
		return nil, false, fmt.Errorf("tool error: %v", res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	return b, ran.Load(), nil
}

// bareMCP is the MCP server with no guard: the bench tool, with the same
// input schema and the gateway's transport options, forwards its arguments
// to the upstream and returns its answer as structured content and text;
// with claims, it does so inside the baseline's claim/complete loop keyed
// by the record id, as a team would write it by hand. It serves both
// revisions: a session at /mcp, 2026-07-28 at /mcp-stateless.
func (t *Through) bareMCP(claims bool) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "v1"}, nil)
	s.AddTool(&mcp.Tool{Name: t.tool.Name, InputSchema: t.tool.InputSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var out json.RawMessage
		var err error
		if claims {
			var args struct {
				RecordID string `json:"record_id"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			out, _, err = t.baseline.Call(ctx, t.tool.Name+"/"+args.RecordID, func() json.RawMessage {
				b, err := t.post(ctx, t.upstreamURL+"/do", req.Params.Arguments)
				if err != nil {
					return json.RawMessage(`{"error":"upstream"}`)
				}
				return b
			})
		} else {
			out, err = t.post(ctx, t.upstreamURL+"/do", req.Params.Arguments)
		}
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}, StructuredContent: out}, nil
	})
	server := func(*http.Request) *mcp.Server { return s }
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(server, gateway.StreamableOptions(0, gateway.DefaultMCPSessionIdle)))
	mux.Handle("/mcp-stateless", mcp.NewStreamableHTTPHandler(server, gateway.StatelessOptions(0)))
	return mux
}
