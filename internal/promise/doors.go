package promise

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// agent is one caller: an agent with its run, its HTTP client, its MCP
// sessions.
type agent struct {
	r     *run
	id    int
	runID string
	http  *http.Client
	mcp   map[string]*mcp.ClientSession // by door
}

func (r *run) newAgent(id int) *agent {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return &agent{r: r, id: id, runID: fmt.Sprintf("run-%d", id), http: hc, mcp: map[string]*mcp.ClientSession{}}
}

func (ag *agent) close() {
	for _, s := range ag.mcp {
		_ = s.Close()
	}
}

// call makes one call of w through door, records it, and returns.
func (ag *agent) call(ctx context.Context, w *work, door string) {
	ag.r.count(door)
	switch door {
	case "library":
		ag.library(ctx, w)
	case "calls", "plan-calls":
		ag.viaCalls(ctx, w, door)
	case "mcp", "mcp-session", "plan-mcp":
		ag.viaMCP(ctx, w, door)
	case "claims":
		ag.viaClaims(ctx, w)
	case "mcp-task", "plan-task":
		ag.viaTask(ctx, w, door)
	}
}

// library is the guarded call of an embedding program: guard.Do on a
// replica's guard, its side effect the service's HTTP request.
func (ag *agent) library(ctx context.Context, w *work) {
	a := ag.r.reps[ag.r.intn(len(ag.r.reps))].app()
	g, tool := a.Guard, a.Manifest.Tool(w.tool)
	args, _ := json.Marshal(w.args)
	done := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: "library"})
	ans, err := g.Do(ctx, &airlock.Call{Tool: tool, Calendar: &a.Manifest.Calendar, Args: airlock.MustArgs(string(args)), RunID: ag.runID},
		func(ctx context.Context, key string) airlock.Outcome { return ag.r.request(ctx, w, key) })
	done(outputOf(ans, err))
}

// request is a tool's side effect as a Go function makes it: the
// service's HTTP request with the key, and its outcome.
func (r *run) request(ctx context.Context, w *work, key string) airlock.Outcome {
	path := "/tools/" + w.tool
	if strings.HasSuffix(w.tool, "_k") || w.tool == "payout" {
		path = "/k" + path
	}
	body, _ := json.Marshal(w.args)
	req, err := http.NewRequestWithContext(ctx, "POST", r.svcURL+path, bytes.NewReader(body))
	if err != nil {
		return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.GetBody = nil // one attempt: net/http would resend a keyed request on a reused connection
	hc := &http.Client{Timeout: 700 * time.Millisecond}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: err}
		}
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: err}
	}
	defer resp.Body.Close()
	res, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: err}
	case resp.StatusCode/100 == 2:
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: res}
	case resp.StatusCode/100 == 4:
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: res}
	}
	return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("status %d", resp.StatusCode)}
}

// outputOf is a guarded call's answer as the model reads it.
func outputOf(a *airlock.Answer, err error) Output {
	switch {
	case err != nil && airlock.ErrorCode(err) == airlock.CodeNotSent:
		return Output{Status: NotSent}
	case err != nil:
		return Output{Status: Refused}
	}
	out := Output{Status: string(a.Status), Result: NonceOf(string(a.Result)), Repeat: a.Repeat}
	if a.Plan != nil {
		out.Plan = string(a.Plan.Status)
		out.Result = NonceOf(string(a.Plan.Result))
	}
	return out
}

// viaCalls is POST /v1/calls (plan_T for the plans' door).
func (ag *agent) viaCalls(ctx context.Context, w *work, door string) {
	tool := w.tool
	if door == "plan-calls" {
		tool = "plan_" + tool
	}
	body, _ := json.Marshal(map[string]any{"tool": tool, "args": w.args, "run_id": ag.runID})
	done := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: door})
	status, raw, err := ag.post(ctx, ag.r.url()+"/v1/calls", agentToken, body)
	done(answerOf(status, raw, err))
}

