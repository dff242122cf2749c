package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// The claims API (docs/gateway.md, "The claims API"): work whose caller
// runs it, as a function in its own process. POST /v1/claims derives the
// key from the tool's natural key and claims it; the caller that holds the
// claim runs the work, renews the lease while it runs and completes the
// claim with its outcome; every other caller gets the answer a guarded call
// would give. Only tools marked upstream: {caller: true} are claimed here,
// and only here.

// StatusExecute is the claims API's answer to the caller that now holds
// the claim: run the work, then complete the claim.
const StatusExecute = "execute"

// handleClaim is POST /v1/claims: {"tool", "args", "run_id"} as a call.
func (g *Gateway) handleClaim(w http.ResponseWriter, r *http.Request) {
	req, err := g.readCall(w, r, "claims", "a tool run by its caller", g.callerToolNames())
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	var held *guard.Held
	var tool *airlock.Tool
	a, err := g.serve(r.Context(), req, func(ctx context.Context, rt *route, req *CallRequest) (*airlock.Answer, error) {
		var a *airlock.Answer
		var err error
		held, a, err = g.claim(ctx, rt, req)
		if held != nil {
			tool = rt.tool
		}
		return a, err
	})
	switch {
	case err != nil:
		writeError(w, g.log, err)
	case held != nil:
		if g.metrics != nil && req.RunID != "" {
			g.metrics.RunCall(req.Tool, req.RunID)
		}
		writeJSON(w, http.StatusOK, g.executeAnswer(tool, held, nil))
	default:
		writeJSON(w, http.StatusOK, AnswerObject(a))
	}
}

// claim claims the work of a tool run by its caller.
func (g *Gateway) claim(ctx context.Context, r *route, req *CallRequest) (*guard.Held, *airlock.Answer, error) {
	if r == nil {
		if t := g.irreversibleNamed(req.Tool); t != nil {
			return nil, nil, g.refuseIrreversible(t)
		}
	}
	if r == nil || r.kind != routeCaller {
		return nil, nil, airlock.FieldErrorf(airlock.CodeNotCallable, "tool",
			"%q is not a tool run by its caller (upstream: {caller: true}); those are: %s; nothing was claimed", req.Tool, strings.Join(g.callerToolNames(), ", "))
	}
	args, err := g.parseArgs(r, req.Args)
	if err != nil {
		return nil, nil, err
	}
	p, _ := PrincipalFrom(ctx)
	return g.guard.Claim(ctx, &airlock.Call{Tool: r.tool, Calendar: &g.m.Calendar, Args: args, RunID: req.RunID}, guard.Holder{Principal: p.Name})
}

// callerToolNames lists the tools run by their callers.
func (g *Gateway) callerToolNames() []string {
	var names []string
	for _, t := range g.m.Tools {
		if t.RunByCaller() && t.Kind == airlock.KindWrite {
			names = append(names, t.Name)
		}
	}
	return names
}

// commitsRequest is the body of POST /v1/commits/next.
type commitsRequest struct {
	// Tools are the irreversible tools run by their caller that the worker
	// serves.
	Tools []string `json:"tools"`
	// WaitSeconds: how long to wait for a commit when there is none now
	// (0 to 30). Default 0.
	WaitSeconds float64 `json:"wait_seconds"`
}

// maxCommitWait bounds a worker's long poll.
const maxCommitWait = 30 * time.Second

// handleNextCommit is POST /v1/commits/next: a worker in the caller's
// process asks for the next approved plan of the tools it serves; it gets
// the plan and a held claim of its work (execute), or idle.
func (g *Gateway) handleNextCommit(w http.ResponseWriter, r *http.Request) {
	var req commitsRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		writeError(w, g.log, err)
		return
	}
	tools, err := g.workerTools(&req)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	deadline := g.clock.Now().Add(time.Duration(req.WaitSeconds * float64(time.Second)))
	worker, _ := PrincipalFrom(r.Context())
	for {
		p, held, err := g.plans.NextCallerCommit(r.Context(), tools, worker.Name)
		if err != nil {
			writeError(w, g.log, err)
			return
		}
		if held != nil {
			writeJSON(w, http.StatusOK, g.executeAnswer(g.m.Tool(p.Tool), held, p))
			return
		}
		if !g.clock.Now().Before(deadline) {
			writeJSON(w, http.StatusOK, map[string]any{"status": "idle"})
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-g.clock.After(min(250*time.Millisecond, g.clock.Until(deadline))):
		}
	}
}

