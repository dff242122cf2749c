package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

const instructions = `Tools that change something are protected by airlock: calling one again with the same arguments returns the first call's result (marked "repeat": true) instead of doing the work twice. If an answer says the work is in progress or in doubt, do not redo it and do not look for another way to do it.`

// MCPServer is the MCP server, for stdio (`airlock mcp`).
func (g *Gateway) MCPServer() *mcp.Server { return g.mcp }

// CloseSessions ends every MCP session still open (clients that never
// said goodbye), at shutdown.
func (g *Gateway) CloseSessions() {
	for s := range g.mcp.Sessions() {
		_ = s.Close()
	}
}

func ptr[T any](v T) *T { return &v }

func (g *Gateway) newMCPServer(version string) *mcp.Server {
	opts := &mcp.ServerOptions{Instructions: instructions, SetCacheable: privateCache}
	// Set, the capabilities replace the SDK's default ({"logging": {}}).
	// The tool list is the manifest's: it never changes while airlock runs.
	opts.Capabilities = &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Tools: &mcp.ToolCapabilities{},
		// 2026-07-28's server/discover names the Tasks extension here; a
		// 2025-11-25 initialize gets capabilities.tasks (withTaskSupport).
		Extensions: map[string]any{ExtTasks: map[string]any{}}}
	if g.pass.hasResources() || g.pass.hasPrompts() {
		opts.Capabilities.Completions = &mcp.CompletionCapabilities{}
		opts.CompletionHandler = g.pass.complete
		if g.pass.hasResources() {
			opts.Capabilities.Resources = &mcp.ResourceCapabilities{Subscribe: true}
			opts.SubscribeHandler, opts.UnsubscribeHandler = g.pass.subscribe, g.pass.unsubscribe
		}
		if g.pass.hasPrompts() {
			opts.Capabilities.Prompts = &mcp.PromptCapabilities{}
		}
	}
	g.impl = &mcp.Implementation{Name: "airlock", Version: version}
	s := mcp.NewServer(g.impl, opts)
	if g.pass.hasResources() {
		// The SDK tells the sessions subscribed to the URI.
		g.pass.notifyUpdates(func(uri string) {
			_ = s.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		})
	}
	for _, t := range g.m.Tools {
		if t.Kind == airlock.KindIrreversible {
			// Proposed as plans, never called as themselves.
			if g.plans != nil {
				s.AddTool(&mcp.Tool{
					Name:        PlanPrefix + t.Name,
					Description: describePlanTool(t),
					InputSchema: g.schemas[t.Name].jsonSchemaJSON(),
					Annotations: &mcp.ToolAnnotations{Title: PlanPrefix + t.Name, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
				}, g.mcpHandlerNamed(PlanPrefix+t.Name))
			}
			continue
		}
		if _, ok := g.callers[t.Name]; !ok {
			continue
		}
		s.AddTool(&mcp.Tool{
			Name:        t.Name,
			Description: describeForModel(t),
			InputSchema: g.schemas[t.Name].jsonSchemaJSON(),
			Annotations: annotations(t),
		}, g.mcpHandlerNamed(t.Name))
	}
	if g.plans != nil {
		s.AddTool(&mcp.Tool{
			Name: PlanStatusTool, Description: "Reports a plan by its id: its status, the rule that decided, and the result once carried out.",
			InputSchema: planStatusSchema,
			Annotations: &mcp.ToolAnnotations{Title: PlanStatusTool, ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
		}, g.mcpHandlerNamed(PlanStatusTool))
	}
	if err := g.registerTaskMethods(s); err != nil {
		panic(err) // the names are the extension's, never the SDK's own
	}
	// A call of an irreversible tool by name gets the refusal that says
	// what to do instead, not a bare "unknown tool". A write or plan that
	// has not ended may become a task (tasks.go).
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if res, ok, err := g.pass.handle(ctx, method, req); ok {
				return res, err
			}
			switch method {
			case "tools/call":
				ctr, ok := req.(*mcp.CallToolRequest)
				if ok && ctr.Params != nil && g.routes[ctr.Params.Name] == nil {
					if t := g.irreversibleNamed(ctr.Params.Name); t != nil {
						e := asError(g.refuseIrreversible(t))
						return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: e.Message}}, StructuredContent: errorBody{e}}, nil
					}
				}
				if callFlavor(ctr) == taskNone {
					return next(ctx, method, req)
				}
				slot := &callSlot{}
				res, err := next(context.WithValue(ctx, callSlotKey{}, slot), method, req)
				if err != nil {
					return res, err
				}
				return g.taskForCall(ctx, ctr, slot, res)
			case "initialize", "tools/list":
				res, err := next(ctx, method, req)
				if err != nil {
					return res, err
				}
				ss, _ := req.GetSession().(*mcp.ServerSession)
				return g.withTaskSupport(method, ss, res), nil
			}
			return next(ctx, method, req)
		}
	})
	// Outermost: every error answered is a JSON-RPC error with a code.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if err != nil {
				err = rpcCoded(err)
			}
			return res, err
		}
	})
	return s
}

