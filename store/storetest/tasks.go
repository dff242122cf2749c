package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

func newTask(principal, key string, now time.Time) *airlock.Task {
	return &airlock.Task{ID: airlock.NewTaskID(), Principal: principal, Tool: "approve_withdrawal", RecordKey: key,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// RunTasks checks the store's MCP tasks: one per principal and work, from
// every caller at once; read back whole; listed newest first by page;
// purged with the records; and plans withdrawn by their proposer.
func RunTasks(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)

	t.Run("OnePerPrincipalAndWork", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		key := Key("task")
		var created atomic.Int64
		var wg sync.WaitGroup
		ids := make([]string, 16)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk := newTask("agent-a", key, now)
				tk.Repeat = i > 0
				got, c, err := s.CreateTask(ctx, tk)
				if err != nil {
					t.Error(err)
					return
				}
				if c {
					created.Add(1)
				}
				ids[i] = got.ID
			}()
		}
		wg.Wait()
		if created.Load() != 1 {
			t.Fatalf("%d tasks made for one principal's work", created.Load())
		}
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("callers saw different tasks: %v", ids)
			}
		}
		got, err := s.GetTask(ctx, ids[0])
		must(t, err)
		if got.Principal != "agent-a" || got.RecordKey != key || got.PlanID != "" || got.Tool != "approve_withdrawal" ||
			!got.CreatedAt.Equal(now) || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("GetTask: %+v", got)
		}
		// Another principal's task for the same work is its own.
		other, c, err := s.CreateTask(ctx, newTask("agent-b", key, now))
		must(t, err)
		if !c || other.ID == got.ID {
			t.Fatalf("another principal got %+v (created %v)", other, c)
		}
		// A plan's task, kept (no expiry).
		pt := &airlock.Task{ID: airlock.NewTaskID(), Principal: "agent-a", Tool: "approve_withdrawal", PlanID: "pl_1", Repeat: true, CreatedAt: now}
		_, c, err = s.CreateTask(ctx, pt)
		must(t, err)
		back, err := s.GetTask(ctx, pt.ID)
		must(t, err)
		if !c || back.PlanID != "pl_1" || back.RecordKey != "" || !back.Repeat || !back.ExpiresAt.IsZero() {
			t.Fatalf("plan task: %+v", back)
		}
		if _, err := s.GetTask(ctx, airlock.NewTaskID()); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("unknown task: %v, want ErrNotFound", err)
		}
	})

	t.Run("RefusesMalformed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for name, mod := range map[string]func(*airlock.Task){
			"id":         func(tk *airlock.Task) { tk.ID = "tk_nothex" },
			"tool":       func(tk *airlock.Task) { tk.Tool = "" },
			"record_key": func(tk *airlock.Task) { tk.PlanID = "pl_1" },
			"created_at": func(tk *airlock.Task) { tk.CreatedAt = time.Time{} },
			"expires_at": func(tk *airlock.Task) { tk.ExpiresAt = tk.CreatedAt },
			"principal":  func(tk *airlock.Task) { tk.Principal = "a\x00b" },
		} {
			tk := newTask("agent-a", Key("bad"), now)
			mod(tk)
			_, _, err := s.CreateTask(ctx, tk)
			var e *airlock.Error
			if !errors.As(err, &e) || e.Field != name {
				t.Errorf("%s: got %v, want an error naming the field", name, err)
			}
		}
	})

	t.Run("ListNewestFirstByPage", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var want []string
		for i := range 5 {
			tk, _, err := s.CreateTask(ctx, newTask("lister", Key("l"), now.Add(time.Duration(i)*time.Second)))
			must(t, err)
			want = append([]string{tk.ID}, want...)
		}
		_, _, err := s.CreateTask(ctx, newTask("someone-else", Key("l"), now))
		must(t, err)
		var got []string
		after := ""
		for {
			page, err := s.ListTasks(ctx, &airlock.ListTasksParams{Principal: "lister", After: after, Limit: 2})
			must(t, err)
			for _, tk := range page {
				got = append(got, tk.ID)
			}
			if len(page) < 2 {
				break
			}
			after = airlock.TaskCursor(page[len(page)-1])
		}
		if len(got) != len(want) {
			t.Fatalf("listed %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("listed %v, want %v", got, want)
			}
		}
		if _, err := s.ListTasks(ctx, &airlock.ListTasksParams{Principal: "lister", After: "not a cursor", Limit: 2}); airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
			t.Fatalf("bad cursor: %v", err)
		}
	})

	t.Run("PurgedWhenExpired", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		old := newTask("agent-a", Key("old"), now.Add(-2*time.Hour))
		kept := newTask("agent-a", Key("kept"), now)
		forever := newTask("agent-a", Key("forever"), now.Add(-2*time.Hour))
		forever.ExpiresAt = time.Time{}
		for _, tk := range []*airlock.Task{old, kept, forever} {
			_, _, err := s.CreateTask(ctx, tk)
			must(t, err)
		}
		_, err := s.Purge(ctx, &airlock.PurgeParams{Now: now, Limit: 1000})
		must(t, err)
		if _, err := s.GetTask(ctx, old.ID); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("an expired task is still there: %v", err)
		}
		for _, tk := range []*airlock.Task{kept, forever} {
			if _, err := s.GetTask(ctx, tk.ID); err != nil {
				t.Fatalf("task %s: %v", tk.RecordKey, err)
			}
		}
	})

	t.Run("WithdrawPlan", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		proposed := newPlan(Key("w"), airlock.PlanAwaitingApproval, now)
		proposed.ProposedBy = "agent-a"
		p, _, err := s.CreatePlan(ctx, proposed)
		must(t, err)
		at := now.Add(time.Minute)
		// Only its proposer withdraws it: another principal sharing the
		// work is refused, and the plan still waits (decision 70).
		other, ok, err := s.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: p.ID, By: "agent-b", Reason: "not mine", At: at})
		if !errors.Is(err, airlock.ErrNotProposer) || !errors.Is(err, airlock.ErrForbidden) || ok || other.Status != airlock.PlanAwaitingApproval {
			t.Fatalf("withdrawn by another principal: %v %v %+v", err, ok, other)
		}
		got, ok, err := s.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: p.ID, By: "agent-a", Reason: "withdrawn by its proposer", At: at})
		must(t, err)
		if !ok || got.Status != airlock.PlanWithdrawn || got.DecidedBy != "agent-a" || !got.DecidedAt.Equal(at) || !got.Status.Final() {
			t.Fatalf("withdrawn: %v %+v", ok, got)
		}
		again, ok, err := s.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: p.ID, By: "agent-a", Reason: "again", At: at})
		must(t, err)
		if ok || again.Status != airlock.PlanWithdrawn || again.DecisionReason != "withdrawn by its proposer" {
			t.Fatalf("withdrawn twice: %v %+v", ok, again)
		}
		trail, err := s.AuditTrail(ctx, airlock.AuditFilter{PlanID: p.ID})
		must(t, err)
		var withdrawn []*airlock.AuditEvent
		for _, e := range trail {
			if e.Kind == airlock.EventWithdrawn {
				withdrawn = append(withdrawn, e)
			}
		}
		if len(withdrawn) != 1 || withdrawn[0].Actor != "agent-a" {
			t.Fatalf("withdrawn events: %+v", withdrawn)
		}
		// An approved plan is not withdrawn: it is already being done.
		ap, _, err := s.CreatePlan(ctx, newPlan(Key("w"), airlock.PlanApproved, now))
		must(t, err)
		still, ok, err := s.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: ap.ID, By: "agent-a", Reason: "too late", At: at})
		must(t, err)
		if ok || still.Status != airlock.PlanApproved {
			t.Fatalf("approved plan: %v %+v", ok, still)
		}
		if _, _, err := s.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: "pl_none", By: "agent-a", Reason: "", At: at}); !errors.Is(err, airlock.ErrNotFound) {
			t.Fatalf("unknown plan: %v", err)
		}
	})
}
