// Package plan is plan → approve → commit for irreversible tools
// (docs/plans.md): an agent only proposes (Propose); facts come from the
// system of record through the tool's lookup; the policy decides automatic
// or human approval; a person decides with Decide; the commit runs on a
// durable queue (package plan/riverqueue) through the guarded call with the
// tool's key, so a retried job never executes twice.
package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/maintenance"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/policy"
	"github.com/airlockhq/airlock/upstream"
)

// Caller finds the upstream of a tool (lookups and commits).
type Caller func(tool *airlock.Tool) (upstream.Caller, bool)

// Committer runs a commit through the guarded call, or claims its work for
// a worker in the caller's process (caller.go); *guard.Guard is one.
type Committer interface {
	DoKeyed(ctx context.Context, kc *airlock.KeyedCall, fn airlock.SideEffect) (*airlock.Answer, error)
	ClaimKeyed(ctx context.Context, kc *airlock.KeyedCall, holder guard.Holder) (*guard.Held, *airlock.Answer, error)
	Finish(ctx context.Context, tool *airlock.Tool, c guard.Claimed, out airlock.Outcome) (*airlock.Answer, error)
	Renew(ctx context.Context, c guard.Claimed) (time.Time, error)
	Get(ctx context.Context, key string) (*airlock.Record, error)
}

// Observer is told what happens to plans, whatever front end caused it;
// package metrics implements it.
type Observer interface {
	// Planned reports a new plan and its rule's decision (auto or human).
	Planned(tool, decision string)
	// Decided reports a person's decision and how long the plan waited.
	Decided(tool string, approved bool, waited time.Duration)
	// Expired reports a plan nobody decided in time, after its wait.
	Expired(tool string, waited time.Duration)
}

// Config configures a Service.
type Config struct {
	Manifest *manifest.Manifest // required, prepared
	Store    airlock.PlanStore  // required; it enqueues commits of approved plans
	Guard    Committer          // required: commits go through it
	Callers  Caller             // required
	// Observer is told of new plans, decisions and expiries. Default: none.
	Observer Observer
	// Clock is the plans' time source: proposals, decisions, expiry and
	// the Expirer's passes. Default: the system clock.
	Clock clockwork.Clock
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Tracer makes the propose, decide and commit spans and passes the
	// trace on to the lookup and commit upstreams. Default: none.
	Tracer airlock.Tracer
	// MaxRunIDBytes caps a plan's run id. Default airlock.DefaultMaxRunIDBytes.
	MaxRunIDBytes int
	// NotifySecret signs webhook notices (HeaderSignature). Default: none
	// (unsigned).
	NotifySecret []byte
}

// Service runs plans.
type Service struct {
	webhook  *http.Client
	cfg      Config
	policies map[string]*policy.Policy
	clock    clockwork.Clock
	log      *slog.Logger
}

// New compiles the rules and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Manifest == nil || cfg.Store == nil || cfg.Guard == nil || cfg.Callers == nil {
		return nil, errors.New("plan: Manifest, Store, Guard and Callers are required")
	}
	policies, problems := policy.CompileAll(&cfg.Manifest.Catalog)
	if len(problems) > 0 {
		return nil, &airlock.ValidationError{Problems: problems}
	}
	s := &Service{cfg: cfg, policies: policies, clock: cfg.Clock, log: cfg.Logger, webhook: &http.Client{}}
	s.clock = clocks.Or(s.clock)
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Propose makes the plan for a call of an irreversible tool, or returns the
// existing plan for the same key (repeat true). Facts come from the tool's
// lookup; a lookup that fails leaves the plan to a person.
func (s *Service) Propose(ctx context.Context, tool *airlock.Tool, args *airlock.Args, runID string) (p *airlock.Plan, repeat bool, err error) {
	if err := airlock.CheckRunID(runID, s.cfg.MaxRunIDBytes); err != nil {
		return nil, false, err
	}
	if t := s.cfg.Tracer; t != nil {
		var span airlock.Span
		name := ""
		if tool != nil {
			name = tool.Name
		}
		ctx, span = t.Start(ctx, airlock.SpanPlanPropose, airlock.Attr{Key: airlock.AttrToolName, Value: name}, airlock.Attr{Key: airlock.AttrRunID, Value: runID})
		defer func() {
			if p != nil {
				span.Set(planAttrs(p)...)
				span.Set(airlock.Attr{Key: airlock.AttrRepeat, Value: repeat})
			}
			span.End(err)
		}()
	}
	return s.propose(ctx, tool, args, runID)
}