// privateCache marks what airlock answers as the requesting agent's to
// cache, not a shared cache's: /mcp is behind a token.
func privateCache(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
	if c.CacheScope == "" {
		c.CacheScope = "private"
	}
}

// annotations follow the manifest: reads are read-only; writes change
// something but are idempotent under airlock (a repeat returns the first
// result); every tool with an upstream reaches outside.
func annotations(t *airlock.Tool) *mcp.ToolAnnotations {
	a := &mcp.ToolAnnotations{Title: t.Name, OpenWorldHint: ptr(t.Upstream != nil)}
	switch t.Kind {
	case airlock.KindRead:
		a.ReadOnlyHint, a.IdempotentHint, a.DestructiveHint = true, true, ptr(false)
	case airlock.KindWrite:
		a.IdempotentHint = true
		a.DestructiveHint = ptr(!strings.HasPrefix(strings.ToLower(strings.TrimSpace(t.Answers.Undo)), "yes"))
	}
	return a
}

func describeForModel(t *airlock.Tool) string {
	d := t.Description
	if t.Kind == airlock.KindWrite {
		d += " Calling it again with the same arguments returns the first result; it is never done twice."
	}
	return strings.TrimSpace(d)
}

func (g *Gateway) mcpHandlerNamed(name string) mcp.ToolHandler {
	r := g.routes[name]
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The HTTP layer authenticated this request, and bound its session
		// to the principal (guardSession); name the actor. A request outside
		// a session airlock saw opened is authenticated again from its
		// headers.
		// A request of 2026-07-28 has no session: its HTTP request's
		// context carries the principal.
		overHTTP := req.Extra != nil && req.Extra.Header != nil
		stateless := overHTTP && sessionID(req.Session) == ""
		actor := g.principalOf(ctx, req.Session)
		if actor == "" && overHTTP {
			if p, err := g.authenticate(&http.Request{Header: req.Extra.Header}); err == nil {
				actor = p.Name
			}
		}
		if actor != "" {
			ctx = airlock.WithActor(ctx, actor)
		}
		var header http.Header
		if overHTTP {
			header = req.Extra.Header
		}
		meta := func(k string) string { s, _ := req.Params.Meta[k].(string); return s }
		creq := g.mcpCallRequest(name, req.Params.Arguments, meta, header, sessionID(req.Session), actor, stateless)
		if len(req.Params.InputResponses) > 0 {
			// The agent's answers to an upstream's inputRequests (a read).
			if b, err := json.Marshal(req.Params.InputResponses); err == nil {
				creq.InputResponses = b
			}
		}
		creq.RequestState = req.Params.RequestState
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			relay := newProgressRelay(ctx, req.Session, tok)
			defer relay.end()
			creq.Progress = relay.send
		}
		if req.Session != nil && !stateless && r.kind == routeRead {
			// Only reads relay an upstream's messages to their agent, and
			// only in a session (a 2026-07-28 request has none: an
			// upstream's questions reach it as inputRequests).
			creq.Peer = g.peers.of(ctx, req.Session)
		}
		a, err := g.Call(ctx, creq)
		if err != nil {
			res, refusal := g.mcpCallError(name, err)
			if refusal != nil {
				return nil, refusal
			}
			return res, nil
		}
		if slot := slotFrom(ctx); slot != nil {
			slot.answer, slot.principal, slot.tool = a, actor, name
		}
		return g.toolResult(r, a), nil
	}
}

