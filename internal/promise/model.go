// Package promise checks airlock's promise over recorded histories
// (docs/hardening.md, "The history checker"): randomized concurrent
// workloads go through every front door with faults injected, every call's
// invocation and answer and every side effect the services saw are
// recorded, and each piece of work's history is checked for
// linearizability (github.com/anishathalye/porcupine) against a model of
// the promise:
//
//  1. a piece of work takes effect at most once (a service that honours
//     keys sees one key for it, and applies it once);
//  2. every answer for it is its first result, or an honest in progress,
//     in doubt or "nothing was done";
//  3. work in doubt is never run again by airlock;
//  4. a plan's status only moves forward, and its record, audit trail and
//     result agree;
//  5. nothing decided or completed is lost: after the run, work that took
//     effect is recorded (or in doubt), and an approved plan has ended.
package promise

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation of a history is.
type Kind string

// The kinds of operation.
const (
	// Effect: a service applied the work (or refused it definitively,
	// which is also its one outcome). Recorded by the service, at the
	// instant it applied it.
	Effect Kind = "effect"
	// Call: a call of the work through a front door, and its answer.
	Call Kind = "call"
	// Final: the work's record and plan, read once the run has quiesced.
	Final Kind = "final"
)

// Input is what an operation asked.
type Input struct {
	Kind Kind
	Work string // the piece of work: tool and natural key (the partition)
	Door string // the front door of a call
	Key  string // an effect's idempotency key as its service saw it
}

// Statuses of an answer, beyond the record's and the plan's own.
const (
	// Lost: the call got no answer (a dropped reply, a timeout).
	Lost = "lost"
	// Refused: an error answer that says nothing ran now (the store was
	// unavailable, a replica was stopping).
	Refused = "refused"
	// NotSent: "nothing was done; retry later".
	NotSent = "not_sent"
	// None: the final read found no record.
	None = "none"
)

// Output is what an operation answered.
type Output struct {
	// Status: an answer's status (succeeded, failed, in_progress,
	// in_doubt, not_sent, lost, refused); a final read's record state
	// (succeeded, failed, in_doubt, running, none).
	Status string
	// Result is the answer's or the record's result, canonical JSON; an
	// effect's result as its service answered it.
	Result string
	// Plan is the plan's status where the answer or the read showed one.
	Plan string
	// Repeat: the answer says it is the first call's, nothing ran now.
	Repeat bool
}

// repeatDoors are the doors whose answers say whether they ran the work
// (a task's result is the same for every call it follows, so its doors
// are not among them).
var repeatDoors = map[string]bool{"library": true, "calls": true, "mcp": true, "mcp-session": true, "claims": true}

// state is one piece of work's state in the model.
type state struct {
	effects  int
	key      string
	result   string
	answered bool // a final answer was given: the record is final
	ran      bool // a final answer said it ran the work (not a repeat)
	inDoubt  bool // an in-doubt answer was given
	plan     string
}

// planRank orders plan statuses: a plan never moves back.
var planRank = map[string]int{
	"": 0, "awaiting_approval": 1, "approved": 2, "committing": 3,
	"committed": 4, "failed": 4, "in_doubt": 4, "rejected": 4, "expired": 4, "withdrawn": 4,
}

// step is the model's step: whether op's output is legal in s, and the
// state after it.
func step(s state, in Input, out Output) (bool, state) {
	if out.Plan != "" {
		r, known := planRank[out.Plan]
		switch {
		case !known || r < planRank[s.plan]:
			return false, s // a plan moved back
		case planRank[s.plan] == 4 && out.Plan != s.plan:
			return false, s // a plan that ended changed its end
		}
		s.plan = out.Plan
	}
	switch in.Kind {
	case Effect:
		if s.effects > 0 || s.inDoubt {
			return false, s // a second effect, or work in doubt run again
		}
		s.effects, s.key, s.result = 1, in.Key, out.Result
		return true, s
	case Call:
		switch out.Status {
		case Lost, Refused:
			return true, s
		case "planned":
			switch out.Plan {
			case "committed", "failed": // carried out: its result is the effect's
				if s.effects != 1 || s.result != out.Result || s.inDoubt {
					return false, s
				}
				s.answered = true
			case "in_doubt":
				if s.answered {
					return false, s
				}
				s.inDoubt = true
			}
			return true, s
		case "succeeded", "failed":
			if s.effects != 1 || s.result != out.Result || s.inDoubt {
				return false, s // not the first result
			}
			if repeatDoors[in.Door] && !out.Repeat {
				if s.ran {
					return false, s // two calls each said they ran it
				}
				s.ran = true
			}
			s.answered = true
			return true, s
		case "in_progress":
			// (Honest while the record is not final: in progress, then
			// "nothing was done" and no record, is work whose request
			// never left, released for the next call.)
			return !s.answered && !s.inDoubt, s
		case "in_doubt":
			if s.answered {
				return false, s
			}
			s.inDoubt = true
			return true, s
		case NotSent:
			return s.effects == 0 && !s.answered && !s.inDoubt, s
		}
		return false, s
	case Final:
		switch out.Plan {
		case "approved", "committing":
			return false, s // decided work was lost: approved, never ended
		case "committed", "failed", "in_doubt":
			if out.Status != out.Plan && (out.Plan != "committed" || out.Status != "succeeded") {
				return false, s // the plan and its record disagree
			}
		case "awaiting_approval", "rejected", "expired", "withdrawn":
			if s.effects > 0 {
				return false, s // work done that nobody approved
			}
		}
		switch out.Status {
		case "succeeded", "failed":
			return s.effects == 1 && s.result == out.Result && !s.inDoubt, s
		case "in_doubt":
			return !s.answered, s
		case None:
			return s.effects == 0 && !s.answered && !s.inDoubt, s
		}
		return false, s // still running after the run quiesced, or unknown
	}
	return false, s
}

// Model is the promise as porcupine checks it, partitioned by work.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var works []string
			for _, op := range h {
				w := op.Input.(Input).Work
				if _, ok := by[w]; !ok {
					works = append(works, w)
				}
				by[w] = append(by[w], op)
			}
			sort.Strings(works)
			out := make([][]porcupine.Operation, 0, len(works))
			for _, w := range works {
				out = append(out, by[w])
			}
			return out
		},
		Init: func() any { return state{} },
		Step: func(s, in, out any) (bool, any) {
			return step(s.(state), in.(Input), out.(Output))
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(Input), out.(Output)
			switch i.Kind {
			case Effect:
				return fmt.Sprintf("effect(key %.8s) -> %s", i.Key, o.Result)
			case Final:
				return fmt.Sprintf("final -> record %s %s, plan %q", o.Status, o.Result, o.Plan)
			}
			return fmt.Sprintf("%s -> %s %s%s", i.Door, o.Status, o.Result, planSuffix(o.Plan))
		},
		DescribeState: func(s any) string {
			st := s.(state)
			return fmt.Sprintf("effects %d %s answered %v in_doubt %v plan %q", st.effects, st.result, st.answered, st.inDoubt, st.plan)
		},
	}
}

func planSuffix(p string) string {
	if p == "" {
		return ""
	}
	return " plan " + p
}

// Describe writes a partition's operations in the order they were called,
// for a failure's report.
func Describe(ops []porcupine.Operation) string {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	m := Model()
	var b strings.Builder
	for _, op := range sorted {
		fmt.Fprintf(&b, "  [%d, %d] %s\n", op.Call, op.Return, m.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
