package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

func newPlan(key string, status airlock.PlanStatus, now time.Time) *airlock.Plan {
	args := json.RawMessage(`{"record_id":"WD-1"}`)
	facts := json.RawMessage(`{"amount_minor":100000}`)
	return &airlock.Plan{
		ID: Key("plan"), Key: key, Tool: "approve_withdrawal", Status: status, Rule: "everything_else", Decision: "human",
		Evaluation: json.RawMessage(`[{"name":"everything_else","matched":true}]`), Args: args, Facts: facts,
		DecisionHash: airlock.DecisionHash("approve_withdrawal", args, facts), RunID: "run-1",
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

func runPlans(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)

	t.Run("CreateIsUniqueOnKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("k")
		var created atomic.Int64
		var wg sync.WaitGroup
		ids := make([]string, 16)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, c, err := s.CreatePlan(ctx, newPlan(key, airlock.PlanAwaitingApproval, now), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if c {
					created.Add(1)
				}
				ids[i] = p.ID
			}()
		}
		wg.Wait()
		if created.Load() != 1 {
			t.Fatalf("%d plans created for one key", created.Load())
		}
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("callers saw different plans: %v", ids)
			}
		}
		got, err := s.GetPlan(ctx, ids[0])
		must(t, err)
		if got.Key != key || string(got.Facts) != `{"amount_minor":100000}` || got.Status != airlock.PlanAwaitingApproval || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("GetPlan: %+v", got)
		}
	})

	t.Run("AutoApprovedPlanEnqueuesInTheSameTransaction", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var calls atomic.Int64
		enqueue := func(ctx context.Context, tx any, p *airlock.Plan) error {
			if tx == nil {
				t.Error("enqueue got no transaction")
			}
			calls.Add(1)
			return nil
		}
		p := newPlan(Key("k"), airlock.PlanApproved, now)
		p.Decision = "auto"
		_, created, err := s.CreatePlan(ctx, p, enqueue)
		must(t, err)
		_, again, err := s.CreatePlan(ctx, newPlan(p.Key, airlock.PlanApproved, now), enqueue)
		must(t, err)
		if !created || again || calls.Load() != 1 {
			t.Fatalf("created %v again %v enqueued %d", created, again, calls.Load())
		}
		// A failing enqueue rolls the plan back.
		failing := newPlan(Key("k"), airlock.PlanApproved, now)
		if _, _, err := s.CreatePlan(ctx, failing, func(context.Context, any, *airlock.Plan) error { return errors.New("queue down") }); err == nil {
			t.Fatal("a failing enqueue must fail the create")
		}
		if _, err := s.GetPlan(ctx, failing.ID); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("the plan survived its failed enqueue: %v", err)
		}
	})

	t.Run("Decide", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		p, _, err := s.CreatePlan(ctx, newPlan(Key("k"), airlock.PlanAwaitingApproval, now), nil)
		must(t, err)
		var enqueued atomic.Int64
		enqueue := func(context.Context, any, *airlock.Plan) error { enqueued.Add(1); return nil }
		decide := func(approve bool, hash string) (*airlock.Plan, error) {
			return s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: approve, By: "alice", Reason: "checked the ledger", DecisionHash: hash, Now: now}, enqueue)
		}
		if _, err := decide(true, "stale"); airlock.ErrorCode(err) != airlock.CodeConflict {
			t.Fatalf("stale hash: %v", err)
		}
		got, err := decide(true, p.DecisionHash)
		must(t, err)
		if got.Status != airlock.PlanApproved || got.DecidedBy != "alice" || enqueued.Load() != 1 {
			t.Fatalf("approve: %+v enqueued %d", got, enqueued.Load())
		}
		// Approving twice is one approval; rejecting now is refused.
		got, err = decide(true, p.DecisionHash)
		must(t, err)
		if got.Status != airlock.PlanApproved || enqueued.Load() != 1 {
			t.Fatalf("approve again: %+v enqueued %d", got, enqueued.Load())
		}
		if _, err := decide(false, p.DecisionHash); airlock.ErrorCode(err) != airlock.CodeConflict {
			t.Fatalf("reject after approve: %v", err)
		}
		if _, err := s.DecidePlan(ctx, &airlock.PlanDecision{ID: "nope", Approve: true, By: "a", Reason: "r", Now: now}, nil); airlock.ErrorCode(err) != airlock.CodeNotFound {
			t.Fatalf("missing plan: %v", err)
		}
	})

	t.Run("ExpireListAndStatus", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		old := newPlan(Key("k"), airlock.PlanAwaitingApproval, now.Add(-2*time.Hour))
		old.ExpiresAt = now.Add(-time.Hour)
		_, _, err := s.CreatePlan(ctx, old, nil)
		must(t, err)
		fresh, _, err := s.CreatePlan(ctx, newPlan(Key("k"), airlock.PlanAwaitingApproval, now), nil)
		must(t, err)
		n, err := s.ExpirePlans(ctx, now)
		must(t, err)
		if n != 1 {
			t.Fatalf("expired %d", n)
		}
		waiting, err := s.ListPlans(ctx, airlock.PlanFilter{Status: airlock.PlanAwaitingApproval})
		must(t, err)
		if len(waiting) != 1 || waiting[0].ID != fresh.ID {
			t.Fatalf("awaiting: %+v", waiting)
		}
		all, err := s.ListPlans(ctx, airlock.PlanFilter{Tool: "approve_withdrawal", RunID: "run-1"})
		must(t, err)
		if len(all) != 2 || all[0].ID != old.ID {
			t.Fatalf("list, oldest first: %d plans", len(all))
		}
		ok, err := s.SetPlanStatus(ctx, fresh.ID, []airlock.PlanStatus{airlock.PlanApproved}, airlock.PlanCommitting, nil, "", now)
		must(t, err)
		if ok {
			t.Fatal("status moved from a status the plan was not in")
		}
		ok, err = s.SetPlanStatus(ctx, fresh.ID, []airlock.PlanStatus{airlock.PlanAwaitingApproval}, airlock.PlanCommitted, json.RawMessage(`{"ok":true}`), "", now)
		must(t, err)
		got, _ := s.GetPlan(ctx, fresh.ID)
		if !ok || got.Status != airlock.PlanCommitted || string(got.Result) != `{"ok":true}` {
			t.Fatalf("set status: %v %+v", ok, got)
		}
	})
}
