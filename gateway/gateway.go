// Package gateway puts airlock between agents and their tools: the MCP
// server (streamable HTTP at /mcp, or stdio), the HTTP API (/v1/...), and
// the one call path both share. Read tools pass through to their
// upstream; write tools go through the guarded call with the derived key;
// irreversible tools are never callable as themselves.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/jonboulle/clockwork"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/upstream"
)

// maxOptionalID bounds a call id or trace context (W3C allows 512 bytes of
// tracestate).
const maxOptionalID = 512

// DefaultBodyTimeout bounds how long a request body may take (Config.BodyTimeout).
const DefaultBodyTimeout = 30 * time.Second

// longestCall is the longest an answer may legitimately take: a tool's
// timeout with its re-drives, or its repeat wait, whichever is longer, over
// every tool, and a margin.
func longestCall(m *manifest.Manifest) time.Duration {
	longest := time.Minute
	for _, t := range m.Tools {
		longest = max(longest, 4*t.TimeoutOr()+10*time.Second, t.RepeatWaitOr(), t.RespondWithinOr())
	}
	return longest + 30*time.Second
}

// maxToolName bounds a tool name in a request (manifest names are at most
// 64 characters; plan_ adds 5), so that a refusal does not echo megabytes.
const maxToolName = 128

// DefaultMaxBody caps a request body (Config.MaxBody).
const DefaultMaxBody = 1 << 20

// RunHeader carries the agent's run id on HTTP requests.
const RunHeader = "X-Airlock-Run"

// MetaRun is the MCP _meta field that carries the run id.
const MetaRun = "io.airlock/run"

// MetaRepeat is the MCP _meta field set on repeats.
const MetaRepeat = "io.airlock/repeat"

// Config configures a Gateway.
type Config struct {
	// Manifest lists the tools. Required (prepared).
	Manifest *manifest.Manifest
	// Guard runs write tools at most once per key. Required.
	Guard *guard.Guard
	// Store is pinged by /readyz and read by /v1/report. Required.
	Store Store
	// Upstreams executes tools, by upstream name (the manifest's upstreams).
	Upstreams map[string]upstream.Caller
	// Funcs executes tools by tool name; it takes precedence over
	// Upstreams, for programs that embed airlock.
	Funcs map[string]upstream.Caller
	// Tokens are the accepted bearer tokens. No tokens: every
	// authenticated route answers 401.
	Tokens []Token
	// Issued verifies JWT access tokens of the manifest's auth.issuers,
	// beside Tokens; with it the protected resource metadata (RFC 9728)
	// of auth.resource is published and 401s point to it. Default: none.
	Issued *jwt.Verifier
	// MaxBody caps request bodies. Default 1 MiB.
	MaxBody int64
	// MCPSessionIdle closes an MCP session that has had no request for
	// this long. Default DefaultMCPSessionIdle (30 minutes).
	MCPSessionIdle time.Duration
	// MCPSessionsPerToken caps the MCP sessions one token holds open.
	// Default DefaultMCPSessionsPerToken (100).
	MCPSessionsPerToken int
	// TrustedProxies are the proxies whose X-Forwarded-For (the client
	// address failed tokens are counted by) airlock believes. Default: none.
	TrustedProxies Proxies
	// Throttle slows down guessing of bearer tokens per client address.
	// Default: a Throttle of its own with the default settings.
	Throttle *Throttle
	// BodyTimeout is how long a request's body may take to arrive.
	// Default DefaultBodyTimeout (30s).
	BodyTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Version is reported to MCP clients. Default "dev".
	Version string
	// Plans proposes and reports plans of irreversible tools (plan_T,
	// plan_status, /v1/plans). Default: none (irreversible tools cannot be
	// reached at all).
	Plans *plan.Service
	// Metrics, when set, counts calls, repeats, plans and decisions.
	Metrics *metrics.Metrics
	// Gatherer, when set, is served on /metrics to admin tokens.
	Gatherer prometheus.Gatherer
	// UI, when set, is served under /ui/ (it does its own sign-in).
	UI http.Handler
	// DefaultRunID is the run of MCP calls that name none (no _meta, no
	// header, no session id: stdio). Default: none.
	DefaultRunID string
	// Tracer makes an execute_tool span of each call, continuing the
	// caller's W3C traceparent (header, or MCP _meta), and passes the trace
	// on to upstreams. Default: none (no spans; the caller's traceparent
	// is still passed on).
	Tracer airlock.Tracer
	// Clock is the gateway's time source: MCP sessions' idle timers,
	// tasks' times and the commit queue's long poll (connection deadlines
	// stay on the system clock, as net/http reads them). Default: the
	// system clock.
	Clock clockwork.Clock
}

