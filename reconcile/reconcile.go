// Package reconcile settles in-doubt work by asking the system of record
// (docs/concepts.md, "The guarded call"): a side-effecting tool names a read tool (reconcile_with)
// and, in its reconcile block, CEL conditions over that tool's answer that
// say whether the work happened (happened_when, not_happened_when). The
// guard's reaper calls Reconcile for every in-doubt record of such a tool
// and settles it with actor "reconcile"; the approvers' page uses Ask to
// show the read tool's answer beside a record a person must settle.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/policy"
	"github.com/airlockhq/airlock/upstream"
)

// Callers finds the upstream of a tool.
type Callers func(tool *airlock.Tool) (upstream.Caller, bool)

// Config configures a Reconciler.
type Config struct {
	Catalog *airlock.Catalog // required, prepared (the manifest's tools)
	Callers Callers          // required
}

// Reconciler implements airlock.Reconciler.
type Reconciler struct {
	m       *airlock.Catalog
	callers Callers
	rules   map[string]*policy.Reconciler // by side-effecting tool
}

var _ airlock.Reconciler = (*Reconciler)(nil)

// New compiles every tool's reconcile conditions.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Catalog == nil || cfg.Callers == nil {
		return nil, errors.New("reconcile: Catalog and Callers are required")
	}
	rules, problems := policy.CompileAllReconcile(cfg.Catalog)
	if len(problems) > 0 {
		return nil, &airlock.ValidationError{Problems: problems}
	}
	return &Reconciler{m: cfg.Catalog, callers: cfg.Callers, rules: rules}, nil
}

// Any reports whether some tool's in-doubt records are settled automatically.
func (r *Reconciler) Any() bool { return len(r.rules) > 0 }

// Automatic implements airlock.Reconciler: the tool names reconcile_with
// and conditions that read its answer.
func (r *Reconciler) Automatic(tool string) bool {
	t := r.m.Tool(tool)
	return t != nil && t.ReconcileWith != "" && r.rules[tool] != nil
}

// Reconcile implements airlock.Reconciler: it asks the read tool and
// evaluates the tool's conditions over the answer.
func (r *Reconciler) Reconcile(ctx context.Context, rec *airlock.Record) (*airlock.Reconciliation, error) {
	found, err := r.Ask(ctx, rec)
	if err != nil {
		return nil, err
	}
	rules := r.rules[rec.Tool]
	if rules == nil {
		return found, nil // a person reads the answer
	}
	var result any
	if err := json.Unmarshal(found.Answer, &result); err != nil {
		return nil, fmt.Errorf("%s answered something that is not JSON: %w", found.Tool, err)
	}
	args, _ := airlock.ParseArgs(rec.Args)
	verdict, err := rules.Verdict(result, args)
	if err != nil {
		return nil, fmt.Errorf("reading %s's answer: %w", found.Tool, err)
	}
	found.Verdict = airlock.Verdict(verdict)
	return found, nil
}

// Ask calls the record's tool's reconcile_with read tool with the record's
// arguments that the read tool takes (its input schema's properties), and
// returns its answer with VerdictUnknown.
func (r *Reconciler) Ask(ctx context.Context, rec *airlock.Record) (*airlock.Reconciliation, error) {
	t := r.m.Tool(rec.Tool)
	if t == nil {
		return nil, fmt.Errorf("tool %s is no longer in the manifest", rec.Tool)
	}
	if t.ReconcileWith == "" {
		return nil, fmt.Errorf("tool %s has no reconcile_with", t.Name)
	}
	rt := r.m.Tool(t.ReconcileWith)
	if rt == nil {
		return nil, fmt.Errorf("no tool %s", t.ReconcileWith)
	}
	c, ok := r.callers(rt)
	if !ok {
		return nil, fmt.Errorf("%s has no upstream", rt.Name)
	}
	args, err := airlock.ParseArgs(rec.Args)
	if err != nil {
		return nil, err
	}
	if props, ok := rt.InputSchema["properties"].(map[string]any); ok {
		for k := range args {
			if _, known := props[k]; !known {
				delete(args, k)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, rt.TimeoutOr())
	defer cancel()
	out := c.Call(ctx, &upstream.Request{Tool: rt, Args: airlock.CanonicalArgs(args)})
	if out.Kind != airlock.OutcomeSucceeded {
		if out.Err != nil {
			return nil, fmt.Errorf("%s: %w", rt.Name, out.Err)
		}
		return nil, fmt.Errorf("%s answered: %s", rt.Name, out.Result)
	}
	return &airlock.Reconciliation{Verdict: airlock.VerdictUnknown, Tool: rt.Name, Answer: out.Result}, nil
}
