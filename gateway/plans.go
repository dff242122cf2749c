package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// PlanPrefix names the tool that proposes an irreversible tool: plan_T.
const PlanPrefix = "plan_"

// PlanStatusTool reports a plan by id.
const PlanStatusTool = "plan_status"

// irreversibleNamed finds an irreversible tool by a name that is the tool's
// name give or take case and spaces (name tricks get the same refusal).
func (g *Gateway) irreversibleNamed(name string) *airlock.Tool {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, t := range g.m.Tools {
		if t.Kind == airlock.KindIrreversible && strings.ToLower(t.Name) == n {
			return t
		}
	}
	return nil
}

func (g *Gateway) refuseIrreversible(t *airlock.Tool) error {
	if g.plans == nil {
		return airlock.FieldErrorf(airlock.CodeNotCallable, "tool",
			"%s is irreversible: an agent cannot call it directly, and plans are not enabled on this server; nothing was executed", t.Name)
	}
	return airlock.FieldErrorf(airlock.CodeNotCallable, "tool",
		"%s is irreversible: an agent cannot call it. Use %s%s with the same arguments to propose it; a rule or a person approves it and airlock carries it out. Nothing was executed", t.Name, PlanPrefix, t.Name)
}

// Messages for plans, written for a model.
const (
	messageAwaiting = "This is a proposal, not the action: it waits for a person's approval. Do not retry it and do not try another way; check later with plan_status and the plan's id."
	messageApproved = "Approved; airlock is carrying it out. Do not retry it; check later with plan_status and the plan's id."
	messageRejected = "A person rejected this plan; it will not be done. Do not retry it."
	messageExpired  = "Nobody approved this plan in time; it will not be done."
)

func (g *Gateway) propose(ctx context.Context, r *route, req *CallRequest) (*airlock.Answer, error) {
	t := r.tool
	args, err := g.parseArgs(r, req.Args)
	if err != nil {
		return nil, err
	}
	p, repeat, err := g.plans.Propose(ctx, t, args, req.RunID)
	if err != nil {
		return nil, err
	}
	if !repeat && p.Status == airlock.PlanApproved && t.Approval.WaitForCommit != nil && t.Approval.WaitForCommit.IsSet() {
		if done, err := g.plans.WaitForCommit(ctx, p.ID, t.Approval.WaitForCommit.Duration); err == nil {
			p = done
		}
	}
	a := g.planAnswer(p, repeat)
	if repeat && p.ProposedBy != airlock.ActorFrom(ctx) && a.Message != "" {
		a.Message += " (Another principal proposed this work: plan_status answers only it. To follow the plan, propose the same work again.)"
	}
	return a, nil
}

func (g *Gateway) planAnswer(p *airlock.Plan, repeat bool) *airlock.Answer {
	a := &airlock.Answer{Status: airlock.StatusPlanned, Repeat: repeat, Plan: p, Key: p.Key}
	switch p.Status {
	case airlock.PlanCommitted:
		a.Status, a.Result = airlock.StatusSucceeded, p.Result
	case airlock.PlanFailed:
		a.Status, a.Result = airlock.StatusFailed, p.Result
	case airlock.PlanInDoubt:
		a.Status, a.Message = airlock.StatusInDoubt, airlock.InDoubtMessage(g.m.Tool(p.Tool))
	case airlock.PlanAwaitingApproval:
		a.Message = messageAwaiting
	case airlock.PlanApproved, airlock.PlanCommitting:
		a.Message = messageApproved
	case airlock.PlanRejected:
		a.Message = messageRejected
	case airlock.PlanExpired:
		a.Message = messageExpired
	}
	return a
}

func (g *Gateway) planStatus(ctx context.Context, raw json.RawMessage) (*airlock.Answer, error) {
	args, err := airlock.ParseArgs(raw)
	if err != nil {
		return nil, err
	}
	id, _ := args["plan_id"].(string)
	if id == "" {
		return nil, airlock.FieldErrorf(airlock.CodeMissingField, "plan_id", "missing required field \"plan_id\": the id plan_%s returned", "T")
	}
	p, err := g.plans.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	// An agent sees the plans it proposed; an admin, all. Another's plan
	// is answered as no plan at all: its id tells nothing.
	if who, ok := PrincipalFrom(ctx); (!ok || who.Role != airlock.RoleAdmin) && p.ProposedBy != airlock.ActorFrom(ctx) {
		return nil, airlock.FieldErrorf(airlock.CodeNotFound, "plan_id", "no plan %s among the plans you proposed (plan_status answers a plan's proposer; to follow work another proposed, propose the same work: its plan comes back)", id)
	}
	a := g.planAnswer(p, false)
	a.Repeat = false
	return a, nil
}