// planAttrs are a plan's span attributes: never its arguments or facts.
func planAttrs(p *airlock.Plan) []airlock.Attr {
	return []airlock.Attr{{Key: airlock.AttrPlanID, Value: p.ID}, {Key: airlock.AttrPlanStatus, Value: string(p.Status)},
		{Key: airlock.AttrPlanDecision, Value: p.Decision}, {Key: airlock.AttrPlanRule, Value: p.Rule}, {Key: airlock.AttrKey, Value: p.Key}}
}

// traceOf is the trace context to pass to an upstream.
func (s *Service) traceOf(ctx context.Context) (string, string) {
	if s.cfg.Tracer == nil {
		return "", ""
	}
	return s.cfg.Tracer.Parent(ctx)
}

func (s *Service) propose(ctx context.Context, tool *airlock.Tool, args *airlock.Args, runID string) (*airlock.Plan, bool, error) {
	if tool == nil || tool.Kind != airlock.KindIrreversible || tool.Approval == nil {
		return nil, false, airlock.FieldErrorf(airlock.CodeNotCallable, "tool", "only irreversible tools are planned")
	}
	now := s.clock.Now()
	d, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &s.cfg.Manifest.Calendar, Args: args.Value(), At: now, RunID: runID})
	if err != nil {
		return nil, false, err
	}
	// A repeat (or a repeat just after a window boundary, from the same
	// run) gets the plan as it is now, without a new lookup.
	for _, key := range []string{d.Key, d.Previous} {
		if key == "" {
			continue
		}
		if p, err := s.cfg.Store.GetPlanByKey(ctx, key); err == nil && (key == d.Key || p.RunID == runID) {
			return p, true, nil
		}
	}
	canon := args.JSON()
	facts, factsErr := s.lookup(ctx, tool, args.Value())
	in := policy.Input{Args: args.Value(), Tool: tool.Name, Run: runID}
	var decision policy.Decision
	if factsErr != nil {
		decision = policy.Decision{Rule: "", Decision: policy.Human, Approvals: s.policies[tool.Name].MostApprovals()}
	} else {
		var fm map[string]any
		if len(facts) > 0 {
			fm, _ = airlock.ParseArgs(facts)
		}
		in.Facts = fm
		decision = s.policies[tool.Name].Decide(in)
	}
	eval, _ := json.Marshal(decision.Evaluated)
	expires := tool.Approval.ExpiresAfterOr()
	p := &airlock.Plan{
		ID: airlock.NewPlanID(), Key: d.Key, Tool: tool.Name, Rule: decision.Rule, Decision: decision.Decision,
		Evaluation: eval, Args: canon, Facts: facts, DecisionHash: airlock.DecisionHash(tool.Name, canon, facts),
		RunID: runID, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(expires), Status: airlock.PlanAwaitingApproval,
		ProposedBy: airlock.ActorFrom(ctx), ApprovalsRequired: max(1, decision.Approvals),
	}
	if factsErr != nil {
		p.FactsError = factsErr.Error()
	}
	if decision.Decision == policy.Auto {
		p.Status, p.DecidedBy, p.DecidedAt, p.DecisionReason = airlock.PlanApproved, "system", now, "rule "+decision.Rule
	}
	stored, created, err := s.cfg.Store.CreatePlan(ctx, p)
	if err != nil {
		return nil, false, fmt.Errorf("%w: storing the plan: %w", airlock.ErrStoreUnavailable, err)
	}
	if created && s.cfg.Observer != nil {
		s.cfg.Observer.Planned(stored.Tool, stored.Decision)
	}
	return stored, !created, nil
}

// lookup calls the approval's lookup tool; its result is the facts.
func (s *Service) lookup(ctx context.Context, tool *airlock.Tool, args map[string]any) (json.RawMessage, error) {
	l := tool.Approval.Lookup
	if l == nil {
		return nil, nil
	}
	rt := s.cfg.Manifest.Tool(l.Tool)
	if rt == nil {
		return nil, fmt.Errorf("lookup tool %s is not in the manifest", l.Tool)
	}
	largs, err := policy.LookupArgs(l.Args, args, tool.Name)
	if err != nil {
		return nil, err
	}
	c, ok := s.cfg.Callers(rt)
	if !ok {
		return nil, fmt.Errorf("lookup tool %s has no upstream", l.Tool)
	}
	ctx, cancel := context.WithTimeout(ctx, rt.TimeoutOr())
	defer cancel()
	b, _ := json.Marshal(largs)
	tp, ts := s.traceOf(ctx)
	out := c.Call(ctx, &upstream.Request{Tool: rt, Args: b, TraceParent: tp, TraceState: ts})
	if out.Kind != airlock.OutcomeSucceeded {
		if out.Err != nil {
			return nil, fmt.Errorf("lookup %s: %w", l.Tool, out.Err)
		}
		return nil, fmt.Errorf("lookup %s failed: %s", l.Tool, out.Result)
	}
	if _, err := airlock.ParseArgs(out.Result); err != nil {
		return nil, fmt.Errorf("lookup %s did not return a JSON object", l.Tool)
	}
	return out.Result, nil
}

