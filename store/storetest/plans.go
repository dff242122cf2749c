package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
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
				p, c, err := s.CreatePlan(ctx, newPlan(key, airlock.PlanAwaitingApproval, now))
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

	t.Run("Decide", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		p, _, err := s.CreatePlan(ctx, newPlan(Key("k"), airlock.PlanAwaitingApproval, now))
		must(t, err)
		decide := func(approve bool, hash string) (*airlock.Plan, error) {
			return s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: approve, By: "alice", Role: airlock.RoleApprover, Reason: "checked the ledger", DecisionHash: hash, Now: now})
		}
		if _, err := decide(true, "stale"); airlock.ErrorCode(err) != airlock.CodeConflict {
			t.Fatalf("stale hash: %v", err)
		}
		got, err := decide(true, p.DecisionHash)
		must(t, err)
		if got.Status != airlock.PlanApproved || got.DecidedBy != "alice" {
			t.Fatalf("approve: %+v", got)
		}
		// Approving twice is one approval; rejecting now is refused.
		got, err = decide(true, p.DecisionHash)
		must(t, err)
		if got.Status != airlock.PlanApproved {
			t.Fatalf("approve again: %+v", got)
		}
		if _, err := decide(false, p.DecisionHash); airlock.ErrorCode(err) != airlock.CodeConflict {
			t.Fatalf("reject after approve: %v", err)
		}
		if _, err := s.DecidePlan(ctx, &airlock.PlanDecision{ID: "nope", Approve: true, By: "a", Role: airlock.RoleAdmin, Reason: "r", Now: now}); airlock.ErrorCode(err) != airlock.CodeNotFound {
			t.Fatalf("missing plan: %v", err)
		}
	})

	t.Run("SeparationOfDuties", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		proposed := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		proposed.ProposedBy = "root"
		p, _, err := s.CreatePlan(ctx, proposed)
		must(t, err)
		if p.ProposedBy != "root" || p.ApprovalsRequiredOr() != 1 {
			t.Fatalf("stored plan: proposed by %q, %d approvals required", p.ProposedBy, p.ApprovalsRequired)
		}
		d := &airlock.PlanDecision{ID: p.ID, Approve: true, By: "root", Role: airlock.RoleAdmin, Reason: "mine", DecisionHash: p.DecisionHash, Now: now}
		_, err = s.DecidePlan(ctx, d)
		if airlock.ErrorCode(err) != airlock.CodeForbidden || !strings.Contains(err.Error(), "separation of duties") {
			t.Fatalf("the proposer approving its own plan: %v, want forbidden naming separation of duties", err)
		}
		if got, _ := s.GetPlan(ctx, p.ID); got.Status != airlock.PlanAwaitingApproval || len(got.Approvals) != 0 {
			t.Fatalf("after the refusal: %s, %d approvals", got.Status, len(got.Approvals))
		}
		events, err := s.AuditTrail(ctx, airlock.AuditFilter{PlanID: p.ID})
		must(t, err)
		refused := slices.IndexFunc(events, func(e *airlock.AuditEvent) bool { return e.Kind == airlock.EventDecisionRefused })
		if refused < 0 || events[refused].Actor != "root" || !strings.Contains(events[refused].Error, "separation of duties") {
			t.Fatalf("the refusal is not audited: %+v", events)
		}
		// An approver list leaves out someone else, whatever the role.
		d2 := *d
		d2.By, d2.Policy = "mallory", airlock.DecisionPolicy{Approvers: []string{"alice", "group:payments"}}
		if _, err := s.DecidePlan(ctx, &d2); airlock.ErrorCode(err) != airlock.CodeForbidden || !strings.Contains(err.Error(), "alice, group:payments") {
			t.Fatalf("someone not among the approvers: %v", err)
		}
		d2.By, d2.Groups = "carol", []string{"payments"}
		got, err := s.DecidePlan(ctx, &d2)
		must(t, err)
		if got.Status != airlock.PlanApproved || got.DecidedBy != "carol" || len(got.Approvals) != 1 || got.Approvals[0].By != "carol" {
			t.Fatalf("a member of the approvers' group: %+v", got)
		}
		// With self-approval allowed, the proposer may approve.
		own := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		own.ProposedBy = "root"
		p2, _, err := s.CreatePlan(ctx, own)
		must(t, err)
		d3 := *d
		d3.ID, d3.Policy = p2.ID, airlock.DecisionPolicy{SelfApproval: true}
		if got, err := s.DecidePlan(ctx, &d3); err != nil || got.Status != airlock.PlanApproved {
			t.Fatalf("self-approval allowed: %+v %v", got, err)
		}
		// The proposer may reject its own plan.
		mine := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		mine.ProposedBy = "root"
		p3, _, err := s.CreatePlan(ctx, mine)
		must(t, err)
		d4 := *d
		d4.ID, d4.Approve = p3.ID, false
		if got, err := s.DecidePlan(ctx, &d4); err != nil || got.Status != airlock.PlanRejected {
			t.Fatalf("the proposer rejecting: %+v %v", got, err)
		}
	})

	t.Run("TwoApprovers", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		two := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		two.ApprovalsRequired = 2
		p, _, err := s.CreatePlan(ctx, two)
		must(t, err)
		decide := func(by string, approve bool) (*airlock.Plan, error) {
			return s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: approve, By: by, Role: airlock.RoleApprover, Reason: by + " checked", DecisionHash: p.DecisionHash, Now: now})
		}
		got, err := decide("alice", true)
		must(t, err)
		if got.Status != airlock.PlanAwaitingApproval || len(got.Approvals) != 1 || got.DecidedBy != "" {
			t.Fatalf("one approval of two: %+v", got)
		}
		// The same person again is still one approval.
		got, err = decide("alice", true)
		must(t, err)
		if got.Status != airlock.PlanAwaitingApproval || len(got.Approvals) != 1 {
			t.Fatalf("alice twice: %+v", got)
		}
		got, err = decide("bob", true)
		must(t, err)
		if got.Status != airlock.PlanApproved || len(got.Approvals) != 2 || got.DecidedBy != "bob" || got.Approvals[0].By != "alice" {
			t.Fatalf("two approvals: %+v", got)
		}
		read, err := s.GetPlan(ctx, p.ID)
		must(t, err)
		if read.Status != airlock.PlanApproved || len(read.Approvals) != 2 || read.Approvals[1].Reason != "bob checked" {
			t.Fatalf("read back: %+v", read)
		}
		events, err := s.AuditTrail(ctx, airlock.AuditFilter{PlanID: p.ID})
		must(t, err)
		var kinds []string
		for _, e := range events {
			kinds = append(kinds, e.Kind+":"+e.Actor)
		}
		if !slices.Contains(kinds, airlock.EventApproval+":alice") || !slices.Contains(kinds, airlock.EventDecided+":bob") {
			t.Fatalf("each approval is its own event: %v", kinds)
		}
		// One rejection rejects, after an approval.
		other := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		other.ApprovalsRequired = 2
		p, _, err = s.CreatePlan(ctx, other)
		must(t, err)
		_, err = decide("alice", true)
		must(t, err)
		got, err = decide("carol", false)
		must(t, err)
		if got.Status != airlock.PlanRejected || got.DecidedBy != "carol" {
			t.Fatalf("a rejection after one approval: %+v", got)
		}
	})

	t.Run("ExpireListAndStatus", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		old := newPlan(Key("k"), airlock.PlanAwaitingApproval, now.Add(-2*time.Hour))
		old.ExpiresAt = now.Add(-time.Hour)
		_, _, err := s.CreatePlan(ctx, old)
		must(t, err)
		fresh, _, err := s.CreatePlan(ctx, newPlan(Key("k"), airlock.PlanAwaitingApproval, now))
		must(t, err)
		expired, err := s.ExpirePlans(ctx, now)
		must(t, err)
		if len(expired) != 1 || expired[0].ID != old.ID || expired[0].Status != airlock.PlanExpired {
			t.Fatalf("expired %+v", expired)
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
		ok, err := s.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: fresh.ID, From: []airlock.PlanStatus{airlock.PlanApproved}, To: airlock.PlanCommitting, At: now})
		must(t, err)
		if ok {
			t.Fatal("status moved from a status the plan was not in")
		}
		ok, err = s.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: fresh.ID, From: []airlock.PlanStatus{airlock.PlanAwaitingApproval}, To: airlock.PlanCommitted, Result: json.RawMessage(`{"ok":true}`), Error: "", At: now})
		must(t, err)
		got, _ := s.GetPlan(ctx, fresh.ID)
		if !ok || got.Status != airlock.PlanCommitted || string(got.Result) != `{"ok":true}` {
			t.Fatalf("set status: %v %+v", ok, got)
		}
	})

	t.Run("PagesWithCursorsAndFilters", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// 120 plans over two tools, four statuses and two approvers; some
		// share a creation time, so the id breaks ties.
		var all []*airlock.Plan
		for i := range 120 {
			p := newPlan(Key("page"), []airlock.PlanStatus{airlock.PlanAwaitingApproval, airlock.PlanApproved, airlock.PlanRejected, airlock.PlanCommitted}[i%4],
				now.Add(-time.Duration(i/3)*time.Minute))
			p.Tool = []string{"tool_a", "tool_b"}[i%2]
			if p.Status != airlock.PlanAwaitingApproval {
				p.DecidedBy = []string{"alice", "bob"}[i%3%2]
			}
			stored, _, err := s.CreatePlan(ctx, p)
			must(t, err)
			all = append(all, stored)
		}
		for _, tc := range []struct {
			name  string
			f     airlock.PlanFilter
			match func(*airlock.Plan) bool
		}{
			{"all, oldest first", airlock.PlanFilter{}, func(*airlock.Plan) bool { return true }},
			{"newest first", airlock.PlanFilter{Newest: true}, func(*airlock.Plan) bool { return true }},
			{"by status", airlock.PlanFilter{Status: airlock.PlanApproved}, func(p *airlock.Plan) bool { return p.Status == airlock.PlanApproved }},
			{"by tool, decided, newest", airlock.PlanFilter{Tool: "tool_b", Decided: true, Newest: true}, func(p *airlock.Plan) bool {
				return p.Tool == "tool_b" && p.Status != airlock.PlanAwaitingApproval
			}},
			{"by approver", airlock.PlanFilter{DecidedBy: "bob"}, func(p *airlock.Plan) bool { return p.DecidedBy == "bob" }},
			{"a creation range", airlock.PlanFilter{Since: now.Add(-20 * time.Minute), Until: now.Add(-5 * time.Minute)}, func(p *airlock.Plan) bool {
				return !p.CreatedAt.Before(now.Add(-20*time.Minute)) && p.CreatedAt.Before(now.Add(-5*time.Minute))
			}},
		} {
			var want []string
			for _, p := range all {
				if tc.match(p) {
					want = append(want, p.ID)
				}
			}
			byID := map[string]*airlock.Plan{}
			for _, p := range all {
				byID[p.ID] = p
			}
			slices.SortStableFunc(want, func(a, b string) int {
				pa, pb := byID[a], byID[b]
				c := pa.CreatedAt.Compare(pb.CreatedAt)
				if c == 0 {
					c = strings.Compare(pa.ID, pb.ID)
				}
				if tc.f.Newest {
					return -c
				}
				return c
			})
			var got []string
			f := tc.f
			f.Limit = 7
			for pages := 0; ; pages++ {
				page, err := s.ListPlans(ctx, f)
				must(t, err)
				for _, p := range page {
					got = append(got, p.ID)
				}
				if len(page) < f.Limit || pages > 100 {
					break
				}
				f.After = airlock.PlanCursor(page[len(page)-1])
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: pages gave %d plans, want %d\n got %v\nwant %v", tc.name, len(got), len(want), got, want)
			}
		}
		for _, tc := range []struct {
			f     airlock.PlanFilter
			field string
		}{
			{airlock.PlanFilter{Status: "pending"}, "status"},
			{airlock.PlanFilter{Limit: 1_000_000_000}, "limit"},
			{airlock.PlanFilter{After: "not a cursor!"}, "after"},
			{airlock.PlanFilter{After: "MTIz"}, "after"}, // base64 of "123": no id
			{airlock.PlanFilter{Since: now, Until: now.Add(-time.Hour)}, "until"},
		} {
			_, err := s.ListPlans(ctx, tc.f)
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != tc.field {
				t.Errorf("filter %+v: %v, want invalid_argument on %s", tc.f, err, tc.field)
			}
		}
	})

	t.Run("WaitingPlansPerTool", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if w, err := s.WaitingPlans(ctx); err != nil || len(w) != 0 {
			t.Fatalf("empty store: %+v %v", w, err)
		}
		oldest := now.Add(-3 * time.Hour)
		for i, at := range []time.Time{now.Add(-time.Hour), oldest, now} {
			p := newPlan(Key("w"), airlock.PlanAwaitingApproval, at)
			p.ExpiresAt = now.Add(time.Hour)
			if i == 2 {
				p.Tool = "send_mail"
			}
			_, _, err := s.CreatePlan(ctx, p)
			must(t, err)
		}
		decided := newPlan(Key("w"), airlock.PlanApproved, now.Add(-10*time.Hour))
		_, _, err := s.CreatePlan(ctx, decided)
		must(t, err)
		w, err := s.WaitingPlans(ctx)
		must(t, err)
		if len(w) != 2 || w[0].Tool != "approve_withdrawal" || w[0].Depth != 2 || !w[0].Oldest.Equal(oldest) ||
			w[1].Tool != "send_mail" || w[1].Depth != 1 || !w[1].Oldest.Equal(now) {
			t.Fatalf("waiting: %+v", w)
		}
	})
}

