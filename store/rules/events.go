package rules

import (
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock"
)

// The audit events the rules write, and the chain the sealer makes.

// planEvents are the events of a new plan: planned, and decided when the
// rule approved it automatically.
func planEvents(p *airlock.Plan) []*airlock.AuditEvent {
	planned := &airlock.AuditEvent{At: p.CreatedAt, Kind: airlock.EventPlanned, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Args: p.Args,
		Result: p.Facts, Error: p.FactsError, Actor: p.ProposedBy, PlanID: p.ID, Rule: p.Rule, DecisionHash: p.DecisionHash}
	if planned.Actor == "" {
		planned.Actor = airlock.ActorSystem
	}
	if p.Status != airlock.PlanApproved {
		return []*airlock.AuditEvent{planned}
	}
	return []*airlock.AuditEvent{planned, decisionEvent(p)}
}

// decisionEvent records an approval or rejection, with who, why and on what.
func decisionEvent(p *airlock.Plan) *airlock.AuditEvent {
	res, _ := json.Marshal(map[string]string{"status": string(p.Status), "reason": p.DecisionReason})
	actor := p.DecidedBy
	if actor == "" {
		actor = airlock.ActorSystem
	}
	at := p.DecidedAt
	if at.IsZero() {
		at = p.UpdatedAt
	}
	e := &airlock.AuditEvent{At: at, Kind: airlock.EventDecided, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Args: p.Args, Result: res,
		Actor: actor, PlanID: p.ID, Rule: p.Rule, DecisionHash: p.DecisionHash}
	if actor != airlock.ActorSystem && !p.CreatedAt.IsZero() {
		e.DurationUS = max(0, at.Sub(p.CreatedAt).Microseconds())
	}
	return e
}

// approvalEvent records one approval of several, the plan still awaiting
// the next person: who, why, and how many of how many.
func approvalEvent(p *airlock.Plan, d *airlock.PlanDecision) *airlock.AuditEvent {
	res, _ := json.Marshal(map[string]any{"status": string(p.Status), "reason": d.Reason,
		"approvals": len(p.Approvals), "approvals_required": p.ApprovalsRequiredOr()})
	return &airlock.AuditEvent{At: d.Now, Kind: airlock.EventApproval, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Result: res,
		Actor: d.By, PlanID: p.ID, Rule: p.Rule, DecisionHash: p.DecisionHash}
}

// refusedEvent records a decision the tool's rule of who decides forbade.
func refusedEvent(p *airlock.Plan, d *airlock.PlanDecision, why error) *airlock.AuditEvent {
	res, _ := json.Marshal(map[string]any{"approve": d.Approve, "reason": d.Reason})
	return &airlock.AuditEvent{At: d.Now, Kind: airlock.EventDecisionRefused, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Result: res,
		Error: why.Error(), Actor: airlock.ActorOr(d.By), PlanID: p.ID, Rule: p.Rule, DecisionHash: d.DecisionHash}
}

// withdrawnEvent records a plan its proposer withdrew: who, and why.
func withdrawnEvent(p *airlock.Plan, by, reason string, at time.Time) *airlock.AuditEvent {
	res, _ := json.Marshal(map[string]string{"status": string(p.Status), "reason": reason})
	return &airlock.AuditEvent{At: at, Kind: airlock.EventWithdrawn, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Result: res,
		Actor: airlock.ActorOr(by), PlanID: p.ID, Rule: p.Rule, DecisionHash: p.DecisionHash,
		DurationUS: max(0, at.Sub(p.CreatedAt).Microseconds())}
}

// statusEvent records a plan's move to its current status (expired,
// committing, committed, failed, in doubt).
func statusEvent(p *airlock.Plan, at time.Time) *airlock.AuditEvent {
	kind := string(p.Status)
	switch p.Status {
	case airlock.PlanExpired:
		kind = airlock.EventExpired
	case airlock.PlanCommitting:
		kind = airlock.EventCommitting
	case airlock.PlanCommitted:
		kind = airlock.EventCommitted
	case airlock.PlanFailed:
		kind = airlock.EventCommitError
	case airlock.PlanInDoubt:
		kind = airlock.EventInDoubt
	}
	return &airlock.AuditEvent{At: at, Kind: kind, RunID: p.RunID, Key: p.Key, Tool: p.Tool, Result: p.Result, Error: p.Error,
		Actor: airlock.ActorSystem, PlanID: p.ID, Rule: p.Rule, DecisionHash: p.DecisionHash}
}

// settleNote is the audit text of a settlement.
func settleNote(st *airlock.Settlement) string {
	if st.Happened {
		return "settled: it happened. " + st.Note
	}
	return "settled: it did not happen; the key is free. " + st.Note
}

// seal continues the chain after (lastSeq, lastHash) over pending events,
// in order: each gets the next sequence number, its predecessor's hash and
// its own. Drivers store the three fields.
func seal(lastSeq int64, lastHash string, pending []*airlock.AuditEvent) {
	for _, e := range pending {
		lastSeq++
		e.Seq, e.PrevHash = lastSeq, lastHash
		e.Hash = e.ChainHash(lastHash)
		lastHash = e.Hash
	}
}
