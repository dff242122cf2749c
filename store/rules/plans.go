// Package rules holds what the stores do — to plans (create, decide,
// expire, set a status, withdraw), to in-doubt records (settle), to the
// audit log (seal, and the rollup arithmetic of the figures the sealer
// keeps): which rows change, in which order, with which audit events and
// which jobs — written once over a driver's row statements (PlanRows,
// RecordRows, SealRows). Each driver runs a rule inside one of its own
// transactions (store/sqlite: its single writer; store/postgres: a
// transaction holding the audit writers' lock), so the rule, its audit
// event and its outbox job commit together or not at all.
package rules

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock"
)

// PlanRows are one transaction's row statements on plans, the audit log and
// the job queue: a driver's, bound to its transaction.
type PlanRows interface {
	// InsertPlan inserts p unless a plan with its key exists; true when
	// this call inserted it.
	InsertPlan(ctx context.Context, p *airlock.Plan) (bool, error)
	// PlanByID reads a plan, locking its row for the transaction where the
	// driver locks rows; ErrNotFound when there is none.
	PlanByID(ctx context.Context, id string) (*airlock.Plan, error)
	// PlanByKey reads the plan of a key; ErrNotFound when there is none.
	PlanByKey(ctx context.Context, key string) (*airlock.Plan, error)
	// UpdatePlanDecision records a decision on an awaiting plan.
	UpdatePlanDecision(ctx context.Context, p *DecisionParams) error
	// ExpireAwaitingPlans moves awaiting plans past their ExpiresAt to
	// expired and returns them as they now are.
	ExpireAwaitingPlans(ctx context.Context, now time.Time) ([]*airlock.Plan, error)
	// UpdatePlanStatus moves a plan in one of p.From to p.To and returns it
	// as it now is; ErrNotFound when it was in none of them.
	UpdatePlanStatus(ctx context.Context, p *airlock.SetPlanStatusParams) (*airlock.Plan, error)
	// MarkPlanWithdrawn moves an awaiting plan to withdrawn and returns it
	// as it now is; ErrNotFound when it was not awaiting.
	MarkPlanWithdrawn(ctx context.Context, p *airlock.WithdrawPlanParams) (*airlock.Plan, error)
	// AppendAudit adds events to the audit log.
	AppendAudit(ctx context.Context, events ...*airlock.AuditEvent) error
	// EnqueueCommit inserts the commit job of an approved plan (nothing
	// where the store runs no queue).
	EnqueueCommit(ctx context.Context, p *airlock.Plan) error
	// EnqueueNotice inserts the notice job of a plan that waits for a
	// person (nothing where no webhook is configured).
	EnqueueNotice(ctx context.Context, p *airlock.Plan) error
}

// DecisionParams are a decision's row update: the plan's status and its
// approvals so far. An approval short of the plan's required number keeps
// it awaiting, with By empty.
type DecisionParams struct {
	ID        string
	Status    airlock.PlanStatus // approved, rejected, or still awaiting_approval
	By        string
	Reason    string
	At        time.Time
	Approvals []airlock.PlanApproval
}

// CreatePlan inserts p unless its key has a plan, with its audit events,
// and the commit job of a plan approved at once or the notice of one that
// waits; it returns the plan as stored and whether this call made it.
func CreatePlan(ctx context.Context, x PlanRows, p *airlock.Plan) (*airlock.Plan, bool, error) {
	created, err := x.InsertPlan(ctx, p)
	if err != nil {
		return nil, false, err
	}
	if created {
		if err := x.AppendAudit(ctx, planEvents(p)...); err != nil {
			return nil, false, err
		}
		switch p.Status {
		case airlock.PlanApproved:
			err = x.EnqueueCommit(ctx, p)
		case airlock.PlanAwaitingApproval:
			err = x.EnqueueNotice(ctx, p)
		}
		if err != nil {
			return nil, false, err
		}
	}
	out, err := x.PlanByKey(ctx, p.Key)
	return out, created, err
}