// NewStoreWithOutbox returns a fresh, migrated store whose driver inserts
// the commit job of an approved plan with enqueue, inside the approving
// transaction.
type NewStoreWithOutbox func(t testing.TB, enqueue func(ctx context.Context, p *airlock.Plan) error) airlock.Store

// RunOutbox checks that a plan approved by a rule or by a person has its
// commit enqueued in the same transaction: once, and not at all when the
// transaction fails.
func RunOutbox(t *testing.T, newStore NewStoreWithOutbox) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	t.Run("AutoApprovedPlanEnqueuesInTheSameTransaction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		failing := ""
		s := newStore(t, func(ctx context.Context, p *airlock.Plan) error {
			if p.ID == failing {
				return errors.New("queue down")
			}
			calls.Add(1)
			return nil
		})
		p := newPlan(Key("k"), airlock.PlanApproved, now)
		p.Decision = "auto"
		_, created, err := s.CreatePlan(ctx, p)
		must(t, err)
		_, again, err := s.CreatePlan(ctx, newPlan(p.Key, airlock.PlanApproved, now))
		must(t, err)
		if !created || again || calls.Load() != 1 {
			t.Fatalf("created %v again %v enqueued %d", created, again, calls.Load())
		}
		// A failing enqueue rolls the plan back.
		bad := newPlan(Key("k"), airlock.PlanApproved, now)
		failing = bad.ID
		if _, _, err := s.CreatePlan(ctx, bad); err == nil {
			t.Fatal("a failing enqueue must fail the create")
		}
		if _, err := s.GetPlan(ctx, bad.ID); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("the plan survived its failed enqueue: %v", err)
		}
	})
	t.Run("ApprovalEnqueuesOnceInTheSameTransaction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		var fail atomic.Bool
		s := newStore(t, func(ctx context.Context, p *airlock.Plan) error {
			if fail.Load() {
				return errors.New("queue down")
			}
			calls.Add(1)
			return nil
		})
		p, _, err := s.CreatePlan(ctx, newPlan(Key("k"), airlock.PlanAwaitingApproval, now))
		must(t, err)
		d := &airlock.PlanDecision{ID: p.ID, Approve: true, By: "alice", Role: airlock.RoleApprover, Reason: "checked", DecisionHash: p.DecisionHash, Now: now}
		fail.Store(true)
		if _, err := s.DecidePlan(ctx, d); err == nil {
			t.Fatal("a failing enqueue must fail the decision")
		}
		if got, _ := s.GetPlan(ctx, p.ID); got.Status != airlock.PlanAwaitingApproval {
			t.Fatalf("the approval survived its failed enqueue: %s", got.Status)
		}
		fail.Store(false)
		for range 2 {
			got, err := s.DecidePlan(ctx, d)
			must(t, err)
			if got.Status != airlock.PlanApproved {
				t.Fatalf("approve: %+v", got)
			}
		}
		if calls.Load() != 1 {
			t.Fatalf("approved twice, enqueued %d times; want 1", calls.Load())
		}
	})
	t.Run("TwoApproversAtOnceCommitOnce", func(t *testing.T) {
		t.Parallel()
		RunTwoApproversAtOnce(t, newStore)
	})
}