// describePlanTool explains in plain words what plan_T does and who decides.
func describePlanTool(t *airlock.Tool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Proposes %s for approval; it does not do it. ", t.Name)
	if t.Description != "" {
		fmt.Fprintf(&b, "(%s) ", strings.TrimSpace(t.Description))
	}
	if t.Answers.Approver != "" {
		fmt.Fprintf(&b, "Who approves: %s ", strings.TrimSpace(t.Answers.Approver))
	}
	b.WriteString("The answer names the deciding rule and the plan's status; an approved plan is carried out by airlock. Proposing the same thing again returns the same plan.")
	return b.String()
}

var planStatusSchema = json.RawMessage(`{"type":"object","properties":{"plan_id":{"type":"string","description":"The id of the plan."}},"required":["plan_id"]}`)

// HTTP: GET /v1/plans, GET /v1/plans/{id}, POST /v1/plans/{id}/approve|reject.

// handlePlans lists plans a page at a time: ?status=&tool=&run=&approver=
// &since=&until= (RFC 3339) &decided=true &order=oldest|newest &after=&limit=.
// next_after in the answer is the cursor of the next page ("" at the end).
func (g *Gateway) handlePlans(w http.ResponseWriter, r *http.Request) {
	q, err := queryOf(r, "status", "tool", "run", "approver", "since", "until", "decided", "order", "after", "limit")
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	f, err := planFilter(q)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	plans, err := g.plans.List(r.Context(), f)
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	next := ""
	if len(plans) == f.LimitOr() {
		next = airlock.PlanCursor(plans[len(plans)-1])
	}
	if plans == nil {
		plans = []*airlock.Plan{}
	}
	// The true number waiting for a person, whatever the page.
	waiting, err := g.store.WaitingPlans(r.Context())
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plans": plans, "next_after": next, "waiting": airlock.TotalWaiting(waiting)})
}

// planFilter reads a plan list's query parameters; errors name the one
// that is wrong.
func planFilter(q url.Values) (airlock.PlanFilter, error) {
	f := airlock.PlanFilter{Status: airlock.PlanStatus(q.Get("status")), Tool: q.Get("tool"), RunID: q.Get("run"),
		DecidedBy: q.Get("approver"), After: q.Get("after")}
	for name, into := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "%q is not a time: want RFC 3339, such as 2026-12-03T00:00:00Z", v)
			}
			*into = t
		}
	}
	switch v := q.Get("decided"); v {
	case "", "false":
	case "true":
		f.Decided = true
	default:
		return f, airlock.FieldErrorf(airlock.CodeInvalidArgument, "decided", "%q: want true or false", v)
	}
	switch v := q.Get("order"); v {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return f, airlock.FieldErrorf(airlock.CodeInvalidArgument, "order", "%q: want oldest or newest", v)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > airlock.MaxPlanPage {
			return f, airlock.FieldErrorf(airlock.CodeInvalidArgument, "limit", "%q: want a number from 1 to %d", v, airlock.MaxPlanPage)
		}
		f.Limit = n
	}
	return f, f.Validate()
}

func (g *Gateway) handlePlan(w http.ResponseWriter, r *http.Request) {
	if _, err := queryOf(r); err != nil {
		writeError(w, g.log, err)
		return
	}
	p, err := g.plans.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, g.log, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

type decisionRequest struct {
	Reason       string `json:"reason"`
	DecisionHash string `json:"decision_hash"`
}

func (g *Gateway) handleDecide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req decisionRequest
		if err := g.decodeBody(w, r, &req); err != nil {
			writeError(w, g.log, err)
			return
		}
		p, _ := PrincipalFrom(r.Context())
		ctx := r.Context()
		if g.tracer != nil {
			// The decision's span joins the approver's trace, when it has one.
			ctx = g.tracer.Continue(ctx, r.Header.Get("traceparent"), r.Header.Get("tracestate"))
		}
		plan, err := g.plans.Decide(ctx, airlock.PlanDecision{
			ID: r.PathValue("id"), Approve: approve, By: p.Name, Role: p.Role, Groups: p.Groups, Reason: req.Reason, DecisionHash: req.DecisionHash,
		})
		if err != nil {
			writeError(w, g.log, err)
			return
		}
		writeJSON(w, http.StatusOK, plan)
	}
}
