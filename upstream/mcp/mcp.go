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

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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

// Options configure a Client; nil means defaults.
type Options struct {
	// SessionPerAgent gives every agent session its own upstream session
	// for reads, so that what the server sends its client during a call —
	// log messages, sampling and elicitation requests — is relayed to the
	// agent that made the call, when its client supports them. Writes keep
	// the shared session: their side effects outlive the agent's session.
	// Default false: one session shared by every call, nothing relayed but
	// progress.
	SessionPerAgent bool
	// MaxAgentSessions caps the upstream sessions kept for agents; reads of
	// agents beyond it use the shared session. Default 256.
	MaxAgentSessions int
	// MaxAnswer caps a tool result airlock keeps (manifest
	// limits.upstream_answer_bytes): a larger one is recorded with its
	// outcome and without its answer. Default upstream.DefaultMaxAnswer.
	MaxAnswer int64
}

// Client calls tools of one MCP server, opening the session on first use
// and again after it breaks.
type Client struct {
	newTransport func() sdk.Transport
	client       *sdk.Client
	opts         Options

	// progress maps the progress tokens airlock sent (one per call that
	// wants progress) to the caller's relay.
	progress  sync.Map // string → *progressRelay
	lastToken atomic.Int64

	onUpdated atomic.Pointer[func(uri string)] // the gateway's resource subscriptions

	mu      sync.Mutex
	session *sdk.ClientSession
	ended   chan struct{}            // closed when session ends (the process exited, the connection failed)
	agents  map[string]*agentSession // by the agent session's id, with SessionPerAgent
}

// agentSession is an upstream session kept for one agent session.
type agentSession struct {
	session *sdk.ClientSession
	ended   chan struct{}
	last    atomic.Int64 // when a message was last relayed, in Unix ns
	logs    bool         // the server logs (it declared logging): reads wait for its last messages

	mu   sync.Mutex
	peer upstream.Peer // of the agent's latest call: its context carries relays to that call
}

func (a *agentSession) currentPeer() upstream.Peer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peer
}

var _ upstream.Caller = (*Client)(nil)

// NewCommand returns a client for an MCP server run as a command over
// stdio; opts nil means defaults.
func NewCommand(argv []string, opts *Options) *Client {
	return newClient(opts, func() sdk.Transport {
		return &sdk.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}
	})
}

// NewHTTP returns a client for an MCP server at a streamable HTTP
// endpoint; opts nil means defaults.
func NewHTTP(url string, opts *Options) *Client {
	return newClient(opts, func() sdk.Transport {
		// The SDK's reconnection (5 tries with backoff) resumes a call's
		// stream with Last-Event-ID where the server allows it (2025-11-25
		// with an event store): a stream closed mid-call still brings the
		// answer. It never sends a request again, so it cannot run a
		// call twice.
		return &sdk.StreamableClientTransport{Endpoint: url}
	})
}