// RunTwoApproversAtOnce checks that two approvals of a plan that needs two, arriving
// at once (as from two replicas: two transactions), approve it once and
// enqueue its commit once, every time.
func RunTwoApproversAtOnce(t *testing.T, newStore NewStoreWithOutbox) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	commits := map[string]int{}
	var mu sync.Mutex
	s := newStore(t, func(ctx context.Context, p *airlock.Plan) error {
		mu.Lock()
		defer mu.Unlock()
		commits[p.ID]++
		return nil
	})
	for range 20 {
		two := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		two.ApprovalsRequired = 2
		p, _, err := s.CreatePlan(ctx, two)
		must(t, err)
		var wg sync.WaitGroup
		for _, by := range []string{"alice", "bob"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: true, By: by, Role: airlock.RoleApprover, Reason: "ok", DecisionHash: p.DecisionHash, Now: now}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		got, err := s.GetPlan(ctx, p.ID)
		must(t, err)
		mu.Lock()
		n := commits[p.ID]
		mu.Unlock()
		if got.Status != airlock.PlanApproved || len(got.Approvals) != 2 || n != 1 {
			t.Fatalf("two approvals at once: %s with %d approvals, %d commits enqueued; want approved, 2, 1", got.Status, len(got.Approvals), n)
		}
	}
}

