package policy

import (
	"fmt"

	"cel.dev/cel-go/cel"

	"github.com/airlockhq/airlock"
)

// Reconciliation conditions (a tool's reconcile: happened_when and
// not_happened_when) are CEL over the reconcile_with tool's answer
// (result), the in-doubt call's arguments (args) and the tool's name.
var reconcileEnv = mustReconcileEnv()

func mustReconcileEnv() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("result", cel.DynType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic(err)
	}
	return e
}

// Verdicts of a reconciliation.
const (
	Happened    = "happened"
	NotHappened = "not_happened"
	Unknown     = "unknown"
)

// Reconciler is a tool's compiled reconciliation conditions.
type Reconciler struct {
	Tool                  string
	happened, notHappened cel.Program
}

// CompileReconcile type-checks and compiles a tool's reconcile conditions;
// nil without them. Problems carry the condition's place in the manifest.
func CompileReconcile(t *airlock.Tool, toolIndex int) (*Reconciler, []airlock.Problem) {
	if t.Reconcile == nil {
		return nil, nil
	}
	r := &Reconciler{Tool: t.Name}
	var problems []airlock.Problem
	compile := func(field, expr string) cel.Program {
		path := fmt.Sprintf("tools[%d].reconcile.%s", toolIndex, field)
		ast, iss := reconcileEnv.Compile(expr)
		if iss != nil && iss.Err() != nil {
			problems = append(problems, airlock.Problem{Path: path, Message: fmt.Sprintf("tool %s: %s does not compile: %s", t.Name, field, oneLine(iss.Err().Error()))})
			return nil
		}
		if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			problems = append(problems, airlock.Problem{Path: path, Message: fmt.Sprintf("tool %s: %s is %s, want a bool", t.Name, field, out)})
			return nil
		}
		prg, err := reconcileEnv.Program(ast)
		if err != nil {
			problems = append(problems, airlock.Problem{Path: path, Message: fmt.Sprintf("tool %s: %s: %s", t.Name, field, oneLine(err.Error()))})
			return nil
		}
		return prg
	}
	if t.Reconcile.HappenedWhen != "" {
		r.happened = compile("happened_when", t.Reconcile.HappenedWhen)
	}
	if t.Reconcile.NotHappenedWhen != "" {
		r.notHappened = compile("not_happened_when", t.Reconcile.NotHappenedWhen)
	}
	return r, problems
}

// CompileAllReconcile compiles every tool's reconcile conditions, by tool name.
func CompileAllReconcile(m *airlock.Catalog) (map[string]*Reconciler, []airlock.Problem) {
	out := map[string]*Reconciler{}
	var problems []airlock.Problem
	for i, t := range m.Tools {
		if t == nil {
			continue
		}
		r, ps := CompileReconcile(t, i)
		problems = append(problems, ps...)
		if r != nil && len(ps) == 0 {
			out[t.Name] = r
		}
	}
	return out, problems
}

// Verdict evaluates the conditions over the read tool's answer: Happened
// when happened_when holds, NotHappened when not_happened_when holds,
// Unknown when neither does. A condition that fails to evaluate (a missing
// field, a wrong type) is an error, and the record stays in doubt: only an
// answer that says so settles it.
func (r *Reconciler) Verdict(result any, args map[string]any) (string, error) {
	if args == nil {
		args = map[string]any{}
	}
	vars := map[string]any{"result": result, "args": args, "tool": r.Tool}
	holds := func(prg cel.Program, field string) (bool, error) {
		if prg == nil {
			return false, nil
		}
		out, _, err := prg.Eval(vars)
		if err != nil {
			return false, fmt.Errorf("%s: %w", field, err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			return false, fmt.Errorf("%s gave %v, not true or false", field, out.Value())
		}
		return b, nil
	}
	happened, err := holds(r.happened, "happened_when")
	if err != nil {
		return Unknown, err
	}
	notHappened, err := holds(r.notHappened, "not_happened_when")
	if err != nil {
		return Unknown, err
	}
	switch {
	case happened && notHappened:
		return Unknown, fmt.Errorf("both happened_when and not_happened_when hold; the answer settles nothing")
	case happened:
		return Happened, nil
	case notHappened:
		return NotHappened, nil
	}
	return Unknown, nil
}