// Decide records a person's decision, whatever the front end (the HTTP
// API, the page, the CLI): it is the one place where a decision is checked
// (the decider's role, a reason, the decision hash the person saw, the
// plan still awaiting and not past its expiry), audited with the decider's
// name, its commit enqueued when approved, and the plan's wait observed.
// d.Now is set here, from the service's clock.
func (s *Service) Decide(ctx context.Context, d airlock.PlanDecision) (p *airlock.Plan, err error) {
	if t := s.cfg.Tracer; t != nil {
		var span airlock.Span
		ctx, span = t.Start(ctx, airlock.SpanPlanDecide, airlock.Attr{Key: airlock.AttrPlanID, Value: d.ID},
			airlock.Attr{Key: airlock.AttrDecidedBy, Value: d.By}, airlock.Attr{Key: "airlock.plan.approve", Value: d.Approve})
		defer func() {
			if p != nil {
				span.Set(planAttrs(p)...)
			}
			span.End(err)
		}()
	}
	return s.decide(ctx, d)
}

func (s *Service) decide(ctx context.Context, d airlock.PlanDecision) (*airlock.Plan, error) {
	if d.ID == "" {
		return nil, airlock.FieldErrorf(airlock.CodeInvalidArgument, "plan_id", "required: the id of the plan to decide")
	}
	d.Reason = strings.TrimSpace(d.Reason)
	if err := airlock.CheckNote("reason", d.Reason); err != nil {
		return nil, err
	}
	// The tool's rule of who decides (approvers, separation of duties) is
	// checked with the rest inside the store's transaction.
	cur, err := s.cfg.Store.GetPlan(ctx, d.ID)
	if err != nil {
		if errors.Is(err, airlock.ErrNotFound) {
			return nil, airlock.FieldErrorf(airlock.CodeNotFound, "id", "no plan with id %s", d.ID)
		}
		return nil, err
	}
	if tool := s.cfg.Manifest.Tool(cur.Tool); tool != nil {
		d.Policy = tool.Approval.DecisionPolicy()
	}
	// Stored times keep microseconds; a decision made now is recognised by
	// its time below.
	d.Now = s.clock.Now().UTC().Truncate(time.Microsecond)
	if d.Approve {
		if err := s.factsStillHold(ctx, cur, &d); err != nil {
			return nil, err
		}
	}
	p, err := s.cfg.Store.DecidePlan(ctx, &d)
	if err != nil {
		return nil, err
	}
	if s.cfg.Observer != nil && p.DecidedAt.Equal(d.Now) && p.DecidedBy == d.By {
		s.cfg.Observer.Decided(p.Tool, d.Approve, p.DecidedAt.Sub(p.CreatedAt))
	}
	return p, nil
}

// factsStillHold looks the facts up again before an approval: the
// decision hash binds the facts taken at proposal, and the system of record
// may have changed since (the withdrawal was executed elsewhere, the amount
// was raised). An approval that would be refused anyway (role, reason,
// hash, status) is left to the store to refuse; a plan made without facts
// (the lookup failed then) is approved as the person saw it.
func (s *Service) factsStillHold(ctx context.Context, p *airlock.Plan, d *airlock.PlanDecision) error {
	if next, problem := airlock.CheckDecision(p, d); problem != nil || next != airlock.PlanApproved {
		return nil
	}
	tool := s.cfg.Manifest.Tool(p.Tool)
	if tool == nil || tool.Approval == nil || tool.Approval.Lookup == nil || p.FactsError != "" {
		return nil
	}
	args, err := airlock.ParseArgs(p.Args)
	if err != nil {
		return err
	}
	facts, err := s.lookup(ctx, tool, args)
	if err != nil {
		return &airlock.Error{Code: airlock.CodeUpstream, Err: err, Message: fmt.Sprintf(
			"the facts could not be looked up again to approve plan %s (%v); nothing was decided: try again", p.ID, err)}
	}
	if airlock.DecisionHash(tool.Name, p.Args, facts) == p.DecisionHash {
		return nil
	}
	return airlock.FieldErrorf(airlock.CodeConflict, "facts",
		"the facts changed since plan %s was made (%s); it was not approved: reject it, and the agent may propose the work again", p.ID, factsChanged(p.Facts, facts))
}

