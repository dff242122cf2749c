package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/tracing"
)

// The traced upstreams remember the trace context each request carried.
type traceSeen struct {
	mu   sync.Mutex
	seen map[string][2]string // record_id → traceparent, idempotency key
}

func (s *traceSeen) put(record, traceparent, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[record] = [2]string{traceparent, key}
}

func (s *traceSeen) get(record string) (traceparent, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.seen[record]
	return v[0], v[1]
}

const traceManifest = `version: 1
upstreams:
  ledger: {http: "LEDGER"}
  notes: {mcp: {url: "NOTES"}}
tools:
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: ledger, path: /notes/add}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
  - name: mcp_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: notes, tool: write}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: ledger, path: /pay}
    answers: {undo: "no", approver: "the rule", on_repeat: "one payment per record"}
    approval: {rules: [{name: all, when: "true", decide: auto}]}
  - name: pay_big
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: ledger, path: /pay}
    answers: {undo: "no", approver: "a person", on_repeat: "one payment per record"}
    approval: {rules: [{name: people, when: "true", decide: human}]}
  - name: save_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
    - {name: alice, role: approver, sha256: "APPROVER"}
`

type traceBundle struct {
	app      *app.App
	url      string
	spans    *tracetest.SpanRecorder
	upstream *traceSeen
}

const (
	agentToken    = "trace-test-agent-token"
	approverToken = "trace-test-approver-token"
)

func setupTracing(t *testing.T) *traceBundle {
	t.Helper()
	seen := &traceSeen{seen: map[string][2]string{}}
	ledger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			RecordID string `json:"record_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		seen.put(in.RecordID, r.Header.Get("traceparent"), r.Header.Get("Idempotency-Key"))
		_ = json.NewEncoder(w).Encode(map[string]any{"record_id": in.RecordID, "done": true})
	}))
	t.Cleanup(ledger.Close)
	notes := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "v1"}, nil)
	type writeArgs struct {
		RecordID string `json:"record_id"`
	}
	mcp.AddTool(notes, &mcp.Tool{Name: "write"}, func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, map[string]any, error) {
		tp, _ := req.Params.Meta["traceparent"].(string)
		key, _ := req.Params.Meta["io.airlock/idempotency-key"].(string)
		seen.put(in.RecordID, tp, key)
		return nil, map[string]any{"written": true}, nil
	})
	notesSrv := upstreamServer(t, notes, nil)

	hash, approver := gateway.HashToken(agentToken), gateway.HashToken(approverToken)
	yaml := strings.NewReplacer("LEDGER", ledger.URL, "NOTES", notesSrv.URL, "HASH", fmt.Sprintf("%x", hash[:]),
		"APPROVER", fmt.Sprintf("%x", approver[:])).Replace(traceManifest)
	m, err := manifest.Parse([]byte(yaml), "trace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.TokensFromManifest(m.Auth.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := serveApp(t, &app.Config{Manifest: m, Tokens: tokens, Tracer: tracing.New(tp, "test"), CommitPoll: 20 * time.Millisecond})
	return &traceBundle{app: srv.App, url: srv.URL, spans: rec, upstream: seen}
}

// post sends body to path with a token and a traceparent.
func (b *traceBundle) post(t *testing.T, path, token, body, traceparent string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", b.url+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %v %v", path, resp.StatusCode, out, err)
	}
	return out
}

// callHTTP posts a call with a traceparent and returns the answer.
func (b *traceBundle) callHTTP(t *testing.T, tool, args, traceparent, requestID string) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"tool":%q,"args":%s,"run_id":"run-trace"}`, tool, args)
	req, _ := http.NewRequest("POST", b.url+"/v1/calls", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("traceparent", traceparent)
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/calls %s: %d %v %v", tool, resp.StatusCode, out, err)
	}
	return out
}

