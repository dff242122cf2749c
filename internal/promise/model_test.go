package promise

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The model refuses each way of breaking the promise, and accepts the
// honest answers around them: a history checker that passes everything
// would prove nothing.
func TestModelRefusesBrokenPromises(t *testing.T) {
	t.Parallel()
	const w = "note/W-1"
	type op struct {
		call, ret int64
		in        Input
		out       Output
	}
	effect := func(call, ret int64, key, result string) op {
		return op{call, ret, Input{Kind: Effect, Work: w, Key: key}, Output{Result: result}}
	}
	call := func(call, ret int64, status, result string) op {
		return op{call, ret, Input{Kind: Call, Work: w, Door: "calls"}, Output{Status: status, Result: result}}
	}
	plan := func(call, ret int64, status, result string) op {
		return op{call, ret, Input{Kind: Call, Work: w, Door: "plan-calls"}, Output{Status: "planned", Plan: status, Result: result}}
	}
	repeat := func(o op) op {
		o.out.Repeat = true
		return o
	}
	final := func(at int64, status, result, plan string) op {
		return op{at, at, Input{Kind: Final, Work: w}, Output{Status: status, Result: result, Plan: plan}}
	}
	for _, c := range []struct {
		name string
		ok   bool
		ops  []op
	}{
		{"one effect, its result to every caller", true, []op{call(1, 4, "succeeded", "fx_a"), effect(2, 3, "k", "fx_a"), repeat(call(5, 6, "succeeded", "fx_a")), final(9, "succeeded", "fx_a", "")}},
		{"a second effect", false, []op{effect(1, 2, "k", "fx_a"), effect(3, 4, "k", "fx_b")}},
		{"an answer that is not the first result", false, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "succeeded", "fx_b")}},
		{"a result nobody produced", false, []op{call(1, 2, "succeeded", "forged")}},
		{"in progress after the result", false, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "succeeded", "fx_a"), call(5, 6, "in_progress", "")}},
		{"in progress overlapping the result", true, []op{effect(1, 2, "k", "fx_a"), call(3, 6, "succeeded", "fx_a"), call(4, 5, "in_progress", "")}},
		{"work in doubt run again", false, []op{call(1, 2, "in_doubt", ""), effect(3, 4, "k", "fx_a")}},
		{"a late effect of the attempt in doubt", true, []op{effect(1, 5, "k", "fx_a"), call(2, 3, "in_doubt", ""), final(6, "in_doubt", "", "")}},
		{"a result after in doubt", false, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "in_doubt", ""), call(5, 6, "succeeded", "fx_a")}},
		{"nothing was done, after it was", false, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "not_sent", "")}},
		{"nothing was done, before it was", true, []op{call(1, 2, "not_sent", ""), effect(3, 4, "k", "fx_a")}},
		{"a plan that moves back", false, []op{plan(1, 2, "committing", ""), plan(3, 4, "approved", "")}},
		{"a plan that changes its end", false, []op{effect(1, 2, "k", "fx_a"), plan(3, 4, "committed", "fx_a"), plan(5, 6, "in_doubt", "")}},
		{"a plan committed with another result", false, []op{effect(1, 2, "k", "fx_a"), plan(3, 4, "committed", "fx_b")}},
		{"a plan committed with nothing done", false, []op{plan(1, 2, "committed", "fx_a")}},
		{"approved work lost", false, []op{plan(1, 2, "approved", ""), final(3, None, "", "approved")}},
		{"a plan committed, its record gone", false, []op{effect(1, 2, "k", "fx_a"), plan(3, 4, "committed", "fx_a"), final(5, None, "", "committed")}},
		{"an effect the record forgot", false, []op{effect(1, 2, "k", "fx_a"), final(3, None, "", "")}},
		{"a record left running", false, []op{final(1, "running", "", "")}},
		{"a record whose result is not the effect's", false, []op{effect(1, 2, "k", "fx_a"), final(3, "succeeded", "fx_b", "")}},
		{"two calls that each say they ran it", false, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "succeeded", "fx_a"), call(5, 6, "succeeded", "fx_a")}},
		{"one ran it, the other is a repeat", true, []op{effect(1, 2, "k", "fx_a"), call(3, 4, "succeeded", "fx_a"), repeat(call(5, 6, "succeeded", "fx_a"))}},
		{"work done that nobody approved", false, []op{plan(1, 2, "awaiting_approval", ""), effect(3, 4, "k", "fx_a"), final(5, "succeeded", "fx_a", "awaiting_approval")}},
		{"work done for a rejected plan", false, []op{effect(1, 2, "k", "fx_a"), final(3, "succeeded", "fx_a", "rejected")}},
		{"a plan in doubt, its record done", false, []op{effect(1, 2, "k", "fx_a"), final(3, "succeeded", "fx_a", "in_doubt")}},
		{"a plan in doubt with its record", true, []op{effect(1, 2, "k", "fx_a"), final(3, "in_doubt", "", "in_doubt")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var h []porcupine.Operation
			for _, o := range c.ops {
				h = append(h, porcupine.Operation{Input: o.in, Call: o.call, Output: o.out, Return: o.ret})
			}
			if got := porcupine.CheckOperations(Model(), h); got != c.ok {
				t.Fatalf("linearizable %v, want %v:\n%s", got, c.ok, Describe(h))
			}
		})
	}
}