// Store is what the gateway reads of the store: /readyz pings it,
// /v1/report computes its figures from it, /v1/audit and /v1/records list
// pages of it.
type Store interface {
	Ping(ctx context.Context) error
	ProbeWrite(ctx context.Context) error
	AuditTrail(ctx context.Context, f airlock.AuditFilter) ([]*airlock.AuditEvent, error)
	ListRecords(ctx context.Context, f airlock.RecordFilter) ([]*airlock.Record, error)
	// Get reads a record (the status of a task that follows it).
	Get(ctx context.Context, key string) (*airlock.Record, error)
	// TaskStore keeps MCP tasks.
	airlock.TaskStore
	metrics.Source
}

// Gateway serves the tools.
type Gateway struct {
	m           *manifest.Manifest
	guard       *guard.Guard
	store       Store
	callers     map[string]upstream.Caller // by tool name
	schemas     map[string]*argsSchema
	routes      map[string]*route // every name an agent may call
	tokens      []Token
	issued      *jwt.Verifier
	maxBody     int64
	log         *slog.Logger
	mcp         *mcp.Server
	run         string
	plans       *plan.Service
	metrics     *metrics.Metrics
	gather      prometheus.Gatherer
	ui          http.Handler
	tracer      airlock.Tracer      // nil: no spans
	peers       peers               // MCP sessions that upstreams relay to
	ready       readiness           // the last /readyz probe
	throttle    *Throttle           // failed bearer tokens, per address
	proxies     Proxies             // trusted for X-Forwarded-*
	sessions    *mcpSessions        // who opened each MCP session; how many each token holds
	bodyTimeout time.Duration       // a request body arrives within this
	longestCall time.Duration       // an answer is written within this
	idle        time.Duration       // MCP sessions idle this long are closed
	pass        *passThrough        // MCP upstreams' resources and prompts
	impl        *mcp.Implementation // the MCP server's name and version
	fastOff     bool                // no fast path on /mcp (mcpfast.go): a test compares
	clock       clockwork.Clock
}