// mcpCallError is a failed call's answer over MCP: a tool result that
// says what went wrong, or the JSON-RPC error a read's upstream refused
// it with, in its own words.
func (g *Gateway) mcpCallError(name string, err error) (*mcp.CallToolResult, *jsonrpc.Error) {
	if refusal := (*jsonrpc.Error)(nil); errors.As(err, &refusal) {
		if refusal.Code == 0 {
			// An upstream's refusal without a code (the go-sdk sends a
			// handler's plain error so): the answer needs one, fast path
			// or not.
			refusal = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: refusal.Message, Data: refusal.Data}
		}
		return nil, refusal
	}
	e := asError(err)
	if e.Code == airlock.CodeInternal || e.Code == airlock.CodeStoreUnavailable {
		g.log.Error("airlock: MCP call failed", "tool", name, "err", err)
	}
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: e.Message}},
		StructuredContent: errorBody{e},
	}, nil
}

// mcpCallRequest is the call a tools/call of a guarded tool asks for,
// read the same whether the SDK or the fast path (mcpfast.go) parsed it:
// meta reads a _meta field as text ("" when absent or not text), header is
// the HTTP request's (nil over stdio), session the session's id ("" when
// none) and actor the principal.
func (g *Gateway) mcpCallRequest(name string, args json.RawMessage, meta func(string) string, header http.Header, session, actor string, stateless bool) *CallRequest {
	run := meta(MetaRun)
	if run == "" && header != nil {
		run = header.Get(RunHeader)
	}
	switch {
	case run != "":
	case stateless && actor != "":
		// No run named and no session to be one: the principal's
		// sessionless calls are one run (docs/gateway.md, "Runs").
		run = StatelessRunPrefix + actor
	case session != "":
		run = session
	default:
		run = g.run
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	// The SDK does not tell a handler its JSON-RPC request id; a call id
	// comes only from _meta, when the client sends one.
	creq := &CallRequest{Tool: name, Args: args, RunID: run, Transport: "mcp", CallID: meta(MetaCallID)}
	// The trace context: _meta (any transport), else the HTTP headers.
	creq.TraceParent, creq.TraceState = meta(metaTraceParent), meta(metaTraceState)
	if creq.TraceParent == "" && header != nil {
		creq.TraceParent, creq.TraceState = header.Get("traceparent"), header.Get("tracestate")
	}
	return creq
}

// toolResult is an answer as an MCP tool result: the result of a call, or
// of a task once it completed (the same first result a repeat gets).
func (g *Gateway) toolResult(r *route, a *airlock.Answer) *mcp.CallToolResult {
	if up := upstreamResult(a); up != nil {
		// The upstream's name for itself is not passed on: the agent's
		// server is airlock.
		up.Meta = dropServerInfo(up.Meta)
		if r != nil && r.kind == routeRead {
			// A read passes through as the MCP upstream gave it.
			return up
		}
		// A guarded call: airlock's answer first, then every content
		// item of the first call's result, whatever its type.
		res := &mcp.CallToolResult{
			IsError:           a.Status == airlock.StatusFailed,
			Content:           append([]mcp.Content{&mcp.TextContent{Text: renderHeader(a)}}, up.Content...),
			StructuredContent: AnswerObject(a),
			Meta:              up.Meta,
		}
		if a.Repeat {
			if res.Meta == nil {
				res.Meta = mcp.Meta{}
			}
			res.Meta[MetaRepeat] = true
		}
		return res
	}
	res := &mcp.CallToolResult{
		IsError:           a.Status == airlock.StatusFailed,
		Content:           []mcp.Content{&mcp.TextContent{Text: renderText(a)}},
		StructuredContent: AnswerObject(a),
	}
	if a.Repeat {
		res.Meta = mcp.Meta{MetaRepeat: true}
	}
	return res
}

// StatelessRunPrefix begins the run id of a 2026-07-28 call that names no
// run: "stateless:" and the principal's name.
const StatelessRunPrefix = "stateless:"

// _meta fields of a tools/call besides the run: the W3C trace context
// (named as its headers are) and the model's tool call id.
const (
	metaTraceParent = "traceparent"
	metaTraceState  = "tracestate"
	// MetaCallID is the _meta field that may carry the model's tool call
	// id (gen_ai.tool.call.id in the call's span).
	MetaCallID = "io.airlock/call-id"
)

// upstreamResult is the MCP upstream's whole result of an answer, or nil
// (another kind of upstream, or an answer without a result).
func upstreamResult(a *airlock.Answer) *mcp.CallToolResult {
	if len(a.Content) == 0 || (a.Status != airlock.StatusSucceeded && a.Status != airlock.StatusFailed) {
		return nil
	}
	var r mcp.CallToolResult
	if err := json.Unmarshal(a.Content, &r); err != nil {
		return nil
	}
	return &r
}

// renderHeader is renderText without the result: the upstream's own
// content follows it.
func renderHeader(a *airlock.Answer) string {
	b := *a
	b.Result = nil
	return renderText(&b)
}

// renderText is the answer in words for the model, with the result.
func renderText(a *airlock.Answer) string {
	var b strings.Builder
	b.Grow(len(a.Message) + len(a.Result) + 192)
	switch a.Status {
	case airlock.StatusSucceeded:
		switch {
		case a.Repeat && a.Conflict != nil:
			b.WriteString("This was already done by an earlier call for the same work, made with other arguments; this is that call's result. It has not been done again, and must not be.")
		case a.Repeat:
			b.WriteString("This was already done by an earlier identical call; this is that call's result. It has not been done again, and must not be.")
		default:
			b.WriteString("Done.")
		}
	case airlock.StatusFailed:
		switch {
		case a.Repeat && a.Conflict != nil:
			b.WriteString("An earlier call for the same work, made with other arguments, was refused by the service; this is that refusal. It was not tried again.")
		case a.Repeat:
			b.WriteString("An earlier identical call was refused by the service; this is that refusal. It was not tried again.")
		default:
			b.WriteString("The service refused the request; nothing was done.")
		}
	case airlock.StatusInProgress, airlock.StatusInDoubt, airlock.StatusPlanned:
		b.WriteString(a.Message)
	}
	if a.Plan != nil {
		fmt.Fprintf(&b, "\nPlan %s: %s (rule %q decided %s).", a.Plan.ID, a.Plan.Status, a.Plan.Rule, a.Plan.Decision)
	}
	if a.Conflict != nil {
		b.WriteString(" ")
		b.WriteString(a.Conflict.Message)
		b.WriteString(".")
	}
	if a.Result != nil {
		b.WriteString("\nResult: ")
		b.Write(a.Result)
	}
	return b.String()
}

// progressRelay passes an upstream's progress reports to the MCP caller
// that asked for them with its progressToken, until its request is
// answered: a write's side effect outlives a caller that gave up, and a
// notification must not name a token whose request is over.
type progressRelay struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any

	mu   sync.Mutex
	done bool
}