// spansOf are the ended spans of one trace, by name.
func (b *traceBundle) spansOf(traceID trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range b.spans.Ended() {
		if s.SpanContext().TraceID() == traceID {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// one returns the single span named name, failing otherwise.
func one(t *testing.T, spans map[string][]sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	if len(spans[name]) != 1 {
		t.Fatalf("%d spans named %q, want 1 (have %v)", len(spans[name]), name, names(spans))
	}
	return spans[name][0]
}

func names(spans map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n, s := range spans {
		out = append(out, fmt.Sprintf("%s×%d", n, len(s)))
	}
	return out
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %s: %s = %q, want %q (all: %v)", s.Name(), k, got[k], v, got)
		}
	}
}

func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %s: parent %s, want %s (%s)", child.Name(), child.Parent().SpanID(), parent.SpanContext().SpanID(), parent.Name())
	}
}

// noPersonalData checks that no span attribute holds a value the agent
// sent: the natural key's inputs stay out of traces.
func noPersonalData(t *testing.T, spans map[string][]sdktrace.ReadOnlySpan, values ...string) {
	t.Helper()
	for _, ss := range spans {
		for _, s := range ss {
			for k, v := range attrs(s) {
				for _, p := range values {
					if strings.Contains(v, p) {
						t.Errorf("span %s: attribute %s = %q holds the argument %q", s.Name(), k, v, p)
					}
				}
			}
		}
	}
}

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

