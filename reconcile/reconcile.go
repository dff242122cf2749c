// Package reconcile settles in-doubt work by asking the system of record
// (docs/concepts.md, "The guarded call"): a side-effecting tool names a read tool (reconcile_with)
// and, in its reconcile block, CEL conditions over that tool's answer that
// say whether the work happened (happened_when, not_happened_when). The
// guard's reaper calls Reconcile for every in-doubt record of a tool that
// names reconcile_with, and settles it with actor "reconcile" when the
// conditions say; the approvers' page shows the last answer (Last) beside
// a record a person must settle, and never calls the read tool itself.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/jonboulle/clockwork"

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
	// Clock times the answers kept (Last). Default: the system clock.
	Clock clockwork.Clock
}

// Reconciler implements airlock.Reconciler.
type Reconciler struct {
	m       *airlock.Catalog
	callers Callers
	rules   map[string]*policy.Reconciler // by side-effecting tool
	clock   clockwork.Clock

	mu   sync.Mutex
	last map[string]Observation // by record key
}

// Observation is the last answer about an in-doubt record: what the read
// tool said, or why it could not be asked, and when.
type Observation struct {
	Found *airlock.Reconciliation // nil when Err
	Err   string
	At    time.Time
}

// maxObservations bounds the answers kept; past it, those older than an
// hour are dropped (a record settled since is no longer asked about).
const maxObservations = 10_000

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
	cfg.Clock = clocks.Or(cfg.Clock)
	return &Reconciler{m: cfg.Catalog, callers: cfg.Callers, rules: rules, clock: cfg.Clock, last: map[string]Observation{}}, nil
}

// Any reports whether some tool's in-doubt records are asked about.
func (r *Reconciler) Any() bool {
	for _, t := range r.m.Tools {
		if t.ReconcileWith != "" {
			return true
		}
	}
	return false
}

// Asks implements airlock.Reconciler: the tool names reconcile_with.
func (r *Reconciler) Asks(tool string) bool {
	t := r.m.Tool(tool)
	return t != nil && t.ReconcileWith != ""
}

// Last is the last answer about the record with key, when this process
// asked about it.
func (r *Reconciler) Last(key string) (Observation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.last[key]
	return o, ok
}

func (r *Reconciler) remember(key string, found *airlock.Reconciliation, err error) {
	o := Observation{Found: found, At: r.clock.Now()}
	if err != nil {
		o.Found, o.Err = nil, err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.last) >= maxObservations {
		for k, old := range r.last {
			if o.At.Sub(old.At) > time.Hour {
				delete(r.last, k)
			}
		}
	}
	r.last[key] = o
}

// Automatic implements airlock.Reconciler: the tool names reconcile_with
// and conditions that read its answer.
func (r *Reconciler) Automatic(tool string) bool {
	t := r.m.Tool(tool)
	return t != nil && t.ReconcileWith != "" && r.rules[tool] != nil
}

// Reconcile implements airlock.Reconciler: it asks the read tool and
// evaluates the tool's conditions over the answer.
func (r *Reconciler) Reconcile(ctx context.Context, rec *airlock.Record) (found *airlock.Reconciliation, err error) {
	defer func() { r.remember(rec.Key, found, err) }()
	found, err = r.Ask(ctx, rec)
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