// factsChanged names the top-level facts that differ, with their old and
// new values ("executions: 0 → 1"), at most five.
func factsChanged(before, after json.RawMessage) string {
	old, _ := airlock.ParseArgs(before)
	cur, _ := airlock.ParseArgs(after)
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	short := func(v any, ok bool) string {
		if !ok {
			return "(none)"
		}
		b, _ := json.Marshal(v)
		if len(b) > 40 {
			return string(b[:37]) + "..."
		}
		return string(b)
	}
	var out []string
	for _, k := range names {
		o, hadOld := old[k]
		n, hasNew := cur[k]
		a, b := short(o, hadOld), short(n, hasNew)
		if a != b {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, a, b))
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	if len(out) == 0 {
		return "their form changed"
	}
	return strings.Join(out, ", ")
}

// Get returns a plan.
func (s *Service) Get(ctx context.Context, id string) (*airlock.Plan, error) {
	p, err := s.cfg.Store.GetPlan(ctx, id)
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, airlock.FieldErrorf(airlock.CodeNotFound, "plan_id", "no plan with id %q", id)
	}
	return p, err
}

// List lists plans.
func (s *Service) List(ctx context.Context, f airlock.PlanFilter) ([]*airlock.Plan, error) {
	return s.cfg.Store.ListPlans(ctx, f)
}

// Expire moves plans nobody decided in time to expired (each audited by
// the store) and reports them to the observer.
func (s *Service) Expire(ctx context.Context) (int, error) {
	expired, err := s.cfg.Store.ExpirePlans(ctx, s.clock.Now())
	if err != nil {
		return 0, err
	}
	if s.cfg.Observer != nil {
		for _, p := range expired {
			s.cfg.Observer.Expired(p.Tool, p.UpdatedAt.Sub(p.CreatedAt))
		}
	}
	return len(expired), nil
}

// Expirer is the service that expires undecided plans every interval (a
// pass at start, then one per interval, until stopped).
func (s *Service) Expirer(every time.Duration) *maintenance.Service {
	return maintenance.New(func(ctx context.Context) {
		if _, err := s.Expire(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("airlock: expiring plans", "err", err)
		}
	}, maintenance.Config{Interval: every, RunAtStart: true, Clock: s.clock})
}

// Waiting counts the plans awaiting a person per tool, with the oldest
// one's age at now; every irreversible tool is listed, zero when none waits.
func (s *Service) Waiting(ctx context.Context) ([]airlock.WaitingPlans, error) {
	return WaitingByTool(ctx, s.cfg.Store, s.cfg.Manifest)
}

// WaitingByTool is Service.Waiting for a store without a service (the report).
func WaitingByTool(ctx context.Context, st interface {
	WaitingPlans(context.Context) ([]airlock.WaitingPlans, error)
}, m *manifest.Manifest) ([]airlock.WaitingPlans, error) {
	got, err := st.WaitingPlans(ctx)
	if err != nil {
		return nil, err
	}
	byTool := map[string]airlock.WaitingPlans{}
	for _, w := range got {
		byTool[w.Tool] = w
	}
	var out []airlock.WaitingPlans
	for _, t := range m.Tools {
		if t.Kind == airlock.KindIrreversible {
			w := byTool[t.Name]
			w.Tool = t.Name
			out = append(out, w)
			delete(byTool, t.Name)
		}
	}
	for _, w := range got { // tools no longer in the manifest still wait
		if _, left := byTool[w.Tool]; left {
			out = append(out, w)
		}
	}
	return out, nil
}

// ErrRetry asks the queue to run the commit again later: another worker
// holds the key (a rescued job while the first still runs).
var ErrRetry = errors.New("plan: the commit is still running elsewhere; retry later")

// Commit runs an approved plan's tool through the guarded call with the
// plan's key; the result lands on the plan. Running it again (a retried or
// rescued job) executes nothing twice: the record answers.
func (s *Service) Commit(ctx context.Context, id string) (err error) {
	if t := s.cfg.Tracer; t != nil {
		var span airlock.Span
		ctx, span = t.Start(ctx, airlock.SpanPlanCommit, airlock.Attr{Key: airlock.AttrPlanID, Value: id})
		defer func() {
			if p, gerr := s.cfg.Store.GetPlan(context.WithoutCancel(ctx), id); gerr == nil {
				span.Set(planAttrs(p)...)
			}
			span.End(err)
		}()
	}
	return s.commit(ctx, id)
}

