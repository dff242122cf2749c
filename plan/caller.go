package plan

import (
	"context"
	"errors"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// NextCallerCommit gives a worker the next commit of the irreversible tools
// it serves (tools run by their caller): a plan still committing whose
// claim's holder vanished (taken over when the tool honours keys), or else
// the oldest approved plan, whose work is claimed for the worker by the
// plan's key. On the way, plans whose work has ended (or gone in doubt)
// are settled. Nil, nil when there is nothing to do. The worker runs the
// tool with the plan's arguments and completes the claim; FinishCallerCommit
// then records the answer on the plan.
func (s *Service) NextCallerCommit(ctx context.Context, tools []*airlock.Tool) (*airlock.Plan, *guard.Held, error) {
	for _, status := range []airlock.PlanStatus{airlock.PlanCommitting, airlock.PlanApproved} {
		for _, tool := range tools {
			plans, err := s.cfg.Store.ListPlans(ctx, airlock.PlanFilter{Status: status, Tool: tool.Name, Limit: 50})
			if err != nil {
				return nil, nil, err
			}
			for _, p := range plans {
				held, err := s.claimCommit(ctx, tool, p)
				if err != nil || held != nil {
					return p, held, err
				}
			}
		}
	}
	return nil, nil, nil
}

// claimCommit claims a plan's work for a worker; nil when another holds it
// or it has ended (then the plan is settled).
func (s *Service) claimCommit(ctx context.Context, tool *airlock.Tool, p *airlock.Plan) (*guard.Held, error) {
	// Work another worker holds is passed over with a read, not a claim:
	// a claim answered in progress would be an audit event at every poll.
	// (Past its lease, work that honours keys is taken over; other work
	// waits for the reaper to put it in doubt.)
	rec, err := s.cfg.Guard.Get(ctx, p.Key)
	switch {
	case errors.Is(err, airlock.ErrNotFound):
	case err != nil:
		return nil, err
	case rec.State == airlock.StateRunning && (rec.LeaseUntil.After(s.clock.Now()) || !tool.CallerTakesOver()):
		return nil, nil
	}
	args, err := airlock.NewArgs(p.Args)
	if err != nil {
		return nil, err
	}
	held, ans, err := s.cfg.Guard.ClaimKeyed(ctx, &airlock.KeyedCall{Tool: tool, Key: p.Key, Args: args, RunID: p.RunID})
	switch {
	case err != nil:
		return nil, err
	case held != nil:
		if p.Status == airlock.PlanApproved {
			if _, err := s.cfg.Store.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: p.ID, From: []airlock.PlanStatus{airlock.PlanApproved}, To: airlock.PlanCommitting, At: s.clock.Now()}); err != nil {
				return nil, err
			}
		}
		return held, nil
	}
	if err := s.settleCommit(ctx, p.ID, tool, ans); err != nil && !errors.Is(err, ErrRetry) {
		return nil, err
	}
	return nil, nil
}

// FinishCallerCommit records on the plan the answer of its work, which a
// worker completed (work released as never started fails in the guard
// before this, and the plan stays committing for the next worker).
func (s *Service) FinishCallerCommit(ctx context.Context, planID string, tool *airlock.Tool, ans *airlock.Answer) error {
	return s.settleCommit(ctx, planID, tool, ans)
}