// New builds a gateway; it checks that every callable tool has an upstream.
func New(cfg Config) (*Gateway, error) {
	if cfg.Manifest == nil || cfg.Guard == nil || cfg.Store == nil {
		return nil, errors.New("gateway: Manifest, Guard and Store are required")
	}
	g := &Gateway{
		m: cfg.Manifest, guard: cfg.Guard, store: cfg.Store,
		callers: map[string]upstream.Caller{}, schemas: map[string]*argsSchema{},
		tokens: cfg.Tokens, issued: cfg.Issued, maxBody: cfg.MaxBody, log: cfg.Logger, run: cfg.DefaultRunID, plans: cfg.Plans,
		metrics: cfg.Metrics, gather: cfg.Gatherer, ui: cfg.UI, tracer: cfg.Tracer, clock: cfg.Clock,
	}
	g.clock = clocks.Or(g.clock)
	if g.maxBody <= 0 {
		g.maxBody = DefaultMaxBody
	}
	g.idle = cfg.MCPSessionIdle
	if g.idle <= 0 {
		g.idle = DefaultMCPSessionIdle
	}
	perToken := cfg.MCPSessionsPerToken
	if perToken <= 0 {
		perToken = DefaultMCPSessionsPerToken
	}
	g.sessions = newMCPSessions(perToken, g.idle, g.clock)
	g.bodyTimeout = cfg.BodyTimeout
	if g.bodyTimeout <= 0 {
		g.bodyTimeout = DefaultBodyTimeout
	}
	g.longestCall = longestCall(g.m)
	g.proxies = cfg.TrustedProxies
	g.throttle = cfg.Throttle
	if g.throttle == nil {
		g.throttle = NewThrottle(nil)
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	for _, t := range g.m.Tools {
		s, err := newArgsSchema(t)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.schemas[t.Name] = s
		if c, ok := cfg.Funcs[t.Name]; ok {
			g.callers[t.Name] = c
			continue
		}
		if t.Upstream != nil && !t.RunByCaller() {
			c, ok := cfg.Upstreams[t.Upstream.Name]
			if !ok {
				return nil, fmt.Errorf("gateway: tool %s: no client for upstream %q", t.Name, t.Upstream.Name)
			}
			g.callers[t.Name] = c
		}
	}
	ups := make(map[string]any, len(cfg.Upstreams))
	for n, c := range cfg.Upstreams {
		ups[n] = c
	}
	g.pass = newPassThrough(g.m, ups, g.log.Warn)
	g.buildRoutes()
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	g.mcp = g.newMCPServer(version)
	return g, nil
}

// CallRequest is one tool call from an agent.
type CallRequest struct {
	Tool  string          `json:"tool"`
	Args  json.RawMessage `json:"args"`
	RunID string          `json:"run_id,omitempty"`

	// Transport ("mcp" or "http") and CallID (the JSON-RPC request id, or
	// the HTTP request's X-Request-Id) name the call in its span.
	Transport string `json:"-"`
	CallID    string `json:"-"`
	// TraceParent and TraceState are the caller's W3C trace context.
	TraceParent, TraceState string `json:"-"`
	// Progress relays the upstream's progress reports to the caller (an
	// MCP caller that sent a progressToken); nil: none asked for.
	Progress func(upstream.Progress) `json:"-"`
	// InputResponses and RequestState: an MCP agent's retry of a read whose
	// upstream asked for input, passed on to the upstream as they came.
	InputResponses json.RawMessage `json:"-"`
	RequestState   string          `json:"-"`
	// Peer is the agent's MCP session, for an upstream that relays its
	// server's messages to it during a read; nil: not an MCP call.
	Peer upstream.Peer `json:"-"`
	// WaitsToEnd: the answer goes nowhere once ctx ends (an HTTP request
	// whose connection closed, an MCP request cancelled), so a write
	// without respond_within is answered when it ends (airlock.Call).
	WaitsToEnd bool `json:"-"`
	// GiveUp ends the wait for the answer, the request's context going on
	// (airlock.Call.GiveUp): an MCP request cancelled in its session.
	GiveUp <-chan struct{} `json:"-"`
}

// Call is the one call path of MCP and POST /v1/calls. Errors are bad
// input, refusals and an unreachable store: in each case nothing ran.
func (g *Gateway) Call(ctx context.Context, req *CallRequest) (*airlock.Answer, error) {
	return g.serve(ctx, req, g.call)
}

// serve is what every call of a tool goes through, whoever runs it: its
// identifiers checked before a span, a metric or a claim holds them, its
// span, and its metrics. An answer and an error both nil (a claim its
// caller now holds) is counted when the claim is finished.
func (g *Gateway) serve(ctx context.Context, req *CallRequest, call func(context.Context, *route, *CallRequest) (*airlock.Answer, error)) (*airlock.Answer, error) {
	if len(req.Tool) > maxToolName {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "tool", "is %d bytes; a tool name is at most 64 characters; the tools are: %s", len(req.Tool), strings.Join(g.callableNames(), ", "))
	}
	if err := airlock.CheckText("tool", req.Tool); err != nil {
		return nil, err
	}
	if err := airlock.CheckRunID(req.RunID, g.guard.MaxRunIDBytes()); err != nil {
		return nil, err
	}
	// Optional identifiers that only name the call in its span: one that
	// is too long or not text is left out rather than refused.
	for _, id := range []*string{&req.CallID, &req.TraceParent, &req.TraceState} {
		if len(*id) > maxOptionalID || airlock.CheckText("", *id) != nil {
			*id = ""
		}
	}
	var span airlock.Span
	if g.tracer != nil {
		ctx = g.tracer.Continue(ctx, req.TraceParent, req.TraceState)
		ctx, span = g.tracer.Start(ctx, airlock.SpanExecuteTool+" "+req.Tool,
			airlock.Attr{Key: airlock.AttrOperationName, Value: airlock.SpanExecuteTool},
			airlock.Attr{Key: airlock.AttrToolName, Value: req.Tool},
			airlock.Attr{Key: airlock.AttrToolType, Value: "function"},
			airlock.Attr{Key: airlock.AttrToolCallID, Value: req.CallID},
			airlock.Attr{Key: airlock.AttrRunID, Value: req.RunID},
			airlock.Attr{Key: airlock.AttrTransport, Value: req.Transport})
	} else if req.TraceParent != "" {
		ctx = withPassedTrace(ctx, req.TraceParent, req.TraceState)
	}
	r := g.routes[req.Tool]
	a, err := call(ctx, r, req)
	if span != nil {
		if a != nil {
			span.Set(airlock.Attr{Key: airlock.AttrStatus, Value: string(a.Status)}, airlock.Attr{Key: airlock.AttrRepeat, Value: a.Repeat})
			if a.Plan != nil {
				span.Set(airlock.Attr{Key: airlock.AttrPlanID, Value: a.Plan.ID}, airlock.Attr{Key: airlock.AttrPlanStatus, Value: string(a.Plan.Status)})
			}
		}
		span.End(err)
	}
	if g.metrics != nil && (a != nil || err != nil) {
		g.observe(r, req, a, err)
	}
	return a, err
}