// DecidePlan records a person's decision, checked by airlock.CheckDecision
// against the plan as locked: refused is the answer for a decision that
// may not be made (nothing changed, the transaction may commit), err a
// failure that rolls it back. Approving enqueues the commit.
func DecidePlan(ctx context.Context, x PlanRows, d *airlock.PlanDecision) (out *airlock.Plan, refused, err error) {
	cur, err := x.PlanByID(ctx, d.ID)
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, airlock.FieldErrorf(airlock.CodeNotFound, "id", "no plan with id %s", d.ID), nil
	}
	if err != nil {
		return nil, nil, err
	}
	next, problem := airlock.CheckDecision(cur, d)
	if airlock.ErrorCode(problem) == airlock.CodeForbidden {
		// A decision the tool's rule of who decides forbids is audited:
		// the auditor sees who tried.
		if err := x.AppendAudit(ctx, refusedEvent(cur, d, problem)); err != nil {
			return nil, nil, err
		}
	}
	if problem != nil || next == "" {
		return cur, problem, nil
	}
	params := &DecisionParams{ID: d.ID, Status: next, By: d.By, Reason: d.Reason, At: d.Now, Approvals: cur.Approvals}
	if next == airlock.PlanApproved {
		params.Approvals = append(append([]airlock.PlanApproval(nil), cur.Approvals...), airlock.PlanApproval{By: d.By, Reason: d.Reason, At: d.Now.UTC()})
		if len(params.Approvals) < cur.ApprovalsRequiredOr() {
			// One approval of several: the plan waits for the next person.
			params.Status, params.By, params.Reason = airlock.PlanAwaitingApproval, "", ""
		}
	}
	if err := x.UpdatePlanDecision(ctx, params); err != nil {
		return nil, nil, err
	}
	cur.Approvals, cur.UpdatedAt = params.Approvals, d.Now.UTC()
	if params.Status == airlock.PlanAwaitingApproval {
		if err := x.AppendAudit(ctx, approvalEvent(cur, d)); err != nil {
			return nil, nil, err
		}
		return cur, nil, nil
	}
	cur.Status, cur.DecidedBy, cur.DecisionReason, cur.DecidedAt = next, d.By, d.Reason, d.Now.UTC()
	if err := x.AppendAudit(ctx, decisionEvent(cur)); err != nil {
		return nil, nil, err
	}
	if next == airlock.PlanApproved {
		if err := x.EnqueueCommit(ctx, cur); err != nil {
			return nil, nil, err
		}
	}
	return cur, nil, nil
}

// ExpirePlans moves the awaiting plans past their deadline to expired,
// each with its audit event, and returns them.
func ExpirePlans(ctx context.Context, x PlanRows, now time.Time) ([]*airlock.Plan, error) {
	expired, err := x.ExpireAwaitingPlans(ctx, now)
	if err != nil {
		return nil, err
	}
	for _, p := range expired {
		if err := x.AppendAudit(ctx, statusEvent(p, now)); err != nil {
			return nil, err
		}
	}
	return expired, nil
}

// SetPlanStatus moves a plan from one of p.From to p.To with its audit
// event; false when it was in none of them (nothing changed).
func SetPlanStatus(ctx context.Context, x PlanRows, p *airlock.SetPlanStatusParams) (bool, error) {
	plan, err := x.UpdatePlanStatus(ctx, p)
	if errors.Is(err, airlock.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, x.AppendAudit(ctx, statusEvent(plan, p.At))
}

// WithdrawPlan withdraws an awaiting plan on its proposer's word, audited
// with the proposer as actor. False, with the plan as it is, when it no
// longer awaited approval; ErrNotProposer, with the plan unchanged, when
// p.By did not propose it (another principal doing the same work shares
// the plan, decision 70); ErrNotFound when there is no such plan.
func WithdrawPlan(ctx context.Context, x PlanRows, p *airlock.WithdrawPlanParams) (*airlock.Plan, bool, error) {
	cur, err := x.PlanByID(ctx, p.ID) // the row locked: decisions take turns with it
	if err != nil {
		return nil, false, err
	}
	if cur.Status != airlock.PlanAwaitingApproval {
		return cur, false, nil
	}
	if cur.ProposedBy != p.By {
		return cur, false, airlock.ErrNotProposer
	}
	plan, err := x.MarkPlanWithdrawn(ctx, p)
	if err != nil {
		return nil, false, err
	}
	return plan, true, x.AppendAudit(ctx, withdrawnEvent(plan, p.By, p.Reason, p.At))
}

// ApprovalsJSON is how drivers store a plan's approvals: a JSON array,
// never null.
func ApprovalsJSON(a []airlock.PlanApproval) string {
	if len(a) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(a)
	return string(b)
}
