// Package mcp is the upstream for MCP servers, reached over stdio (a
// command airlock starts) or streamable HTTP, with the official Go SDK's
// client. The derived key travels in the call's
// _meta["io.airlock/idempotency-key"]; a result with isError is a
// definitive failure; a broken session after the request went out is an
// outcome unknown; a session that cannot be opened is not sent.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

// MetaKey is the _meta field that carries the derived key.
const MetaKey = "io.airlock/idempotency-key"

// MetaTraceParent and MetaTraceState are the _meta fields of the W3C trace
// context (named as the headers are).
const (
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

// Client calls tools of one MCP server, opening the session on first use
// and again after it breaks.
type Client struct {
	newTransport func() sdk.Transport
	client       *sdk.Client

	// progress maps the progress tokens airlock sent (one per call that
	// wants progress) to the caller's relay.
	progress  sync.Map // string → *progressRelay
	lastToken atomic.Int64

	mu      sync.Mutex
	session *sdk.ClientSession
	ended   chan struct{} // closed when session ends (the process exited, the connection failed)
}

var _ upstream.Caller = (*Client)(nil)

// NewCommand returns a client for an MCP server run as a command over stdio.
func NewCommand(argv []string) *Client {
	return newClient(func() sdk.Transport {
		return &sdk.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}
	})
}

// NewHTTP returns a client for an MCP server at a streamable HTTP endpoint.
func NewHTTP(url string) *Client {
	return newClient(func() sdk.Transport {
		// The SDK's reconnection (5 tries with backoff) resumes a call's
		// stream with Last-Event-ID where the server allows it (2025-11-25
		// with an event store): a stream closed mid-call still brings the
		// answer. It never sends a request again, so it cannot run a
		// call twice.
		return &sdk.StreamableClientTransport{Endpoint: url}
	})
}