func (ag *agent) post(ctx context.Context, u, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := ag.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// answerOf reads an HTTP API answer: the answer object, or an error.
func answerOf(status int, raw []byte, err error) Output {
	if err != nil {
		return Output{Status: Lost}
	}
	var a answerBody
	if json.Unmarshal(raw, &a) != nil {
		return Output{Status: Lost}
	}
	if a.Error != nil || status != http.StatusOK {
		if a.Error != nil && a.Error.Code == airlock.CodeNotSent {
			return Output{Status: NotSent}
		}
		return Output{Status: Refused}
	}
	return a.output()
}

// answerBody is an answer as the HTTP API and MCP's structured content
// carry it (an MCP plan_T answers the plan itself: its id and status).
type answerBody struct {
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
	Repeat bool            `json:"repeat"`
	Plan   *struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	} `json:"plan"`
	ID    string         `json:"id"`
	Error *airlock.Error `json:"error"`
}

// output is the answer as the model reads it.
func (a *answerBody) output() Output {
	if a.ID != "" && a.Plan == nil { // the plan itself
		return Output{Status: "planned", Plan: a.Status, Result: NonceOf(string(a.Result))}
	}
	out := Output{Status: a.Status, Result: NonceOf(string(a.Result)), Repeat: a.Repeat}
	if a.Plan != nil {
		out.Plan, out.Result = a.Plan.Status, NonceOf(string(a.Plan.Result))
	}
	return out
}

// viaMCP calls the tool (plan_T for the plans' door) over MCP: 2026-07-28
// without a session, or a 2025-11-25 session.
func (ag *agent) viaMCP(ctx context.Context, w *work, door string) {
	tool := w.tool
	if door == "plan-mcp" {
		tool = "plan_" + tool
	}
	s, err := ag.session(ctx, door)
	done := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: door})
	if err != nil {
		done(Output{Status: Lost})
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := s.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: w.args,
		Meta: mcp.Meta{"io.airlock/run": ag.runID}})
	if err != nil {
		// The session may be gone with a lost reply or a restart: the
		// next call opens another.
		_ = s.Close()
		delete(ag.mcp, door)
		done(Output{Status: Lost})
		return
	}
	done(mcpOutput(res))
}

func (ag *agent) session(ctx context.Context, door string) (*mcp.ClientSession, error) {
	if s := ag.mcp[door]; s != nil {
		return s, nil
	}
	opts := &mcp.ClientSessionOptions{}
	if door == "mcp-session" {
		opts.ProtocolVersion = "2025-11-25"
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "promise", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ag.r.url() + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: bearer(agentToken)}}, opts)
	if err != nil {
		return nil, err
	}
	ag.mcp[door] = s
	return s, nil
}

type bearer string

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(req)
}

// mcpOutput reads an MCP tool result: its structured content is the
// answer object; an error result without one says nothing ran, or that
// nothing was done.
func mcpOutput(res *mcp.CallToolResult) Output {
	raw, _ := json.Marshal(res.StructuredContent)
	var a answerBody
	if json.Unmarshal(raw, &a) != nil || a.Status == "" {
		text := ""
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text += t.Text
			}
		}
		if strings.Contains(text, airlock.MessageNotSent) {
			return Output{Status: NotSent}
		}
		return Output{Status: Refused}
	}
	return a.output()
}

// viaClaims is the claims API: claim, run the work at the service,
// renew, complete; with a share of holders that misbehave: vanish before
// or after the work, stall past the lease, send their completion twice,
// or hand their handle to another agent who completes it with a result of
// its own making.
func (ag *agent) viaClaims(ctx context.Context, w *work) {
	c := ag.claimsClient()
	done := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: "claims"})
	held, a, err := c.Claim(ctx, w.tool, w.args, ag.runID)
	if err != nil || held == nil {
		if err != nil && isTransport(err) {
			done(Output{Status: Lost})
			return
		}
		done(outputOf(a, err))
		return
	}
	fault := 0
	if ag.r.chance(ag.r.cfg.Faults) {
		fault = 1 + ag.r.intn(5)
	}
	if fault == 1 { // vanishes before running the work
		done(Output{Status: Lost})
		return
	}
	if fault == 5 || ag.r.chance(ag.r.cfg.Faults/2) { // another agent completes it with a result of its own
		other := client.New(&client.Config{URL: ag.r.url(), Token: agent2Token, HTTPClient: ag.http})
		n := NewNonce()
		fdone := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: "claims-forged"})
		if _, err := other.Complete(ctx, held.Claim, client.Outcome{Kind: client.Succeeded, Result: json.RawMessage(`{"done":"` + n + `"}`)}); err == nil {
			fdone(Output{Status: "succeeded", Result: n}) // accepted: the model judges it
		} else {
			fdone(Output{Status: Refused})
		}
	}
	out := ag.r.request(ctx, w, held.IdempotencyKey)
	if fault == 2 { // vanishes after running the work
		done(Output{Status: Lost})
		return
	}
	if fault == 3 { // stalls past its lease, then completes
		time.Sleep(lease + 300*time.Millisecond)
	}
	outcome := completion(out)
	a, err = c.Complete(ctx, held.Claim, outcome)
	if fault == 4 && err == nil { // the reply was lost: complete again
		a, err = c.Complete(ctx, held.Claim, outcome)
	}
	switch {
	case err != nil && airlock.ErrorCode(err) == airlock.CodeLeaseLost:
		done(Output{Status: Refused}) // its lease ended and was acted on
	case err != nil && isTransport(err):
		done(Output{Status: Lost})
	default:
		done(outputOf(a, err))
	}
}