func newProgressRelay(ctx context.Context, s *mcp.ServerSession, token any) *progressRelay {
	return &progressRelay{ctx: ctx, session: s, token: token}
}

func (r *progressRelay) send(p upstream.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.ctx.Err() != nil {
		return
	}
	_ = r.session.NotifyProgress(r.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: r.token, Progress: p.Progress, Total: p.Total, Message: p.Message,
	})
}

func (r *progressRelay) end() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
}

// peers are the MCP sessions upstreams have relayed to, each with the
// channel that closes when it ends.
type peers struct {
	done sync.Map // *mcp.ServerSession → chan struct{}
}

// of is the peer of a call made in session s with context ctx.
func (ps *peers) of(ctx context.Context, s *mcp.ServerSession) *agentPeer {
	if v, ok := ps.done.Load(s); ok {
		return &agentPeer{session: s, call: ctx, done: v.(chan struct{})}
	}
	ch := make(chan struct{})
	v, loaded := ps.done.LoadOrStore(s, ch)
	if !loaded {
		go func() {
			_ = s.Wait()
			close(ch)
			ps.done.Delete(s)
		}()
	}
	return &agentPeer{session: s, call: ctx, done: v.(chan struct{})}
}

// agentPeer is an agent's MCP session as an upstream sees it (upstream.Peer):
// what the upstream's server sends its client is relayed on the agent's
// call while the call lasts — on the call's own stream — and on the session
// after it.
type agentPeer struct {
	session *mcp.ServerSession
	call    context.Context
	done    <-chan struct{}
}

