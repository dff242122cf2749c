package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
)

var (
	agents    = []string{airlock.RoleAgent, airlock.RoleAdmin}
	readers   = []string{airlock.RoleApprover, airlock.RoleAdmin}
	adminOnly = []string{airlock.RoleAdmin}
)

// Handler is the whole HTTP surface: /mcp, /v1/..., /healthz, /readyz.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", g.handleReady)
	mux.Handle("POST /v1/calls", g.require(agents, http.HandlerFunc(g.handleCall)))
	mux.Handle("POST /v1/claims", g.require(agents, http.HandlerFunc(g.handleClaim)))
	mux.Handle("POST /v1/claims/{claim}/renew", g.require(agents, http.HandlerFunc(g.handleRenew)))
	mux.Handle("POST /v1/claims/{claim}/complete", g.require(agents, http.HandlerFunc(g.handleComplete)))
	mux.Handle("POST /v1/commits/next", g.require(agents, http.HandlerFunc(g.handleNextCommit)))
	mux.Handle("GET /v1/tools", g.require(readers, http.HandlerFunc(g.handleTools)))
	mux.Handle("GET /v1/records", g.require(readers, http.HandlerFunc(g.handleRecords)))
	mux.Handle("GET /v1/records/{key}", g.require(readers, http.HandlerFunc(g.handleRecord)))
	mux.Handle("POST /v1/records/{key}/settle", g.require(adminOnly, http.HandlerFunc(g.handleSettle)))
	mux.Handle("GET /v1/report", g.require(readers, http.HandlerFunc(g.handleReport)))
	mux.Handle("GET /v1/audit", g.require(readers, http.HandlerFunc(g.handleAudit)))
	if g.gather != nil {
		mux.Handle("GET /metrics", g.require(adminOnly, promhttp.HandlerFor(g.gather, promhttp.HandlerOpts{})))
	}
	if g.plans != nil {
		mux.Handle("GET /v1/plans", g.require(readers, http.HandlerFunc(g.handlePlans)))
		mux.Handle("GET /v1/plans/{id}", g.require(readers, http.HandlerFunc(g.handlePlan)))
		mux.Handle("POST /v1/plans/{id}/approve", g.require(readers, g.handleDecide(true)))
		mux.Handle("POST /v1/plans/{id}/reject", g.require(readers, g.handleDecide(false)))
	}

	if g.issued != nil && g.m.Auth.Resource != "" {
		// RFC 9728: where MCP clients learn which authorization servers
		// issue tokens for airlock. Public, like any discovery document.
		meta := g.resourceMetadata()
		u, _ := url.Parse(manifest.ResourceMetadataURL(g.m.Auth.Resource))
		mux.Handle(u.Path, meta)
		if u.Path != "/.well-known/oauth-protected-resource" {
			mux.Handle("/.well-known/oauth-protected-resource", meta)
		}
	}
	server := func(*http.Request) *mcp.Server { return g.mcp }
	// airlock closes idle sessions itself (sessions.go): the SDK does not
	// see the requests the fast path answers.
	stateful := mcp.NewStreamableHTTPHandler(server, StreamableOptions(g.maxBody, 0))
	stateless := mcp.NewStreamableHTTPHandler(server, StatelessOptions(g.maxBody))
	// The MCP spec asks servers to check Origin: a browser page on another
	// origin must not drive the agent's tools.
	mux.Handle("/mcp", g.require(agents, http.NewCrossOriginProtection().Handler(g.mcpFront(stateful, stateless))))

	if g.ui != nil {
		mux.Handle("/ui/", g.ui)
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, g.log, airlock.Errorf(airlock.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return g.withDeadlines(mux)
}

// withDeadlines bounds what one request may hold a connection for: its body
// must arrive within the body timeout (a client that sends a byte now and
// then is cut off, and so is the server's drain of a body it never read,
// such as one sent without a token), and the answer must be written within
// the longest legitimate call. The MCP stream a client opens with GET is
// the one exception: it lasts as long as its session, which closes when
// idle.
func (g *Gateway) withDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(now.Add(g.bodyTimeout))
		}
		if r.Method != http.MethodGet || r.URL.Path != "/mcp" {
			_ = rc.SetWriteDeadline(now.Add(g.longestCall))
		}
		next.ServeHTTP(w, r)
	})
}