func (ag *agent) claimsClient() *client.Client {
	return client.New(&client.Config{URL: ag.r.url(), Token: agentToken, HTTPClient: ag.http})
}

// completion is what a holder reports of its work's outcome.
func completion(out airlock.Outcome) client.Outcome {
	switch out.Kind {
	case airlock.OutcomeSucceeded:
		return client.Outcome{Kind: client.Succeeded, Result: out.Result}
	case airlock.OutcomeFailed:
		return client.Outcome{Kind: client.Failed, Result: out.Result}
	case airlock.OutcomeNotSent:
		return client.Outcome{Kind: client.NotStarted}
	}
	return client.Outcome{Kind: client.Unknown}
}

// isTransport: the answer was lost (no airlock error came back).
func isTransport(err error) bool {
	var e *airlock.Error
	return !errors.As(err, &e) || e.Code == airlock.CodeInternal && strings.Contains(e.Message, "not what was expected")
}

// viaTask calls the tool (plan_T for the plans' door) over MCP 2026-07-28
// as a client of the Tasks extension: a call that outlives respond_within,
// or a plan that waits for people, becomes a task, followed with tasks/get
// until it ends and read with tasks/result. A task still working after a
// few seconds is given up (the answer is lost to this caller).
func (ag *agent) viaTask(ctx context.Context, w *work, door string) {
	tool := w.tool
	if door == "plan-task" {
		tool = "plan_" + tool
	}
	done := ag.r.h.Begin(ag.id, Input{Kind: Call, Work: w.name(), Door: door})
	u := ag.r.url() + "/mcp"
	res, err := ag.rpc(ctx, u, "tools/call", tool, map[string]any{"name": tool, "arguments": w.args})
	if err != nil {
		done(Output{Status: Lost})
		return
	}
	if res["resultType"] != "task" {
		done(taskOutput(res))
		return
	}
	id, _ := res["taskId"].(string)
	for range 30 {
		got, err := ag.rpc(ctx, u, "tasks/get", "", map[string]any{"taskId": id})
		if err != nil {
			done(Output{Status: Lost})
			return
		}
		if st, _ := got["status"].(string); st != "working" && st != "input_required" {
			final, err := ag.rpc(ctx, u, "tasks/result", "", map[string]any{"taskId": id})
			if err != nil {
				done(Output{Status: Lost})
				return
			}
			done(taskOutput(final))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	done(Output{Status: Lost})
}

// taskOutput reads a tool result of the Tasks door (a result object, maybe
// under "result" for tasks/result).
func taskOutput(res map[string]any) Output {
	if inner, ok := res["result"].(map[string]any); ok && res["structuredContent"] == nil {
		res = inner
	}
	raw, _ := json.Marshal(res)
	var r mcp.CallToolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return Output{Status: Refused}
	}
	return mcpOutput(&r)
}

// rpc posts one 2026-07-28 request that declares the Tasks extension and
// returns its result; an error answer or no answer is an error.
func (ag *agent) rpc(ctx context.Context, u, method, name string, params map[string]any) (map[string]any, error) {
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{gateway.ExtTasks: map[string]any{}}},
		"io.airlock/run": ag.runID,
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := ag.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok && strings.Contains(data, `"jsonrpc"`) {
				raw = []byte(data)
			}
		}
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Result == nil {
		return nil, fmt.Errorf("%s: %d %s", method, resp.StatusCode, raw)
	}
	return msg.Result, nil
}
