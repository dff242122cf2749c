package plan

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// NextCallerCommit gives a worker the next commit of the irreversible tools
// it serves (tools run by their caller): a plan still committing whose
// claim's holder vanished (taken over when the tool honours keys), or else
// the oldest approved plan, whose work is claimed for the worker by the
// plan's key, held by principal for that plan. On the way, plans whose
// work has ended (or gone in doubt) are settled. Nil, nil when there is
// nothing to do. The worker runs the tool with the plan's arguments and
// completes the claim (CompleteCallerCommit), which records the answer on
// the plan.
func (s *Service) NextCallerCommit(ctx context.Context, tools []*airlock.Tool, principal string) (*airlock.Plan, *guard.Held, error) {
	for _, status := range []airlock.PlanStatus{airlock.PlanCommitting, airlock.PlanApproved} {
		for _, tool := range tools {
			f := airlock.PlanFilter{Status: status, Tool: tool.Name, Limit: 50}
			if workers := tool.CommitWorkers(); len(workers) > 0 {
				if !slices.Contains(workers, principal) {
					continue // the tool's plans are its workers' alone
				}
			} else {
				f.ProposedBy = principal // a worker takes the plans its principal proposed
			}
			plans, err := s.cfg.Store.ListPlans(ctx, f)
			if err != nil {
				return nil, nil, err
			}
			for _, p := range plans {
				held, err := s.claimCommit(ctx, tool, p, principal)
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
func (s *Service) claimCommit(ctx context.Context, tool *airlock.Tool, p *airlock.Plan, principal string) (*guard.Held, error) {
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
	held, ans, err := s.cfg.Guard.ClaimKeyed(ctx, &airlock.KeyedCall{Tool: tool, Key: p.Key, Args: args, RunID: p.RunID},
		guard.Holder{Principal: principal, PlanID: p.ID})
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

// CompleteCallerCommit completes the claim of a plan's commit that a
// worker held (its handle names the plan, c the claim) and records the
// answer on the plan. The plan must be the claim's — its tool and its key —
// or nothing changes and the handle is refused: a handle naming another
// plan would otherwise mark that plan done with this one's result, and its
// approved work would never run. Work released as never started fails in
// the guard, and the plan stays committing for the next worker.
func (s *Service) CompleteCallerCommit(ctx context.Context, tool *airlock.Tool, c guard.Claimed, out airlock.Outcome) (*airlock.Answer, error) {
	p, err := s.commitOf(ctx, tool, c)
	if err != nil {
		return nil, err
	}
	a, err := s.cfg.Guard.Finish(ctx, tool, c, out)
	if err != nil {
		return nil, err
	}
	return a, s.settleCommit(ctx, p.ID, tool, a)
}

// RenewCallerCommit renews the claim of a plan's commit, whose plan must be
// the claim's as for CompleteCallerCommit.
func (s *Service) RenewCallerCommit(ctx context.Context, tool *airlock.Tool, c guard.Claimed) (time.Time, error) {
	if _, err := s.commitOf(ctx, tool, c); err != nil {
		return time.Time{}, err
	}
	return s.cfg.Guard.Renew(ctx, c)
}

// commitOf is the plan a commit's claim names, when it is the claim's.
func (s *Service) commitOf(ctx context.Context, tool *airlock.Tool, c guard.Claimed) (*airlock.Plan, error) {
	p, err := s.cfg.Store.GetPlan(ctx, c.Holder.PlanID)
	switch {
	case errors.Is(err, airlock.ErrNotFound) || err == nil && (p.Tool != tool.Name || p.Key != c.Key):
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "claim", "this handle names a plan that is not its claim's: use the claim of an execute answer as it came; nothing was changed")
	case err != nil:
		return nil, err
	}
	return p, nil
}