// workerTools checks a worker's request: each tool an irreversible tool run
// by its caller, and a wait within bounds.
func (g *Gateway) workerTools(req *commitsRequest) ([]*airlock.Tool, error) {
	if g.plans == nil {
		return nil, airlock.Errorf(airlock.CodeNotCallable, "plans are not enabled on this server; there are no commits")
	}
	var served []string
	for _, t := range g.m.Tools {
		if t.RunByCaller() && t.Kind == airlock.KindIrreversible {
			served = append(served, t.Name)
		}
	}
	if len(req.Tools) == 0 {
		return nil, airlock.FieldErrorf(airlock.CodeMissingField, "tools", "required: the irreversible tools run by their caller that this worker serves; those are: %s", strings.Join(served, ", "))
	}
	if req.WaitSeconds < 0 || req.WaitSeconds > maxCommitWait.Seconds() {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "wait_seconds", "is %v; want 0 to %v", req.WaitSeconds, maxCommitWait.Seconds())
	}
	tools := make([]*airlock.Tool, 0, len(req.Tools))
	for i, name := range req.Tools {
		t := g.m.Tool(name)
		if t == nil || !t.RunByCaller() || t.Kind != airlock.KindIrreversible {
			return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, fmt.Sprintf("tools[%d]", i), "%q is not an irreversible tool run by its caller; those are: %s", name, strings.Join(served, ", "))
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// executeAnswer tells the caller that now holds a claim to run the work:
// its handle and lease; for a tool that honours keys, the key to pass to
// its service; for a plan's commit, the plan (its id, tool and arguments).
func (g *Gateway) executeAnswer(tool *airlock.Tool, h *guard.Held, p *airlock.Plan) map[string]any {
	out := map[string]any{
		"status": StatusExecute, "claim": claimHandle(tool.Name, h),
		"lease_until": h.LeaseUntil.UTC().Format(time.RFC3339Nano), "lease_seconds": g.guard.Lease().Seconds(),
	}
	if tool.HonorsKey {
		out["idempotency_key"] = h.Key
	}
	if p != nil {
		out["plan"] = map[string]any{"id": p.ID, "tool": p.Tool, "args": p.Args, "run_id": p.RunID}
	}
	return out
}

// claimHandle is the opaque handle of a held claim: the tool (base64url,
// since a tool's name may hold dots), the key, the claim's secret and, for
// a plan's commit, the plan's id. The holder's principal is not in it: it
// is who presents the handle, and the claim is bound to it (guard.Holder).
func claimHandle(tool string, h *guard.Held) string {
	handle := base64.RawURLEncoding.EncodeToString([]byte(tool)) + "." + h.Key + "." + h.Secret
	if h.Holder.PlanID != "" {
		handle += "." + h.Holder.PlanID
	}
	return handle
}

// held is a claim handle read back, as its presenter names the claim.
type held struct {
	tool  *airlock.Tool // run by its caller
	claim guard.Claimed
}

// heldClaim reads the request's claim handle back, for the principal
// presenting it.
func (g *Gateway) heldClaim(r *http.Request) (*held, error) {
	p, _ := PrincipalFrom(r.Context())
	return g.readHandle(r.PathValue("claim"), p.Name)
}

// readHandle reads a claim handle back, for principal. A handle of the
// wrong shape, or of the wrong shape for its tool's kind (a commit's names
// its plan, a call's does not), is refused as made up.
func (g *Gateway) readHandle(handle, principal string) (*held, error) {
	bad := airlock.FieldErrorf(airlock.CodeInvalidArgument, "claim", "not a claim handle this server gave: use the claim of an execute answer as it came")
	parts := strings.Split(handle, ".")
	if len(parts) < 3 || len(parts) > 4 || parts[1] == "" || len(parts[1]) > airlock.MaxKeyBytes || !guard.ValidClaimSecret(parts[2]) ||
		len(parts) == 4 && !airlock.ValidPlanID(parts[3]) {
		return nil, bad
	}
	// Strict: one spelling per name, as this server writes it.
	name, err := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	if err != nil {
		return nil, bad
	}
	tool := g.m.Tool(string(name))
	if tool == nil || !tool.RunByCaller() || (tool.Kind == airlock.KindIrreversible) != (len(parts) == 4) {
		return nil, bad
	}
	h := &held{tool: tool, claim: guard.Claimed{Key: parts[1], Secret: parts[2], Holder: guard.Holder{Principal: principal}}}
	if len(parts) == 4 {
		h.claim.Holder.PlanID = parts[3]
	}
	return h, nil
}

// handleRenew is POST /v1/claims/{claim}/renew: the holder is still
// running the work.
func (g *Gateway) handleRenew(w http.ResponseWriter, r *http.Request) {
	h, err := g.heldClaim(r)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	if _, err := queryOf(r); err != nil {
		writeError(w, g.log, err)
		return
	}
	var until time.Time
	if h.claim.Holder.PlanID != "" && g.plans != nil {
		until, err = g.plans.RenewCallerCommit(r.Context(), h.tool, h.claim)
	} else {
		until, err = g.guard.Renew(r.Context(), h.claim)
	}
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lease_until": until.UTC().Format(time.RFC3339Nano), "lease_seconds": g.guard.Lease().Seconds()})
}

// completeRequest is the body of POST /v1/claims/{claim}/complete.
type completeRequest struct {
	// Outcome: succeeded, failed (definitively: it did not happen and will
	// not), unknown (it may have happened: in doubt) or not_started (the
	// work never began: the claim is released and the next call runs it).
	Outcome string          `json:"outcome"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	// ResultOmitted: the work ran to this outcome, but its result is not
	// sent (it was too large to record); the result kept is
	// {"result_omitted": true}.
	ResultOmitted bool `json:"result_omitted"`
}

// omittedResult is the result kept for a completion whose result was left
// out.
var omittedResult = json.RawMessage(`{"result_omitted":true}`)

// Claim outcomes, by their wire names (the root package's vocabulary).
const (
	OutcomeSucceeded  = airlock.ClaimOutcomeSucceeded
	OutcomeFailed     = airlock.ClaimOutcomeFailed
	OutcomeUnknown    = airlock.ClaimOutcomeUnknown
	OutcomeNotStarted = airlock.ClaimOutcomeNotStarted
)

// handleComplete is POST /v1/claims/{claim}/complete: the holder reports
// the work's outcome and gets the answer the first call gets.
func (g *Gateway) handleComplete(w http.ResponseWriter, r *http.Request) {
	h, err := g.heldClaim(r)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	tool := h.tool
	var req completeRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		if airlock.ErrorCode(err) == airlock.CodeTooLarge {
			err = airlock.FieldErrorf(airlock.CodeTooLarge, "result", "the completion is larger than %d bytes (limits.request_bytes); nothing was recorded and the claim is still held: complete it again with a smaller result", g.maxBody)
		}
		writeError(w, g.log, err)
		return
	}
	out, err := outcomeOf(&req)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	ctx := r.Context()
	if g.tracer != nil {
		ctx = g.tracer.Continue(ctx, r.Header.Get("traceparent"), r.Header.Get("tracestate"))
	}
	var a *airlock.Answer
	if h.claim.Holder.PlanID != "" && g.plans != nil {
		// The plan follows its work's record.
		a, err = g.plans.CompleteCallerCommit(ctx, tool, h.claim, out)
	} else {
		a, err = g.guard.Finish(ctx, tool, h.claim, out)
	}
	if g.metrics != nil && airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
		g.metrics.Call(tool.Name, tool.Kind, a, err)
	}
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, AnswerObject(a))
}

// outcomeOf checks a completion's body and makes its outcome.
func outcomeOf(req *completeRequest) (airlock.Outcome, error) {
	if err := airlock.CheckNote("error", req.Error); err != nil {
		return airlock.Outcome{}, err
	}
	result := req.Result
	if string(result) == "null" {
		result = nil
	}
	if req.ResultOmitted {
		if result != nil {
			return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeInvalidArgument, "result_omitted", "give result or result_omitted, not both")
		}
		if req.Outcome != OutcomeSucceeded && req.Outcome != OutcomeFailed {
			return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeInvalidArgument, "result_omitted", "only with outcome succeeded or failed: an unknown or not started outcome has no result")
		}
		result = omittedResult
	}
	var cause error
	if req.Error != "" {
		cause = errors.New(req.Error)
	}
	switch req.Outcome {
	case OutcomeSucceeded:
		if req.Error != "" {
			return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeInvalidArgument, "error", "only with outcome failed, unknown or not_started")
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: result}, nil
	case OutcomeFailed:
		if result == nil && req.Error != "" {
			result, _ = json.Marshal(map[string]string{"error": req.Error})
		}
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: result, Err: cause}, nil
	case OutcomeUnknown, OutcomeNotStarted:
		if result != nil {
			return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeInvalidArgument, "result", "only with outcome succeeded or failed: an unknown or not started outcome has no result")
		}
		kind := airlock.OutcomeUnknown
		if req.Outcome == OutcomeNotStarted {
			kind = airlock.OutcomeNotSent
		}
		return airlock.Outcome{Kind: kind, Err: cause}, nil
	case "":
		return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeMissingField, "outcome", "required: succeeded, failed, unknown or not_started")
	}
	return airlock.Outcome{}, airlock.FieldErrorf(airlock.CodeInvalidArgument, "outcome", "is %q; want succeeded, failed, unknown or not_started", req.Outcome)
}