// bodyRead ends the body's deadline once it is read: a call may then run
// as long as it legitimately does (a read deadline passing mid-call would
// cancel the request).
func bodyRead(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// handleReady answers whether a claim could be written now: the store is
// migrated and takes a write of its own. The answer is unauthenticated, so
// it says what is wrong in general words; the log has the error (and no
// connection string is ever in either). A probe is reused for a second, so
// that probes cannot flood the store with commits.
func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	p := g.ready.check(r.Context(), g.clock.Now(), func(ctx context.Context) probe {
		if err := g.store.Ping(ctx); err != nil {
			return probe{"the store is not reachable or not migrated", err}
		}
		if err := g.store.ProbeWrite(ctx); err != nil {
			return probe{"the store does not take writes (disk full, read-only, or a standby?)", err}
		}
		return probe{}
	})
	if p.err != nil {
		g.log.Warn("airlock: not ready", "reason", p.reason, "err", p.err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": p.reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// probe is a readiness check's outcome: the reason in general words (for
// the unauthenticated answer) and the error itself (for the log).
type probe struct {
	reason string
	err    error
}

// readiness caches the last probe for a second of the gateway's clock.
type readiness struct {
	mu   sync.Mutex
	at   time.Time
	last probe
}

func (rd *readiness) check(ctx context.Context, now time.Time, run func(context.Context) probe) probe {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && now.Sub(rd.at) < time.Second {
		return rd.last
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rd.last, rd.at = run(ctx), now
	return rd.last
}

func (g *Gateway) handleCall(w http.ResponseWriter, r *http.Request) {
	req, err := g.readCall(w, r, "http", "the tool's name", g.callableNames())
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	req.WaitsToEnd = true // a request whose context ended has nobody to answer
	a, err := g.Call(r.Context(), req)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, AnswerObject(a))
}

// readCall reads the {"tool", "args", "run_id"} of a call or a claim, with
// the run, request id and trace context of its headers.
func (g *Gateway) readCall(w http.ResponseWriter, r *http.Request, transport, what string, tools []string) (*CallRequest, error) {
	var req CallRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if req.Tool == "" {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "tool", "required: %s; the tools are: %s", what, strings.Join(tools, ", "))
	}
	if req.RunID == "" {
		req.RunID = r.Header.Get(RunHeader)
	}
	req.Transport, req.CallID = transport, r.Header.Get("X-Request-Id")
	req.TraceParent, req.TraceState = r.Header.Get("traceparent"), r.Header.Get("tracestate")
	return &req, nil
}

func (g *Gateway) handleTools(w http.ResponseWriter, r *http.Request) {
	if _, err := queryOf(r); err != nil {
		writeError(w, g.log, err)
		return
	}
	out := make([]airlock.ToolInfo, 0, len(g.m.Tools))
	for _, t := range g.m.Tools {
		out = append(out, t.Info())
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

func (g *Gateway) handleRecord(w http.ResponseWriter, r *http.Request) {
	if _, err := queryOf(r); err != nil {
		writeError(w, g.log, err)
		return
	}
	rec, err := g.guard.Get(r.Context(), r.PathValue("key"))
	if err != nil {
		if airlock.ErrorCode(err) == airlock.CodeNotFound || errors.Is(err, airlock.ErrNotFound) {
			err = airlock.FieldErrorf(airlock.CodeNotFound, "key", "no record with key %s", r.PathValue("key"))
		}
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// settleRequest is the body of POST /v1/records/{key}/settle.
type settleRequest struct {
	Happened *bool           `json:"happened"`
	Result   json.RawMessage `json:"result"`
	Note     string          `json:"note"`
}

func (g *Gateway) handleSettle(w http.ResponseWriter, r *http.Request) {
	var req settleRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		writeError(w, g.log, err)
		return
	}
	if req.Happened == nil {
		writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "happened", "required: true (it happened; give its result) or false (it did not; the key is freed)"))
		return
	}
	p, _ := PrincipalFrom(r.Context())
	rec, err := g.guard.Settle(r.Context(), airlock.SettleRequest{Key: r.PathValue("key"), Happened: *req.Happened, Result: req.Result, Note: req.Note, By: p.Name, Role: p.Role})
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// queryOf is a request's query when it names only the given parameters,
// each at most once; otherwise an invalid_argument error naming the
// parameter (a repeated one would silently take its first value).
func queryOf(r *http.Request, names ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// The pairs it could read are in q, the others dropped: refused,
		// since a dropped pair would be read as absent.
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "query", "the query cannot be read (%v): separate parameters with &, and escape ; as %%3B", err)
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if len(names) == 0 {
			return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "unknown parameter %q: this request takes no query parameters", name)
		}
		if !slices.Contains(names, name) {
			return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "unknown parameter %q: the parameters are %s", name, strings.Join(names, ", "))
		}
		if n := len(q[name]); n > 1 {
			return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "given %d times: give %s once", n, name)
		}
		if q.Get(name) == "" && name != "after" {
			// (An empty cursor is the first page, as a client that follows
			// next_after from "" sends it.)
			return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "is empty: give %s a value, or leave it out", name)
		}
	}
	return q, nil
}