// traceOf is the trace context to pass to an upstream: the current span's
// when tracing, else the caller's own traceparent, passed through as it
// came.
func (g *Gateway) traceOf(ctx context.Context) (traceparent, tracestate string) {
	if g.tracer != nil {
		return g.tracer.Parent(ctx)
	}
	if t, ok := ctx.Value(passedTraceKey{}).(passedTrace); ok {
		return t.parent, t.state
	}
	return "", ""
}

type passedTraceKey struct{}

type passedTrace struct{ parent, state string }

func withPassedTrace(ctx context.Context, parent, state string) context.Context {
	return context.WithValue(ctx, passedTraceKey{}, passedTrace{parent, state})
}

// observe feeds the metrics: the call's outcome, repeats, plans, and the
// run's count of side-effecting calls at each new one.
func (g *Gateway) observe(r *route, req *CallRequest, a *airlock.Answer, err error) {
	kind := metrics.UnknownKind
	name := req.Tool
	if r != nil {
		name, kind = r.metricName, r.metricKind
	} else if t := g.m.Tool(req.Tool); t != nil { // an irreversible tool called by name
		kind = t.Kind
	} else if base, ok := strings.CutPrefix(req.Tool, PlanPrefix); ok && g.m.Tool(base) != nil { // plans are off
		name, kind = base, airlock.KindIrreversible
	} else if req.Tool == PlanStatusTool {
		kind = airlock.KindRead
	}
	g.metrics.Call(name, kind, a, err)
	if err != nil || a == nil || a.Repeat {
		return
	}
	if a.Plan != nil {
		return // the plan service observes plans
	}
	if kind == airlock.KindWrite && req.RunID != "" {
		g.metrics.RunCall(name, req.RunID)
	}
}

func (g *Gateway) call(ctx context.Context, r *route, req *CallRequest) (*airlock.Answer, error) {
	if r == nil {
		if t := g.irreversibleNamed(req.Tool); t != nil {
			return nil, g.refuseIrreversible(t)
		}
		return nil, airlock.FieldErrorf(airlock.CodeUnknownTool, "tool", "no tool named %q; the tools are: %s", req.Tool, strings.Join(g.callableNames(), ", "))
	}
	switch r.kind {
	case routePlanStatus:
		return g.planStatus(ctx, req.Args)
	case routePlan:
		return g.propose(ctx, r, req)
	case routeCaller:
		return nil, airlock.FieldErrorf(airlock.CodeNotCallable, "tool",
			"%s is run by its caller through the claims API (POST /v1/claims); it cannot be called here; nothing was executed", r.tool.Name)
	}
	tool, caller := r.tool, r.caller
	if caller == nil {
		return nil, airlock.FieldErrorf(airlock.CodeNotCallable, "tool", "tool %s has no upstream configured; nothing was executed", tool.Name)
	}
	args, err := g.parseArgs(r, req.Args)
	if err != nil {
		return nil, err
	}
	canon := args.JSON()

	if r.kind == routeRead {
		ctx, cancel := context.WithTimeout(ctx, tool.TimeoutOr())
		defer cancel()
		tp, ts := g.traceOf(ctx)
		out := caller.Call(ctx, &upstream.Request{Tool: tool, Args: canon, TraceParent: tp, TraceState: ts, Progress: req.Progress,
			InputResponses: req.InputResponses, RequestState: req.RequestState, Peer: req.Peer})
		switch out.Kind {
		case airlock.OutcomeSucceeded:
			return &airlock.Answer{Status: airlock.StatusSucceeded, Result: out.Result, Content: out.Content}, nil
		case airlock.OutcomeFailed:
			if out.Err != nil {
				// The service refused the request itself (an MCP server's
				// JSON-RPC error); over MCP it reaches the agent as it came.
				return nil, &airlock.Error{Code: airlock.CodeUpstream, Err: out.Err,
					Message: fmt.Sprintf("%s was refused by its service: %v; nothing was changed", tool.Name, out.Err)}
			}
			return &airlock.Answer{Status: airlock.StatusFailed, Result: out.Result, Content: out.Content}, nil
		default:
			return nil, &airlock.Error{Code: airlock.CodeUpstream, Err: out.Err,
				Message: fmt.Sprintf("%s could not be read from its service; nothing was changed and it is safe to try again later", tool.Name)}
		}
	}
	return g.guard.Do(ctx, &airlock.Call{Tool: tool, Calendar: &g.m.Calendar, Args: args, RunID: req.RunID, WaitsToEnd: req.WaitsToEnd, GiveUp: req.GiveUp},
		func(ctx context.Context, key string) airlock.Outcome {
			tp, ts := g.traceOf(ctx)
			// Progress goes to the caller whose call runs the side effect
			// (a repeat runs nothing and hears nothing).
			return caller.Call(ctx, &upstream.Request{Tool: tool, Args: canon, Key: key, TraceParent: tp, TraceState: ts, Progress: req.Progress})
		})
}

