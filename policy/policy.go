// Package policy decides how an irreversible tool's plan is approved: the
// tool's rules are CEL expressions (cel.dev/cel-go) over the plan's
// arguments, the facts looked up in the system of record, the tool's name
// and the run; the first rule that holds decides "auto" or "human". Rules
// are type-checked when the manifest loads, and their test files (cases of
// args + facts → rule and decision) run with `airlock policy test`.
package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/airlockhq/airlock"
)

// Decisions.
const (
	Auto  = "auto"
	Human = "human"
)

// Input is what a rule reads.
type Input struct {
	Args  map[string]any `json:"args"`
	Facts map[string]any `json:"facts"`
	Tool  string         `json:"tool"`
	Run   string         `json:"run"`
}

// RuleResult is how one rule evaluated, for approvers.
type RuleResult struct {
	Name    string `json:"name"`
	When    string `json:"when"`
	Matched bool   `json:"matched"`
	Error   string `json:"error,omitempty"`
}

// Decision is the outcome: the rule that decided, the decision, and every
// rule evaluated up to it.
type Decision struct {
	Rule      string       `json:"rule"`
	Decision  string       `json:"decision"`
	Evaluated []RuleResult `json:"evaluated"`
	// Approvals is how many distinct people must approve when Decision is
	// human: the rule's approvals; when no rule decided (a rule failed,
	// none matched, the facts could not be looked up), the most any of the
	// tool's rules asks for. 0 for auto.
	Approvals int `json:"approvals,omitempty"`
}

type rule struct {
	airlock.Rule
	prg cel.Program
}

// Policy is a tool's compiled rules.
type Policy struct {
	Tool  string
	rules []rule
}

var env = mustEnv()

func mustEnv() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("facts", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.StringType),
		cel.Variable("run", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic(err)
	}
	return e
}

// CompileError is a rule that does not compile; Path is its place in the
// manifest (tools[i].approval.rules[j].when).
type CompileError struct {
	Tool, Rule, Path, Message string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("tool %s: rule %q does not compile: %s", e.Tool, e.Rule, e.Message)
}

// Compile type-checks and compiles a tool's rules. Every rule that does not
// compile is reported.
func Compile(t *airlock.Tool, toolIndex int) (*Policy, []*CompileError) {
	p := &Policy{Tool: t.Name}
	if t.Approval == nil {
		return p, nil
	}
	var errs []*CompileError
	for j, r := range t.Approval.Rules {
		path := fmt.Sprintf("tools[%d].approval.rules[%d].when", toolIndex, j)
		ast, iss := env.Compile(r.When)
		if iss != nil && iss.Err() != nil {
			errs = append(errs, &CompileError{Tool: t.Name, Rule: r.Name, Path: path, Message: oneLine(iss.Err().Error())})
			continue
		}
		if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			errs = append(errs, &CompileError{Tool: t.Name, Rule: r.Name, Path: path, Message: fmt.Sprintf("the condition is %s, want a bool", out)})
			continue
		}
		prg, err := env.Program(ast)
		if err != nil {
			errs = append(errs, &CompileError{Tool: t.Name, Rule: r.Name, Path: path, Message: oneLine(err.Error())})
			continue
		}
		p.rules = append(p.rules, rule{Rule: r, prg: prg})
	}
	return p, errs
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}

// Decide evaluates the rules in order; the first that holds decides. A rule
// that fails to evaluate (a missing fact, a wrong type) never approves: the
// plan goes to a person, naming that rule. No rule holding also means a person.
func (p *Policy) Decide(in Input) Decision {
	vars := map[string]any{
		"args": plain(in.Args), "facts": plain(in.Facts), "tool": in.Tool, "run": in.Run,
	}
	var d Decision
	for _, r := range p.rules {
		res := RuleResult{Name: r.Name, When: r.When}
		out, _, err := r.prg.Eval(vars)
		if err != nil {
			res.Error = err.Error()
			d.Evaluated = append(d.Evaluated, res)
			d.Rule, d.Decision, d.Approvals = r.Name, Human, p.MostApprovals()
			return d
		}
		b, ok := out.Value().(bool)
		if !ok {
			res.Error = fmt.Sprintf("the condition gave %v, not true or false", out.Value())
			d.Evaluated = append(d.Evaluated, res)
			d.Rule, d.Decision, d.Approvals = r.Name, Human, p.MostApprovals()
			return d
		}
		res.Matched = b
		d.Evaluated = append(d.Evaluated, res)
		if b {
			d.Rule, d.Decision = r.Name, r.Decide
			if r.Decide == Human {
				d.Approvals = max(1, r.Approvals)
			}
			return d
		}
	}
	d.Rule, d.Decision, d.Approvals = "", Human, p.MostApprovals()
	return d
}

// MostApprovals is the most approvals any of the rules asks for, at least
// 1: what a plan no rule decided needs.
func (p *Policy) MostApprovals() int {
	n := 1
	for _, r := range p.rules {
		if r.Decide == Human {
			n = max(n, r.Approvals)
		}
	}
	return n
}

// plain turns decoded JSON into CEL-friendly values: whole numbers become
// int64 (money is in integer minor units), other numbers float64.
func plain(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case int:
		return int64(x)
	}
	return v
}

// LookupArgs evaluates the lookup's argument mapping: each value is a CEL
// expression over args, tool and run (such as "args.record_id").
func LookupArgs(mapping map[string]string, args map[string]any, tool string) (map[string]any, error) {
	out := make(map[string]any, len(mapping))
	vars := map[string]any{"args": plain(args), "facts": map[string]any{}, "tool": tool, "run": ""}
	for name, expr := range mapping {
		ast, iss := env.Compile(expr)
		if iss != nil && iss.Err() != nil {
			return nil, fmt.Errorf("lookup argument %s: %s", name, oneLine(iss.Err().Error()))
		}
		prg, err := env.Program(ast)
		if err != nil {
			return nil, fmt.Errorf("lookup argument %s: %w", name, err)
		}
		v, _, err := prg.Eval(vars)
		if err != nil {
			return nil, fmt.Errorf("lookup argument %s: %w", name, err)
		}
		native, err := v.ConvertToNative(reflectAny)
		if err != nil {
			return nil, fmt.Errorf("lookup argument %s: %w", name, err)
		}
		out[name] = native
	}
	return out, nil
}