func newClient(opts *Options, t func() sdk.Transport) *Client {
	c := &Client{newTransport: t}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.MaxAgentSessions <= 0 {
		c.opts.MaxAgentSessions = 256
	}
	if c.opts.MaxAnswer <= 0 {
		c.opts.MaxAnswer = upstream.DefaultMaxAnswer
	}
	c.client = sdk.NewClient(clientImpl, &sdk.ClientOptions{
		ProgressNotificationHandler: c.onProgress,
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			if f := c.onUpdated.Load(); f != nil && req.Params != nil {
				(*f)(req.Params.URI)
			}
		},
		// An upstream's request for input (elicitation, sampling, roots) in
		// a result is passed back to the agent, whose client answers it and
		// calls again; airlock has no person or model of its own to ask.
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	return c
}

var clientImpl = &sdk.Implementation{Name: "airlock", Version: "v0"}

// sessionForAgent is the upstream session kept for the agent session p
// names, opened on its first read; nil (use the shared session) when the
// cap is reached. The session ends with the agent's.
func (c *Client) sessionForAgent(ctx context.Context, p upstream.Peer) (*sdk.ClientSession, *agentSession, error) {
	id := p.ID()
	if a, full := c.agentSession(id, p); a != nil || full {
		if a == nil {
			return nil, nil, nil
		}
		return a.session, a, nil
	}
	// Opened without the client's lock: a handshake must not hold up the
	// other calls to this server.
	a, err := c.openAgentSession(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	if other := c.agents[id]; other != nil {
		c.mu.Unlock()
		_ = a.session.Close() // another read of this agent opened one first
		return other.session, other, nil
	}
	if c.agents == nil {
		c.agents = map[string]*agentSession{}
	}
	c.agents[id] = a
	c.mu.Unlock()
	go func() {
		select {
		case <-p.Done():
		case <-a.ended:
		}
		c.mu.Lock()
		if c.agents[id] == a {
			delete(c.agents, id)
		}
		c.mu.Unlock()
		_ = a.session.Close()
	}()
	return a.session, a, nil
}

// agentSession is the live upstream session kept for agent session id,
// now relaying to p; full reports that none is kept and no more may be.
func (c *Client) agentSession(id string, p upstream.Peer) (a *agentSession, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.agents[id]; a != nil {
		select {
		case <-a.ended:
			delete(c.agents, id)
			_ = a.session.Close()
		default:
			a.mu.Lock()
			a.peer = p
			a.mu.Unlock()
			return a, false
		}
	}
	return nil, len(c.agents) >= c.opts.MaxAgentSessions
}

// openAgentSession opens an upstream session for p's agent.
func (c *Client) openAgentSession(ctx context.Context, p upstream.Peer) (*agentSession, error) {
	a := &agentSession{peer: p, ended: make(chan struct{})}
	client := c.agentClient(a, p.Capabilities())
	// The session outlives this call: it must not inherit the call's
	// values (the gateway's request id would tie relays to a call that
	// is over), only its deadline for the handshake.
	ctx, cancel := detached(ctx)
	defer cancel()
	// The agent's own revision, so that the server asks for sampling and
	// elicitation as the agent's client expects (a 2026-07-28 server
	// refuses them on a stream); a server that does not speak it
	// negotiates as for any client.
	s, err := client.Connect(ctx, c.newTransport(), &sdk.ClientSessionOptions{ProtocolVersion: p.ProtocolVersion()})
	if err != nil && p.ProtocolVersion() != "" {
		s, err = client.Connect(ctx, c.newTransport(), nil)
	}
	if err != nil {
		return nil, err
	}
	a.session = s
	if ir := s.InitializeResult(); ir != nil && ir.Capabilities != nil && ir.Capabilities.Logging != nil {
		// Every message the server has; the agent's own level filters
		// what it hears.
		_ = s.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"})
		a.logs = true
	}
	go func() {
		_ = s.Wait()
		close(a.ended)
	}()
	return a, nil
}

// detached is a context with ctx's deadline and cancellation but none of
// its values.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.Background())
	if d, ok := ctx.Deadline(); ok {
		out, cancel = context.WithDeadline(context.Background(), d)
	}
	stop := context.AfterFunc(ctx, cancel)
	return out, func() { stop(); cancel() }
}

// agentClient is an SDK client whose handlers relay to a's agent, and
// which declares only what the agent's client declared (caps).
func (c *Client) agentClient(a *agentSession, caps json.RawMessage) *sdk.Client {
	var declared sdk.ClientCapabilities
	_ = json.Unmarshal(caps, &declared)
	opts := &sdk.ClientOptions{
		ProgressNotificationHandler: c.onProgress,
		MultiRoundTrip:              &sdk.MultiRoundTripOptions{Disabled: true},
		Capabilities:                &sdk.ClientCapabilities{},
		LoggingMessageHandler: func(ctx context.Context, req *sdk.LoggingMessageRequest) {
			if b, err := json.Marshal(req.Params); err == nil {
				_ = a.currentPeer().Notify(ctx, "notifications/message", b)
				a.last.Store(time.Now().UnixNano())
			}
		},
	}
	if declared.Sampling != nil {
		// Plain sampling: a request with tools would need the agent's
		// declared tool support checked field by field.
		opts.Capabilities.Sampling = &sdk.SamplingCapabilities{}
		opts.CreateMessageHandler = func(ctx context.Context, req *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
			var res sdk.CreateMessageResult
			return &res, relay(ctx, a, "sampling/createMessage", req.Params, &res)
		}
	}
	if declared.Elicitation != nil {
		opts.Capabilities.Elicitation = declared.Elicitation
		opts.ElicitationHandler = func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			var res sdk.ElicitResult
			return &res, relay(ctx, a, "elicitation/create", req.Params, &res)
		}
	}
	return sdk.NewClient(clientImpl, opts)
}