func TestTracesOfACallARepeatAndAPlan(t *testing.T) {
	t.Parallel()
	b := setupTracing(t)
	traceID, _ := trace.TraceIDFromHex(callerTrace)

	t.Run("ACallOverHTTP", func(t *testing.T) {
		out := b.callHTTP(t, "add_note", `{"record_id":"R-7731","text":"Alice Example's refund"}`, "00-"+callerTrace+"-"+callerSpan+"-01", "req-1")
		if out["status"] != "succeeded" {
			t.Fatalf("answer %v", out)
		}
		spans := b.spansOf(traceID)
		call := one(t, spans, "execute_tool add_note")
		if call.Parent().SpanID().String() != callerSpan || !call.Parent().IsRemote() {
			t.Errorf("the call's span does not continue the caller's traceparent: parent %v", call.Parent())
		}
		if call.SpanKind() != trace.SpanKindServer {
			t.Errorf("execute_tool kind %v, want server", call.SpanKind())
		}
		wantAttrs(t, call, map[string]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add_note", "gen_ai.tool.type": "function",
			"gen_ai.tool.call.id": "req-1", "airlock.transport": "http", "airlock.status": "succeeded",
			"airlock.repeat": "false", "airlock.run_id": "run-trace",
		})
		claim, effect, done := one(t, spans, airlock.SpanClaim), one(t, spans, airlock.SpanSideEffect), one(t, spans, airlock.SpanComplete)
		for _, s := range []sdktrace.ReadOnlySpan{claim, effect, done} {
			childOf(t, s, call)
		}
		wantAttrs(t, claim, map[string]string{"airlock.claimed": "true", "airlock.window": "forever"})
		wantAttrs(t, effect, map[string]string{"airlock.outcome": "succeeded", "airlock.timed_out": "false", "airlock.attempts": "1"})
		wantAttrs(t, done, map[string]string{"airlock.record.state": "succeeded"})
		key := attrs(claim)["airlock.key"]
		// The upstream got the trace context beside the key: the side
		// effect's span is its parent.
		tp, sentKey := b.upstream.get("R-7731")
		if want := "00-" + callerTrace + "-" + effect.SpanContext().SpanID().String() + "-01"; tp != want {
			t.Errorf("the HTTP upstream's traceparent %q, want %q", tp, want)
		}
		if sentKey == "" || sentKey != key {
			t.Errorf("the HTTP upstream's Idempotency-Key %q, the span's key %q", sentKey, key)
		}
		noPersonalData(t, spans, "R-7731", "Alice")
	})

	t.Run("ARepeat", func(t *testing.T) {
		repeatTrace := "5bf92f3577b34da6a3ce929d0e0e4736"
		out := b.callHTTP(t, "add_note", `{"record_id":"R-7731","text":"Alice Example's refund"}`, "00-"+repeatTrace+"-"+callerSpan+"-01", "req-2")
		if out["repeat"] != true {
			t.Fatalf("answer %v", out)
		}
		id, _ := trace.TraceIDFromHex(repeatTrace)
		spans := b.spansOf(id)
		call := one(t, spans, "execute_tool add_note")
		wantAttrs(t, call, map[string]string{"airlock.repeat": "true", "airlock.status": "succeeded", "gen_ai.tool.call.id": "req-2"})
		served := one(t, spans, airlock.SpanRepeatServed)
		childOf(t, served, call)
		wantAttrs(t, served, map[string]string{"airlock.record.state": "succeeded", "airlock.status": "succeeded"})
		if len(spans[airlock.SpanSideEffect]) != 0 {
			t.Errorf("a repeat has a side effect span: %v", names(spans))
		}
	})

	t.Run("ACallOverMCP", func(t *testing.T) {
		mcpTrace := "6bf92f3577b34da6a3ce929d0e0e4736"
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil)
		s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(agentToken)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "mcp_note", Arguments: map[string]any{"record_id": "M-1"},
			Meta: mcp.Meta{"traceparent": "00-" + mcpTrace + "-" + callerSpan + "-01", gateway.MetaCallID: "call_abc"}})
		if err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
		id, _ := trace.TraceIDFromHex(mcpTrace)
		spans := b.spansOf(id)
		call := one(t, spans, "execute_tool mcp_note")
		wantAttrs(t, call, map[string]string{"airlock.transport": "mcp", "gen_ai.tool.call.id": "call_abc", "airlock.status": "succeeded"})
		effect := one(t, spans, airlock.SpanSideEffect)
		tp, key := b.upstream.get("M-1")
		if want := "00-" + mcpTrace + "-" + effect.SpanContext().SpanID().String() + "-01"; tp != want {
			t.Errorf("the MCP upstream's _meta traceparent %q, want %q", tp, want)
		}
		if key == "" {
			t.Error("the MCP upstream got no key in _meta")
		}
	})

	t.Run("ACommittedPlan", func(t *testing.T) {
		planTrace := "7bf92f3577b34da6a3ce929d0e0e4736"
		out := b.callHTTP(t, "plan_pay", `{"record_id":"P-1"}`, "00-"+planTrace+"-"+callerSpan+"-01", "req-3")
		pl, _ := out["plan"].(map[string]any)
		planID, _ := pl["id"].(string)
		if planID == "" {
			t.Fatalf("answer %v", out)
		}
		waitFor(t, "the plan to commit", func() bool {
			p, err := b.app.Plans.Get(context.Background(), planID)
			return err == nil && p.Status == airlock.PlanCommitted
		})
		id, _ := trace.TraceIDFromHex(planTrace)
		spans := b.spansOf(id)
		call := one(t, spans, "execute_tool plan_pay")
		propose := one(t, spans, airlock.SpanPlanPropose)
		childOf(t, propose, call)
		wantAttrs(t, propose, map[string]string{"airlock.plan.id": planID, "airlock.plan.decision": "auto", "airlock.plan.rule": "all"})
		// The commit runs in the worker, later: its own trace, found by
		// the plan's id.
		var commit sdktrace.ReadOnlySpan
		waitFor(t, "the commit span", func() bool {
			for _, s := range b.spans.Ended() {
				if s.Name() == airlock.SpanPlanCommit && attrs(s)["airlock.plan.id"] == planID {
					commit = s
					return true
				}
			}
			return false
		})
		if commit.SpanContext().TraceID() == id {
			t.Error("the commit is in the proposing call's trace; it runs later, in its own")
		}
		wantAttrs(t, commit, map[string]string{"airlock.plan.status": "committed"})
		inCommit := b.spansOf(commit.SpanContext().TraceID())
		effect := one(t, inCommit, airlock.SpanSideEffect)
		childOf(t, one(t, inCommit, airlock.SpanClaim), commit)
		childOf(t, effect, commit)
		tp, _ := b.upstream.get("P-1")
		if !strings.Contains(tp, effect.SpanContext().SpanID().String()) {
			t.Errorf("the commit's upstream traceparent %q does not name the side effect span", tp)
		}
		noPersonalData(t, spans, "P-1")
		noPersonalData(t, inCommit, "P-1")
	})
}