func newClient(t func() sdk.Transport) *Client {
	c := &Client{newTransport: t}
	c.client = sdk.NewClient(&sdk.Implementation{Name: "airlock", Version: "v0"}, &sdk.ClientOptions{
		ProgressNotificationHandler: c.onProgress,
		// An upstream's request for input (elicitation, sampling, roots) in
		// a result is passed back to the agent, whose client answers it and
		// calls again; airlock has no person or model of its own to ask.
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	return c
}

// onProgress passes a progress notification to the call whose token it
// names; the session is shared by all calls, the token is each call's own.
func (c *Client) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	tok, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	if r, ok := c.progress.Load(tok); ok {
		r := r.(*progressRelay)
		r.send(upstream.Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
		r.last.Store(time.Now().UnixNano())
	}
}

// progressRelay is one call's way back to its caller.
type progressRelay struct {
	send func(upstream.Progress)
	last atomic.Int64 // when a notification was last passed on, in Unix ns
}

// The SDK hands notifications to their handler on a queue of their own and
// a response straight to its caller, so a call's last reports may still be
// queued when its answer arrives. After the answer the relay stays open
// until the queue has gone quiet for progressQuiet (at most progressGrace),
// so the caller hears them before the answer; only calls that asked for
// progress wait.
const (
	progressQuiet = 25 * time.Millisecond
	progressGrace = 250 * time.Millisecond
)

func (r *progressRelay) drain() {
	start := time.Now()
	for {
		time.Sleep(time.Millisecond)
		now := time.Now()
		quietSince := max(start.UnixNano(), r.last.Load())
		if now.Sub(time.Unix(0, quietSince)) >= progressQuiet || now.Sub(start) >= progressGrace {
			return
		}
	}
}

// sessionFor is the open session, or a new one (a new process, for a
// command) when there is none or the last one has ended: a server that
// died between calls is restarted before the next call is sent, so that
// call is not lost in a dead session and reported unknown.
func (c *Client) sessionFor(ctx context.Context) (*sdk.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != nil {
		select {
		case <-c.ended:
			_ = c.session.Close()
			c.session = nil
		default:
			return c.session, nil
		}
	}
	s, err := c.client.Connect(ctx, c.newTransport(), nil)
	if err != nil {
		return nil, err
	}
	ended := make(chan struct{})
	go func() {
		_ = s.Wait()
		close(ended)
	}()
	c.session, c.ended = s, ended
	return s, nil
}

// Session is the open session (opened, or the process restarted, as for a
// call), for the gateway's pass-through of resources and prompts.
func (c *Client) Session(ctx context.Context) (*sdk.ClientSession, error) {
	return c.sessionFor(ctx)
}

func (c *Client) drop(s *sdk.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	c.mu.Unlock()
	_ = s.Close()
}

// Close ends the session (and the command, for stdio servers).
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.session
	c.session = nil
	c.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// Call implements upstream.Caller.
func (c *Client) Call(ctx context.Context, req *upstream.Request) airlock.Outcome {
	name := req.Tool.Name
	if req.Tool.Upstream != nil && req.Tool.Upstream.Tool != "" {
		name = req.Tool.Upstream.Tool
	}
	s, err := c.sessionFor(ctx)
	if err != nil {
		return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: fmt.Errorf("connecting to the MCP server: %w", err)}
	}
	params := &sdk.CallToolParams{Name: name, Arguments: json.RawMessage(req.Args)}
	if req.Key != "" || req.TraceParent != "" || req.Progress != nil {
		params.Meta = sdk.Meta{}
	}
	if req.Progress != nil {
		// airlock's own token, not the caller's: callers' tokens are only
		// unique within their sessions, and this session is shared.
		tok := fmt.Sprintf("airlock-%d", c.lastToken.Add(1))
		relay := &progressRelay{send: req.Progress}
		c.progress.Store(tok, relay)
		defer c.progress.Delete(tok)
		defer relay.drain() // runs before the Delete
		params.SetProgressToken(tok)
	}
	if req.Key != "" {
		params.Meta[MetaKey] = req.Key
	}
	if req.TraceParent != "" {
		// The W3C trace context in _meta, as MCP servers that trace read it.
		params.Meta[MetaTraceParent] = req.TraceParent
		if req.TraceState != "" {
			params.Meta[MetaTraceState] = req.TraceState
		}
	}
	if len(req.InputResponses) > 0 {
		if err := json.Unmarshal(req.InputResponses, &params.InputResponses); err != nil {
			return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: fmt.Errorf("inputResponses: %w", err)}
		}
	}
	params.RequestState = req.RequestState
	res, err := s.CallTool(ctx, params)
	if err != nil {
		if ctx.Err() == nil && isProtocolRefusal(err) {
			// The server refused the request (unknown tool, invalid
			// params): it did not act.
			out, _ := json.Marshal(map[string]string{"error": err.Error()})
			return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: out}
		}
		c.drop(s)
		if ctx.Err() == nil && neverConnected(err) {
			// The server is gone (nothing listens at its address): the
			// request never left.
			return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: err}
		}
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: err}
	}
	if needsInput(res) && req.Key != "" {
		// A guarded write that asks for input has not done its work; its
		// answer cannot be stored as the record's result, since a repeat
		// would replay a question. Input for writes is not relayed.
		out, _ := json.Marshal(map[string]string{"error": "the upstream asked for input (elicitation or sampling) before doing the work; airlock relays that only for read tools, so nothing was done"})
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: out}
	}
	result := resultJSON(res)
	// The whole result goes with the outcome: content of every type,
	// structuredContent, isError and _meta, passed on to MCP callers.
	full, err := json.Marshal(res)
	if err != nil {
		full = nil
	}
	if res.IsError {
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: result, Content: full}
	}
	return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: result, Content: full}
}

// neverConnected reports an error from dialling the server: no connection
// was made, so nothing was written. (Any later error — a reset, a closed
// stream, a dead process — may come after the server read the request.)
func neverConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// needsInput reports a multi round-trip result: the upstream asks the
// client for input before it answers.
func needsInput(res *sdk.CallToolResult) bool {
	return res.NeedsInput() || len(res.InputRequests) > 0
}

// isProtocolRefusal reports a JSON-RPC error that says the request was not
// acted on (method not found, invalid params).
func isProtocolRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "-32601") || strings.Contains(msg, "-32602") || strings.Contains(msg, "unknown tool")
}

// resultJSON is the structured content when there is one, else the text
// content as {"text": ...}.
func resultJSON(res *sdk.CallToolResult) json.RawMessage {
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	key := "text"
	if res.IsError {
		key = "error"
	}
	b, _ := json.Marshal(map[string]string{key: strings.Join(parts, "\n")})
	return b
}

// Server is what an MCP server says of itself and its tools, for airlock
// init --from-mcp.
type Server struct {
	Name  string // serverInfo.name from initialize
	Tools []*sdk.Tool
}

// Describe opens a session and lists every tool the server offers (all
// pages).
func (c *Client) Describe(ctx context.Context) (*Server, error) {
	s, err := c.sessionFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the MCP server: %w", err)
	}
	out := &Server{}
	if ir := s.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		out.Name = ir.ServerInfo.Name
	}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the MCP server's tools: %w", err)
		}
		out.Tools = append(out.Tools, t)
	}
	return out, nil
}