// relay sends an upstream's request to the agent and decodes its result.
func relay(ctx context.Context, a *agentSession, method string, params, result any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	out, err := a.currentPeer().Request(ctx, method, b)
	if err != nil {
		return err
	}
	a.last.Store(time.Now().UnixNano())
	return json.Unmarshal(out, result)
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

func (r *progressRelay) drain(ctx context.Context) { drainQuiet(ctx, &r.last) }

// drainQuiet waits until last (Unix ns) is progressQuiet behind, at most
// progressGrace, or until ctx ends (the caller is gone: there is no one to
// hear the rest). It sleeps until the quiet would be reached, not in a
// spin, and looks again only if a notification came meanwhile. (Wall
// time: it measures the SDK's queue, not airlock's clock.)
func drainQuiet(ctx context.Context, last *atomic.Int64) {
	start := time.Now()
	deadline := start.Add(progressGrace)
	for {
		quietAt := time.Unix(0, min(max(start.UnixNano(), last.Load())+int64(progressQuiet), deadline.UnixNano()))
		wait := time.Until(quietAt)
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
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
	// The call's values stay with the call: the SDK reads the revision of
	// the agent's request from them (a 2026-07-28 request to airlock's
	// server), and would send it on this session's handshake.
	ctx, cancel := detached(ctx)
	defer cancel()
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

// OnResourceUpdated sets what is told of the URIs the server reports
// changed (notifications/resources/updated on the shared session, where
// the gateway subscribes for its agents).
func (c *Client) OnResourceUpdated(f func(uri string)) { c.onUpdated.Store(&f) }

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
	for id, a := range c.agents {
		if a.session == s {
			delete(c.agents, id)
		}
	}
	c.mu.Unlock()
	_ = s.Close()
}

// Close ends the sessions (and the commands, for stdio servers).
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.session
	c.session = nil
	agents := c.agents
	c.agents = nil
	c.mu.Unlock()
	for _, a := range agents {
		_ = a.session.Close()
	}
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
	var s *sdk.ClientSession
	var err error
	relaying := false
	if c.opts.SessionPerAgent && req.Peer != nil && req.Key == "" {
		var a *agentSession
		if s, a, err = c.sessionForAgent(ctx, req.Peer); err == nil && a != nil {
			relaying = true
			if a.logs {
				// The SDK hands log messages to their handler on a queue
				// apart from the answer: wait until it has been quiet, so
				// that the agent hears them on the call's stream, before
				// the answer (a message relayed after it goes to the
				// session's own stream, which a client need not open).
				defer drainQuiet(ctx, &a.last)
			}
		}
	}
	if s == nil && err == nil {
		s, err = c.sessionFor(ctx)
	}
	if err != nil {
		return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: fmt.Errorf("connecting to the MCP server: %w", err)}
	}
	params := &sdk.CallToolParams{Name: name, Arguments: req.Args}
	if req.Key != "" || req.TraceParent != "" || req.Progress != nil || relaying {
		params.Meta = sdk.Meta{}
	}
	if relaying {
		// A 2026-07-28 server takes the log level with each request.
		params.Meta[sdk.MetaKeyLogLevel] = "debug"
	}
	if req.Progress != nil {
		// airlock's own token, not the caller's: callers' tokens are only
		// unique within their sessions, and this session is shared.
		tok := fmt.Sprintf("airlock-%d", c.lastToken.Add(1))
		relay := &progressRelay{send: req.Progress}
		c.progress.Store(tok, relay)
		defer c.progress.Delete(tok)
		defer relay.drain(ctx) // runs before the Delete
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
		var refusal *jsonrpc.Error
		if req.Key == "" && ctx.Err() == nil && errors.As(err, &refusal) {
			// A read the server answered with a JSON-RPC error (a client
			// capability it requires, a request state it refuses): the
			// answer goes back to the agent as it came.
			return airlock.Outcome{Kind: airlock.OutcomeFailed, Err: refusal}
		}
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
	kind := airlock.OutcomeSucceeded
	if res.IsError {
		kind = airlock.OutcomeFailed
	}
	if size := int64(len(result) + len(full)); size > c.opts.MaxAnswer {
		// The outcome is known; the answer is too large to keep.
		return airlock.Outcome{Kind: kind, Result: upstream.OmittedAnswer(c.opts.MaxAnswer, size)}
	}
	return airlock.Outcome{Kind: kind, Result: result, Content: full}
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