func TestTraceOfAPersonsDecision(t *testing.T) {
	t.Parallel()
	b := setupTracing(t)
	out := b.callHTTP(t, "plan_pay_big", `{"record_id":"B-1"}`, "00-"+callerTrace+"-"+callerSpan+"-01", "req-1")
	pl, _ := out["plan"].(map[string]any)
	planID, _ := pl["id"].(string)
	p, err := b.app.Plans.Get(context.Background(), planID)
	if err != nil || p.Status != airlock.PlanAwaitingApproval {
		t.Fatalf("plan %+v %v", p, err)
	}
	decideTrace := "8bf92f3577b34da6a3ce929d0e0e4736"
	b.post(t, "/v1/plans/"+planID+"/approve", approverToken, fmt.Sprintf(`{"reason":"checked","decision_hash":%q}`, p.DecisionHash), "00-"+decideTrace+"-"+callerSpan+"-01")
	id, _ := trace.TraceIDFromHex(decideTrace)
	decide := one(t, b.spansOf(id), airlock.SpanPlanDecide)
	if decide.Parent().SpanID().String() != callerSpan {
		t.Errorf("the decision's span does not continue the approver's traceparent: parent %v", decide.Parent())
	}
	wantAttrs(t, decide, map[string]string{"airlock.plan.id": planID, "airlock.plan.decided_by": "alice", "airlock.plan.approve": "true"})
	waitFor(t, "the commit span", func() bool {
		for _, s := range b.spans.Ended() {
			if s.Name() == airlock.SpanPlanCommit && attrs(s)["airlock.plan.id"] == planID {
				return true
			}
		}
		return false
	})
}

// Without a tracer, airlock makes no spans but passes the caller's trace
// context on to the upstream as it came.
func TestTraceparentPassesThroughWhenTracingIsOff(t *testing.T) {
	t.Parallel()
	b := setupTracing(t)
	// A second app over the same upstreams, without a tracer.
	a, err := app.New(context.Background(), &app.Config{
		Manifest: b.app.Manifest, DSN: "sqlite:" + filepath.Join(t.TempDir(), "off.db"), Migrate: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	tp := "00-" + callerTrace + "-" + callerSpan + "-01"
	if _, err := a.Gateway.Call(context.Background(), &gateway.CallRequest{Tool: "add_note", Args: json.RawMessage(`{"record_id":"OFF-1","text":"x"}`), TraceParent: tp}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.upstream.get("OFF-1"); got != tp {
		t.Errorf("the upstream's traceparent %q, want the caller's %q", got, tp)
	}
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraceOfAClaim: a claim continues its caller's trace as a call does
// (transport "claims", the claim's span its child), and the completion
// continues the traceparent it is sent with.
func TestTraceOfAClaim(t *testing.T) {
	t.Parallel()
	b := setupTracing(t)
	claimTrace, doneTrace := "6bf92f3577b34da6a3ce929d0e0e4736", "7bf92f3577b34da6a3ce929d0e0e4736"
	held := b.post(t, "/v1/claims", agentToken, `{"tool":"save_note","args":{"record_id":"R-1"},"run_id":"run-trace"}`, "00-"+claimTrace+"-"+callerSpan+"-01")
	if held["status"] != "execute" {
		t.Fatalf("claim: %v", held)
	}
	id, _ := trace.TraceIDFromHex(claimTrace)
	spans := b.spansOf(id)
	call := one(t, spans, "execute_tool save_note")
	if call.Parent().SpanID().String() != callerSpan || !call.Parent().IsRemote() {
		t.Errorf("the claim's span does not continue the caller's traceparent: parent %v", call.Parent())
	}
	wantAttrs(t, call, map[string]string{"gen_ai.tool.name": "save_note", "airlock.transport": "claims"})
	childOf(t, one(t, spans, airlock.SpanClaim), call)
	out := b.post(t, "/v1/claims/"+held["claim"].(string)+"/complete", agentToken, `{"outcome":"succeeded","result":{"ok":true}}`, "00-"+doneTrace+"-"+callerSpan+"-01")
	if out["status"] != "succeeded" {
		t.Fatalf("complete: %v", out)
	}
	id, _ = trace.TraceIDFromHex(doneTrace)
	done := one(t, b.spansOf(id), airlock.SpanComplete)
	if done.Parent().SpanID().String() != callerSpan {
		t.Errorf("the completion's span does not continue its traceparent: parent %v", done.Parent())
	}
	wantAttrs(t, done, map[string]string{"airlock.record.state": "succeeded"})
}