// parseArgs is the edge where a call's arguments are parsed, once, and
// checked against the tool's input schema; the one value travels down to
// the guard or the plan service and on to the upstream as it is.
func (g *Gateway) parseArgs(r *route, raw json.RawMessage) (*airlock.Args, error) {
	args, err := airlock.NewArgs(raw)
	if err != nil {
		return nil, err
	}
	if err := r.schema.validate(args); err != nil {
		return nil, err
	}
	return args, nil
}

// callableNames lists the tools an agent may call.
func (g *Gateway) callableNames() []string {
	var names []string
	for _, t := range g.m.Tools {
		switch {
		case t.RunByCaller():
		case t.Kind != airlock.KindIrreversible:
			names = append(names, t.Name)
		case g.plans != nil:
			names = append(names, PlanPrefix+t.Name)
		}
	}
	if g.plans != nil && len(names) > 0 {
		names = append(names, PlanStatusTool)
	}
	return names
}

// AnswerObject is the JSON an agent receives (POST /v1/calls, and MCP
// structured content): the answer, never the key.
func AnswerObject(a *airlock.Answer) *AnswerBody {
	obj := &AnswerBody{Status: a.Status, Repeat: a.Repeat, Result: a.Result, Conflict: a.Conflict, Message: a.Message}
	if a.Plan != nil {
		obj.Plan = AgentPlan(a.Plan)
	}
	return obj
}

// AnswerBody is AnswerObject's JSON; its members in the order of their
// names, as a map's would be written (one allocation, not a map's five).
type AnswerBody struct {
	Conflict *airlock.Conflict `json:"conflict,omitempty"`
	Message  string            `json:"message,omitempty"`
	Plan     map[string]any    `json:"plan,omitempty"`
	Repeat   bool              `json:"repeat"`
	Result   json.RawMessage   `json:"result,omitempty"`
	Status   airlock.Status    `json:"status"`
}

// AgentPlan is what an agent learns of a plan: its id, tool, status, the
// rule that decided and how, when it expires, and once carried out its
// result or error — not the rules' conditions, the facts or the decision
// hash (an agent that knew the automatic-approval threshold could split
// the work to stay under it). Approvers and admins read the whole plan
// (/v1/plans, the page).
func AgentPlan(p *airlock.Plan) map[string]any {
	v := map[string]any{"id": p.ID, "tool": p.Tool, "status": p.Status, "rule": p.Rule, "decision": p.Decision,
		"created_at": p.CreatedAt, "expires_at": p.ExpiresAt}
	if len(p.Result) > 0 {
		v["result"] = p.Result
	}
	if p.Error != "" {
		v["error"] = p.Error
	}
	return v
}