var _ upstream.Peer = (*agentPeer)(nil)

func (p *agentPeer) ID() string {
	if id := p.session.ID(); id != "" {
		return id
	}
	return fmt.Sprintf("session-%p", p.session) // stdio: one session, no id
}

func (p *agentPeer) Done() <-chan struct{} { return p.done }

func (p *agentPeer) Capabilities() json.RawMessage {
	ip := p.session.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return json.RawMessage(`{}`)
	}
	b, err := json.Marshal(ip.Capabilities)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

func (p *agentPeer) ProtocolVersion() string {
	if ip := p.session.InitializeParams(); ip != nil {
		return ip.ProtocolVersion
	}
	return ""
}

// ctxFor is the agent's call while it lasts, so that the SDK sends on its
// stream; after it, a context free of any request's values (so the SDK
// sends on the session's own stream), ended with the upstream's ctx.
func (p *agentPeer) ctxFor(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.call.Err() == nil {
		return p.call, func() {}
	}
	bg, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	return bg, func() { stop(); cancel() }
}

func (p *agentPeer) Notify(ctx context.Context, method string, params json.RawMessage) error {
	if method != "notifications/message" {
		return fmt.Errorf("airlock relays no %s notifications from upstreams", method)
	}
	var lp mcp.LoggingMessageParams
	if err := json.Unmarshal(params, &lp); err != nil {
		return err
	}
	// The SDK sends it only at or above the level the agent set.
	ctx, done := p.ctxFor(ctx)
	defer done()
	return p.session.Log(ctx, &lp)
}

func (p *agentPeer) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	ctx, done := p.ctxFor(ctx)
	defer done()
	var res any
	var err error
	switch method {
	case "sampling/createMessage":
		var cp mcp.CreateMessageParams
		if err := json.Unmarshal(params, &cp); err != nil {
			return nil, err
		}
		res, err = p.session.CreateMessage(ctx, &cp)
	case "elicitation/create":
		var ep mcp.ElicitParams
		if err := json.Unmarshal(params, &ep); err != nil {
			return nil, err
		}
		res, err = p.session.Elicit(ctx, &ep)
	default:
		return nil, fmt.Errorf("airlock relays no %s requests from upstreams", method)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

// sessionID is s's id, "" without a session.
func sessionID(s *mcp.ServerSession) string {
	if s == nil {
		return ""
	}
	return s.ID()
}