func (s *Service) commit(ctx context.Context, id string) error {
	p, err := s.cfg.Store.GetPlan(ctx, id)
	if err != nil {
		return err
	}
	switch p.Status {
	case airlock.PlanApproved, airlock.PlanCommitting:
	default:
		return nil // decided otherwise, or already done
	}
	tool := s.cfg.Manifest.Tool(p.Tool)
	if tool == nil {
		_, err := s.cfg.Store.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: id, From: []airlock.PlanStatus{airlock.PlanApproved, airlock.PlanCommitting}, To: airlock.PlanFailed, Error: "the tool is no longer in the manifest", At: s.clock.Now()})
		return err
	}
	if tool.RunByCaller() {
		return nil // a worker in the caller's process commits it (NextCallerCommit)
	}
	c, ok := s.cfg.Callers(tool)
	if !ok {
		return fmt.Errorf("plan: tool %s has no upstream", tool.Name)
	}
	if _, err := s.cfg.Store.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: id, From: []airlock.PlanStatus{airlock.PlanApproved}, To: airlock.PlanCommitting, At: s.clock.Now()}); err != nil {
		return err
	}
	// The plan's arguments come back from the store as the canonical bytes
	// they were stored as; this is where they are parsed again.
	args, err := airlock.NewArgs(p.Args)
	if err != nil {
		return fmt.Errorf("plan %s: stored arguments: %w", id, err)
	}
	commitTool := *tool
	commitTool.RespondWithin = nil // the worker waits for the outcome
	ans, err := s.cfg.Guard.DoKeyed(ctx, &airlock.KeyedCall{Tool: &commitTool, Key: p.Key, Args: args, RunID: p.RunID},
		func(ctx context.Context, key string) airlock.Outcome {
			tp, ts := s.traceOf(ctx)
			return c.Call(ctx, &upstream.Request{Tool: tool, Args: args.JSON(), Key: key, TraceParent: tp, TraceState: ts})
		})
	if err != nil {
		if airlock.ErrorCode(err) == airlock.CodeNotSent {
			return err // nothing happened; the queue retries
		}
		return err
	}
	return s.settleCommit(ctx, id, tool, ans)
}

// settleCommit records a commit's answer on its plan: committed, failed or
// in doubt; ErrRetry while the work still runs elsewhere.
func (s *Service) settleCommit(ctx context.Context, id string, tool *airlock.Tool, ans *airlock.Answer) error {
	status, errText := airlock.PlanCommitted, ""
	switch ans.Status {
	case airlock.StatusSucceeded:
	case airlock.StatusFailed:
		status, errText = airlock.PlanFailed, "the service refused it"
	case airlock.StatusInDoubt:
		status, errText = airlock.PlanInDoubt, airlock.InDoubtMessage(tool)
	default:
		return ErrRetry
	}
	_, err := s.cfg.Store.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: id, From: []airlock.PlanStatus{airlock.PlanCommitting, airlock.PlanApproved}, To: status, Result: ans.Result, Error: errText, At: s.clock.Now()})
	return err
}

// WaitForCommit polls the plan until it is final (or in doubt) or wait passes.
func (s *Service) WaitForCommit(ctx context.Context, id string, wait time.Duration) (*airlock.Plan, error) {
	deadline := s.clock.Now().Add(wait)
	for {
		p, err := s.cfg.Store.GetPlan(ctx, id)
		if err != nil {
			return nil, err
		}
		if p.Status.Final() || p.Status == airlock.PlanInDoubt || s.clock.Now().After(deadline) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, nil
		case <-time.After(20 * time.Millisecond): // a re-read, not a time the plan keeps
		}
	}
}

// WithdrawReason is the reason a plan withdrawn by an MCP client's
// tasks/cancel carries.
const WithdrawReason = "withdrawn by its proposer (tasks/cancel) before anyone decided it"

// Withdraw withdraws an awaiting plan on its proposer's word (an MCP
// client's tasks/cancel): it will not be done. False, with the plan as it
// is, when it no longer awaits approval (an approved plan is carried out).
func (s *Service) Withdraw(ctx context.Context, id, by string) (*airlock.Plan, bool, error) {
	p, ok, err := s.cfg.Store.WithdrawPlan(ctx, &airlock.WithdrawPlanParams{ID: id, By: by, Reason: WithdrawReason, At: s.clock.Now()})
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, false, airlock.FieldErrorf(airlock.CodeNotFound, "plan_id", "no plan with id %q", id)
	}
	return p, ok, err
}