// decodeBody reads a JSON body into v, capped at maxBody, refusing
// unknown fields; errors name the problem.
func (g *Gateway) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	// What is in the body is all there is: a parameter in the query would
	// be read by nothing (docs/gateway.md).
	if _, err := queryOf(r); err != nil {
		return err
	}
	if err := jsonMediaType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	if err == nil {
		bodyRead(w)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return airlock.Errorf(airlock.CodeTooLarge, "the request body is larger than %d bytes (the limit is limits.request_bytes in the manifest); nothing was executed", g.maxBody)
		}
		return airlock.Errorf(airlock.CodeInvalidArgument, "reading the request body: %v", err)
	}
	// Before decoding: encoding/json would turn invalid UTF-8 in a run id
	// into U+FFFD, and two distinct values into one.
	if err := airlock.CheckJSONEncoding("body", body); err != nil {
		return err
	}
	if err := checkMemberNames(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && strings.HasPrefix(typeErr.Value, "number ") && goTypeWord(typeErr.Type.Kind().String()) == "a number":
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, typeErr.Field, "field %q is %s, beyond any number it can hold; nothing was executed", typeErr.Field, strings.TrimPrefix(typeErr.Value, "number "))
		case errors.As(err, &typeErr):
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, typeErr.Field, "field %q must be %s, not a JSON %s; nothing was executed", typeErr.Field, goTypeWord(typeErr.Type.Kind().String()), typeErr.Value)
		case errors.As(err, &syntaxErr):
			return airlock.Errorf(airlock.CodeInvalidArgument, "the request body is not valid JSON (at byte %d): %v; nothing was executed", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, f, "unknown field %q in the request body; nothing was executed", f)
		case errors.Is(err, io.EOF):
			return airlock.Errorf(airlock.CodeInvalidArgument, "the request body is empty: want a JSON object; nothing was executed")
		}
		return airlock.Errorf(airlock.CodeInvalidArgument, "the request body is not valid JSON: %v; nothing was executed", err)
	}
	if dec.More() {
		return airlock.Errorf(airlock.CodeInvalidArgument, "the request body has more than one JSON value; nothing was executed")
	}
	return nil
}

// checkMemberNames refuses, in one pass over the body, a member named
// twice at any depth (airlock.CheckJSONNames) and a member of the body's
// object whose name is not exactly one of v's fields: encoding/json
// matches names without regard to case (and folds ſ to s), the last match
// winning, so {"tool":"save_note","TOOL":"charge"} would run what a
// reader of exact names — a proxy, a log, another language — sees as
// save_note. Nested values are kept raw (args, result), so the top level
// is all there is to match against v. Other faults are the decoder's to
// report.
func checkMemberNames(body []byte, v any) error {
	names := fieldNames(reflect.TypeOf(v))
	if names == nil {
		return airlock.CheckJSONNames("", body)
	}
	dec := nameDecoders.Get().(*jsontext.Decoder)
	defer nameDecoders.Put(dec)
	dec.Reset(bytes.NewReader(body))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil // not an object: the decoder says what it is
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return airlock.DuplicateNameError("", err)
		}
		name := tok.String()
		if !names[name] {
			for known := range names {
				if strings.EqualFold(known, name) {
					return airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "unknown field %q in the request body: names are exact, and this is not %q; nothing was executed", name, known)
				}
			}
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "unknown field %q in the request body; nothing was executed", name)
		}
		if err := dec.SkipValue(); err != nil {
			return airlock.DuplicateNameError("", err)
		}
	}
	return nil
}

// nameDecoders are exactMemberNames' decoders, kept between requests.
var nameDecoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// fieldNamesOf caches the JSON names of request types' fields.
var fieldNamesOf sync.Map // reflect.Type → map[string]bool

// fieldNames are the JSON names of the fields of the struct t points to;
// nil for anything else.
func fieldNames(t reflect.Type) map[string]bool {
	if cached, ok := fieldNamesOf.Load(t); ok {
		return cached.(map[string]bool)
	}
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	names := map[string]bool{}
	for f := range t.Elem().Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = true
	}
	fieldNamesOf.Store(t, names)
	return names
}

// goTypeWord names a Go kind as a JSON type, for a caller who never saw
// the Go.
func goTypeWord(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "float32", "float64":
		return "a number"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	}
	return "a JSON value of another type"
}

// jsonMediaType refuses a body sent as anything but JSON: a body whose
// Content-Type says text or a form is not read as JSON behind its
// sender's back. No Content-Type is taken as JSON.
func jsonMediaType(contentType string) error {
	if contentType == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	isJSON := err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json") && len(mt) > len("application/+json"))
	if cs, ok := params["charset"]; isJSON && ok && !strings.EqualFold(cs, "utf-8") {
		// Read as UTF-8 whatever it says, the text would be other text to
		// a proxy that decodes it by its label.
		return airlock.FieldErrorf(airlock.CodeUnsupportedMedia, "Content-Type", "the body's charset is %q: send JSON as UTF-8 (charset=utf-8, or none); nothing was executed", cs)
	}
	if isJSON {
		return nil
	}
	return airlock.FieldErrorf(airlock.CodeUnsupportedMedia, "Content-Type", "the body's Content-Type is %q: send it as JSON, with Content-Type: application/json; nothing was executed", contentType)
}