// RunNoticeOutbox checks that a plan created waiting for a person has its
// notice enqueued in the creating transaction: once, not for a plan
// decided by a rule, and a failing enqueue fails the create.
func RunNoticeOutbox(t *testing.T, newStore NewStoreWithOutbox) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	t.Run("WaitingPlanEnqueuesItsNoticeInTheSameTransaction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		failing := ""
		s := newStore(t, func(ctx context.Context, p *airlock.Plan) error {
			if p.ID == failing {
				return errors.New("queue down")
			}
			if p.Status != airlock.PlanAwaitingApproval {
				t.Errorf("a notice for a %s plan", p.Status)
			}
			calls.Add(1)
			return nil
		})
		p := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		_, created, err := s.CreatePlan(ctx, p)
		must(t, err)
		_, again, err := s.CreatePlan(ctx, newPlan(p.Key, airlock.PlanAwaitingApproval, now))
		must(t, err)
		auto := newPlan(Key("k"), airlock.PlanApproved, now)
		auto.Decision = "auto"
		_, _, err = s.CreatePlan(ctx, auto)
		must(t, err)
		if !created || again || calls.Load() != 1 {
			t.Fatalf("created %v again %v noticed %d; want one notice", created, again, calls.Load())
		}
		bad := newPlan(Key("k"), airlock.PlanAwaitingApproval, now)
		failing = bad.ID
		if _, _, err := s.CreatePlan(ctx, bad); err == nil {
			t.Fatal("a failing enqueue must fail the create")
		}
		if _, err := s.GetPlan(ctx, bad.ID); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("the plan survived its failed notice: %v", err)
		}
	})
}
