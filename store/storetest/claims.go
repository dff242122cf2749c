package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// runClaims: work its caller runs (the claims API): one holder per key,
// the first result for every repeat, a released claim for work that never
// started, in doubt for an unknown outcome or a holder that vanished, and a
// claim nobody else can renew or finish.
func runClaims(t *testing.T, newStore NewStore) {
	callerTool := func() *airlock.Tool {
		tool := Tool("add_note", "forever")
		tool.RepeatWait = &airlock.Duration{Duration: 10 * time.Millisecond}
		return tool
	}
	succeeded := airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"note":"N-1"}`)}
	holder := guard.Holder{Principal: "agent-1"}

	t.Run("HeldThenRepeated", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		if err != nil || h == nil || a != nil || h.Secret == "" || !h.LeaseUntil.After(time.Now()) {
			t.Fatalf("first claim: %+v %+v %v; want held", h, a, err)
		}
		if _, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder); err != nil || a == nil || a.Status != airlock.StatusInProgress {
			t.Fatalf("claim while held: %+v %v; want in_progress", a, err)
		}
		until, err := b.guard.Renew(b.ctx, h.Claimed())
		if err != nil || until.Before(h.LeaseUntil) {
			t.Fatalf("renew: %v %v; want a lease at least until %v", until, err, h.LeaseUntil)
		}
		a, err = b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded)
		if err != nil || a.Status != airlock.StatusSucceeded || a.Repeat || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("finish: %+v %v", a, err)
		}
		if _, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder); err != nil || a == nil || !a.Repeat || a.Status != airlock.StatusSucceeded || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("claim after finish: %+v %v; want the first result as a repeat", a, err)
		}
		// A finish retried after a lost reply gets the record's answer; one
		// that says another outcome is refused and changes nothing.
		if a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil || a.Status != airlock.StatusSucceeded || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("finish again: %+v %v", a, err)
		}
		for _, other := range []airlock.OutcomeKind{airlock.OutcomeFailed, airlock.OutcomeUnknown} {
			if _, err := b.guard.Finish(b.ctx, tool, h.Claimed(), airlock.Outcome{Kind: other}); airlock.ErrorCode(err) != airlock.CodeConflict {
				t.Fatalf("finish again as %v: %v; want state_conflict", other, err)
			}
		}
		if rec, err := b.store.Get(b.ctx, h.Key); err != nil || rec.State != airlock.StateSucceeded || string(rec.Result) != `{"note":"N-1"}` {
			t.Fatalf("after a conflicting finish: %+v %v", rec, err)
		}
		if _, err := b.guard.Renew(b.ctx, h.Claimed()); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("renew after finish: %v; want lease_lost", err)
		}
	})

	t.Run("OneHolderAmongMany", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		var mu sync.Mutex
		var held []*guard.Held
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				h, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
				switch {
				case err != nil:
					t.Error(err)
				case h != nil:
					mu.Lock()
					held = append(held, h)
					mu.Unlock()
				case a.Status != airlock.StatusInProgress:
					t.Errorf("a caller that does not hold the claim: %+v", a)
				}
			})
		}
		wg.Wait()
		if len(held) != 1 {
			t.Fatalf("%d callers hold the claim; want 1", len(held))
		}
	})

	t.Run("NobodyElseFinishesOrRenews", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, _, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		must(t, err)
		held, _ := b.store.Get(b.ctx, h.Key)
		guessed := guard.Claimed{Key: h.Key, Secret: "claim-00000000000000000000000000000000", Holder: h.Holder}
		if _, err := b.guard.Finish(b.ctx, tool, guessed, succeeded); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("finish by another owner: %v; want lease_lost", err)
		}
		if _, err := b.guard.Renew(b.ctx, guessed); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("renew by another owner: %v; want lease_lost", err)
		}
		if _, err := b.guard.Finish(b.ctx, Tool("other_tool", "forever"), h.Claimed(), succeeded); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("finish naming another tool: %v; want lease_lost", err)
		}
		if rec, err := b.store.Get(b.ctx, h.Key); err != nil || rec.State != airlock.StateRunning || rec.Owner != held.Owner {
			t.Fatalf("after refused finishes: %+v %v", rec, err)
		}
		if a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil || a.Status != airlock.StatusSucceeded {
			t.Fatalf("the holder's finish: %+v %v", a, err)
		}
	})

	t.Run("WorkThatNeverStartedIsReleased", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, _, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		must(t, err)
		if _, err := b.guard.Finish(b.ctx, tool, h.Claimed(), airlock.Outcome{Kind: airlock.OutcomeNotSent}); airlock.ErrorCode(err) != airlock.CodeNotSent {
			t.Fatalf("finish not started: %v; want not_sent", err)
		}
		if h2, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder); err != nil || h2 == nil || h2.Secret == h.Secret {
			t.Fatalf("claim after a release: %+v %+v %v; want held anew", h2, a, err)
		}
	})

	t.Run("UnknownOutcomeIsInDoubt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, _, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		must(t, err)
		a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), airlock.Outcome{Kind: airlock.OutcomeUnknown})
		if err != nil || a.Status != airlock.StatusInDoubt {
			t.Fatalf("finish unknown: %+v %v; want in_doubt", a, err)
		}
		if _, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder); err != nil || a == nil || a.Status != airlock.StatusInDoubt || !a.Repeat {
			t.Fatalf("claim of in-doubt work: %+v %v; want in_doubt, repeat", a, err)
		}
		if a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), airlock.Outcome{Kind: airlock.OutcomeUnknown}); err != nil || a.Status != airlock.StatusInDoubt {
			t.Fatalf("unknown sent again: %+v %v; want the same answer", a, err)
		}
	})

	t.Run("ARepeatWithOtherArgumentsIsAConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, id := callerTool(), Key("N")
		h, _, err := b.guard.Claim(b.ctx, call(tool, `{"record_id":"`+id+`","text":"first"}`, "r"), holder)
		must(t, err)
		if _, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil {
			t.Fatal(err)
		}
		_, a, err := b.guard.Claim(b.ctx, call(tool, `{"record_id":"`+id+`","text":"second"}`, "r"), holder)
		if err != nil || a == nil || !a.Repeat || a.Conflict == nil || len(a.Conflict.Fields) != 1 || a.Conflict.Fields[0] != "text" {
			t.Fatalf("the same work with other arguments: %+v %v; want the first result with a conflict naming text", a, err)
		}
	})

	t.Run("VanishedHolderIsReaped", func(t *testing.T) {
		t.Parallel()
		const lease = 3 * time.Second
		clock := clockwork.NewFakeClockAt(time.Now())
		b := setup(t, newStore, &guard.Config{Lease: lease, Clock: clock})
		reaper := guard.NewReaper(b.guard, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, _, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		must(t, err)
		clock.Advance(lease + time.Second) // no renewal: the holder is gone
		st, err := reaper.Reap(b.ctx)
		must(t, err)
		if st.InDoubt != 1 {
			t.Fatalf("reaper: %+v; want the claim in doubt", st)
		}
		if _, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("finish after the lease ended: %v; want lease_lost", err)
		}
		if _, a, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder); err != nil || a == nil || a.Status != airlock.StatusInDoubt {
			t.Fatalf("claim after the reaper: %+v %v; want in_doubt", a, err)
		}
	})

	t.Run("BoundToItsHolder", func(t *testing.T) {
		// A claim names its holder: another principal with the holder's
		// secret, or the holder naming a plan that is not the claim's,
		// renews and finishes nothing; once finished, only the holder's own
		// handle is answered (docs/gateway.md, "The claims API").
		t.Parallel()
		b := setup(t, newStore, nil)
		tool, args := callerTool(), `{"record_id":"`+Key("N")+`"}`
		h, _, err := b.guard.Claim(b.ctx, call(tool, args, "r"), holder)
		must(t, err)
		other := h.Claimed()
		other.Holder.Principal = "agent-2"
		otherPlan := h.Claimed()
		otherPlan.Holder.PlanID = "pl_00000000000000000000"
		for name, c := range map[string]guard.Claimed{"another principal": other, "another plan": otherPlan} {
			if _, err := b.guard.Renew(b.ctx, c); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
				t.Fatalf("renew by %s: %v; want lease_lost", name, err)
			}
			if _, err := b.guard.Finish(b.ctx, tool, c, airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"note":"theirs"}`)}); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
				t.Fatalf("finish by %s: %v; want lease_lost", name, err)
			}
		}
		if rec, err := b.store.Get(b.ctx, h.Key); err != nil || rec.State != airlock.StateRunning {
			t.Fatalf("after refused finishes: %+v %v; want still running", rec, err)
		}
		if a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("the holder's finish: %+v %v; want its own result", a, err)
		}
		guessed := h.Claimed()
		guessed.Secret = "claim-00000000000000000000000000000000"
		for name, c := range map[string]guard.Claimed{"another principal": other, "another secret": guessed} {
			if a, err := b.guard.Finish(b.ctx, tool, c, succeeded); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
				t.Fatalf("finish by %s after the holder's: %+v %v; want lease_lost, not the result", name, a, err)
			}
		}
		if a, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil || string(a.Result) != `{"note":"N-1"}` {
			t.Fatalf("the holder's finish sent again: %+v %v; want its result", a, err)
		}
	})

	t.Run("LateRenewAndFinishAgree", func(t *testing.T) {
		// After its lease's time, a claim holds until it is reaped or
		// taken over, for renew as for finish (docs/DECISIONS.md, 71 and
		// 74): before, both keep the holder's work; after, both are
		// refused and change nothing.
		t.Parallel()
		const lease = 3 * time.Second
		clock := clockwork.NewFakeClockAt(time.Now())
		b := setup(t, newStore, &guard.Config{Lease: lease, Clock: clock})
		reaper := guard.NewReaper(b.guard, nil)
		tool := callerTool()
		claim := func(id string) *guard.Held {
			h, _, err := b.guard.Claim(b.ctx, call(tool, `{"record_id":"`+id+`"}`, "r"), holder)
			must(t, err)
			return h
		}
		renewed, finished, reaped := claim(Key("R")), claim(Key("F")), claim(Key("X"))
		clock.Advance(lease + time.Millisecond)
		if _, err := b.guard.Renew(b.ctx, renewed.Claimed()); err != nil {
			t.Fatalf("renew after the lease's time, before the reaper: %v; want renewed", err)
		}
		if a, err := b.guard.Finish(b.ctx, tool, finished.Claimed(), succeeded); err != nil || a.Status != airlock.StatusSucceeded {
			t.Fatalf("finish after the lease's time, before the reaper: %+v %v; want kept", a, err)
		}
		st, err := reaper.Reap(b.ctx)
		must(t, err)
		if st.InDoubt != 1 {
			t.Fatalf("reaper: %+v; want only the claim neither renewed nor finished in doubt", st)
		}
		if _, err := b.guard.Renew(b.ctx, reaped.Claimed()); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("renew after the reaper: %v; want lease_lost", err)
		}
		if _, err := b.guard.Finish(b.ctx, tool, reaped.Claimed(), succeeded); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("finish after the reaper: %v; want lease_lost", err)
		}
		if rec, err := b.store.Get(b.ctx, reaped.Key); err != nil || rec.State != airlock.StateInDoubt {
			t.Fatalf("the reaped claim after late calls: %+v %v; want in doubt", rec, err)
		}
		if a, err := b.guard.Finish(b.ctx, tool, renewed.Claimed(), succeeded); err != nil || a.Status != airlock.StatusSucceeded {
			t.Fatalf("finish of the renewed claim: %+v %v", a, err)
		}
	})

	t.Run("BudgetCountsClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore, nil)
		tool := callerTool()
		tool.MaxCallsPerRun = 1
		h, _, err := b.guard.Claim(b.ctx, call(tool, `{"record_id":"`+Key("N")+`"}`, "run-1"), holder)
		must(t, err)
		if _, err := b.guard.Finish(b.ctx, tool, h.Claimed(), succeeded); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.guard.Claim(b.ctx, call(tool, `{"record_id":"`+Key("N")+`"}`, "run-1"), holder); airlock.ErrorCode(err) != airlock.CodeBudgetExceeded {
			t.Fatalf("a second piece of work in a run of one: %v; want budget_exceeded", err)
		}
	})
}