func (g *Gateway) handleReport(w http.ResponseWriter, r *http.Request) {
	period := 24 * time.Hour
	q, err := queryOf(r, "since")
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "since", "%q is not a period: want a duration such as 24h", v))
			return
		}
		period = d
	}
	rep, err := metrics.Compute(r.Context(), g.store, &g.m.Catalog, period, g.clock.Now())
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// handleAudit serves a key's or a plan's audit events a page at a time:
// ?key=…&plan_id=…&after=ID&limit=N. The answer's next_after is the cursor
// of the next page (0: there is none).
func (g *Gateway) handleAudit(w http.ResponseWriter, r *http.Request) {
	q, err := queryOf(r, "key", "plan_id", "after", "limit")
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	if q.Has("key") && q.Has("plan_id") {
		writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "plan_id", "give key or plan_id, not both: a trail is a key's or a plan's"))
		return
	}
	f := airlock.AuditFilter{Key: q.Get("key"), PlanID: q.Get("plan_id")}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "after", "%q is not a cursor: want the next_after of the previous page", v))
			return
		}
		f.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > airlock.MaxAuditPage {
			writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "limit", "%q: want a number from 1 to %d", v, airlock.MaxAuditPage))
			return
		}
		f.Limit = n
	}
	events, err := g.store.AuditTrail(r.Context(), f)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	next := int64(0)
	if len(events) == f.LimitOr() {
		next = events[len(events)-1].ID
	}
	if events == nil {
		events = []*airlock.AuditEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": events, "next_after": next})
}

// handleRecords lists the records in doubt a page at a time, most recently
// changed first: GET /v1/records?state=in_doubt&after=&limit=.
func (g *Gateway) handleRecords(w http.ResponseWriter, r *http.Request) {
	q, err := queryOf(r, "state", "after", "limit")
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	f := airlock.RecordFilter{State: airlock.State(q.Get("state")), After: q.Get("after")}
	if f.State == "" {
		f.State = airlock.StateInDoubt
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > airlock.MaxRecordPage {
			writeError(w, g.log, airlock.FieldErrorf(airlock.CodeInvalidArgument, "limit", "%q: want a number from 1 to %d", v, airlock.MaxRecordPage))
			return
		}
		f.Limit = n
	}
	recs, err := g.store.ListRecords(r.Context(), f)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	next := ""
	if len(recs) == f.LimitOr() {
		next = airlock.RecordCursor(recs[len(recs)-1])
	}
	if recs == nil {
		recs = []*airlock.Record{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": recs, "next_after": next})
}

// StreamableOptions are the streamable HTTP options /mcp is served with,
// for a body limit of maxBody bytes (0: the SDK's) and sessions closed
// after idle without a request (0: never); airlock bench serves its bare
// MCP server with them too, so that the two differ only by airlock.
func StreamableOptions(maxBody int64, idle time.Duration) *mcp.StreamableHTTPOptions {
	return &mcp.StreamableHTTPOptions{MaxRequestBodyBytes: maxBody, SessionTimeout: idle}
}

// StatelessOptions are the options /mcp serves 2026-07-28 requests with
// (no session; each request is whole), for a body limit of maxBody bytes.
func StatelessOptions(maxBody int64) *mcp.StreamableHTTPOptions {
	return &mcp.StreamableHTTPOptions{MaxRequestBodyBytes: maxBody, Stateless: true}
}
