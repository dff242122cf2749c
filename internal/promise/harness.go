package promise

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/manifest"
)

// Config is one run of the checker.
type Config struct {
	// Seed draws the workload, the doors, the faults and their timing;
	// a run that fails prints it, and the same seed replays the same
	// choices (the goroutines' interleaving is the machine's).
	Seed uint64
	// DSN is the database every replica shares.
	DSN string
	// Replicas serve the same database (at least 1).
	Replicas int
	// Works is how many pieces of work the callers share; fewer means more
	// contention for each.
	Works int
	// Calls is how many calls the callers make in all.
	Calls int
	// Callers call at once.
	Callers int
	// Faults is the share of service requests, replies and holders that
	// misbehave (0 to 1).
	Faults float64
	// Restarts is how many times a replica is stopped and started again
	// during the run.
	Restarts int
	// Chaos, when set, runs during the run every ChaosEvery (a store fault:
	// PostgreSQL's backends terminated).
	Chaos      func(ctx context.Context) error
	ChaosEvery time.Duration
	// Log receives progress lines. Default: none.
	Log func(format string, args ...any)
}

// Report is what a run did.
type Report struct {
	Operations int
	Calls      map[string]int // by door
	Effects    int
	// Answers counts the calls' answers by door and status
	// ("mcp-task in_doubt"), to see that each door was held to the model
	// with answers that say something.
	Answers map[string]int
}

// The tokens of the run; the manifest keeps their hashes.
const (
	agentToken  = "promise-agent-1"
	agent2Token = "promise-agent-2"
	aliceToken  = "promise-alice"
	bobToken    = "promise-bob"
	adminToken  = "promise-admin"
)

// lease is the claims' lease: short, so that stalled holders and the
// reaper race.
const lease = time.Second

// manifestText is the workload's manifest. Every tool takes Work; pay and
// payout are automatic under 100, one person's up to 999, two people's
// from 1000.
const manifestText = `version: 1
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "AGENT1"}
    - {name: agent-2, role: agent, sha256: "AGENT2"}
    - {name: alice, role: approver, sha256: "ALICE"}
    - {name: bob, role: approver, sha256: "BOB"}
    - {name: root, role: admin, sha256: "ADMIN"}
upstreams:
  svc: {http: "SVC"}
  svck: {http: "SVC/k", honors_idempotency_key: true}
tools:
  - name: note
    kind: write
    WORK
    upstream: {name: svc, path: /tools/note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note."}
  - name: note_k
    kind: write
    WORK
    upstream: {name: svck, path: /tools/note_k}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note."}
  - name: save
    kind: write
    WORK
    upstream: {caller: true}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first save."}
  - name: save_k
    kind: write
    WORK
    upstream: {caller: true, honors_idempotency_key: true}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first save."}
  - name: pay
    kind: irreversible
    WORK
    upstream: {name: svc, path: /tools/pay}
    answers: {undo: "No.", approver: "Rules, then people.", on_repeat: "The first payment."}
    RULES
  - name: payout
    kind: irreversible
    WORK
    upstream: {caller: true, honors_idempotency_key: true}
    answers: {undo: "No.", approver: "Rules, then people.", on_repeat: "The first payout."}
    RULES
`

// workFields and rulesField are what every tool of the manifest shares.
const (
	workFields = `input_schema: {type: object, properties: {id: {type: string}, amount: {type: integer}, fail: {type: boolean}}, required: [id, amount]}
    natural_key: [{field: id}]
    window: forever
    timeout: 700ms
    respond_within: 400ms
    repeat_wait: 200ms`
	rulesField = `approval:
      rules:
        - {name: small, when: "args.amount < 100", decide: auto}
        - {name: large, when: "args.amount >= 1000", decide: human, approvals: 2}
        - {name: medium, when: "true", decide: human}`
)

// doorsOf are the front doors that carry each tool's work.
var doorsOf = map[string][]string{
	"note":   {"library", "calls", "mcp", "mcp-session", "mcp-task"},
	"note_k": {"library", "calls", "mcp", "mcp-session", "mcp-task"},
	"save":   {"claims"},
	"save_k": {"claims"},
	"pay":    {"plan-calls", "plan-mcp", "plan-task"},
	"payout": {"plan-calls", "plan-mcp", "plan-task"},
}

// run is one run's moving parts.
type run struct {
	cfg    *Config
	h      *History
	svc    *Service
	svcURL string
	m      *manifest.Manifest
	works  []*work
	reps   []*replica
	mu     sync.Mutex
	calls  map[string]int
	rngMu  sync.Mutex
	rng    *rand.Rand
	lossy  atomic.Bool
	// planIDs are the plans workers have taken, for a worker that names
	// another plan in its handle.
	planMu  sync.Mutex
	planIDs []string
}

// work is one piece of work of the run.
type work struct {
	tool string
	args Work
}

func (w *work) name() string { return WorkName(w.tool, w.args.ID) }

// Run runs the workload cfg describes and checks its history.
func Run(ctx context.Context, cfg *Config) (*Report, error) {
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &run{cfg: cfg, h: &History{}, calls: map[string]int{}, rng: rand.New(rand.NewPCG(cfg.Seed, 44))}
	r.svc = NewService(r.h, cfg.Seed, cfg.Faults/2, 900*time.Millisecond)
	svc := httptest.NewServer(r.svc)
	defer svc.Close()
	r.svcURL = svc.URL
	if err := r.parseManifest(); err != nil {
		return nil, err
	}
	r.makeWorks()
	for i := range cfg.Replicas {
		rep, err := r.startReplica(ctx, i)
		if err != nil {
			return nil, err
		}
		defer rep.stop()
	}
	r.lossy.Store(true)
	logf("seed %d: %d works, %d calls by %d callers on %d replica(s)", cfg.Seed, len(r.works), cfg.Calls, cfg.Callers, cfg.Replicas)

	runCtx, stopBackground := context.WithCancel(ctx)
	var background sync.WaitGroup
	background.Go(func() { r.approve(runCtx) })
	for range 2 {
		background.Go(func() { r.commitWorker(runCtx, true) })
	}
	if cfg.Chaos != nil {
		background.Go(func() { r.chaos(runCtx) })
	}
	var callers sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(cfg.Calls))
	var restarted atomic.Int64
	for c := range cfg.Callers {
		callers.Go(func() {
			ag := r.newAgent(c)
			defer ag.close()
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if n := restarted.Load(); n < int64(cfg.Restarts) && left.Load() < int64(cfg.Calls)*(n+1)/int64(cfg.Restarts+1) && restarted.CompareAndSwap(n, n+1) {
					r.restart(ctx, int(n)%len(r.reps), logf)
				}
				w := r.works[r.intn(len(r.works))]
				ag.call(ctx, w, r.pick(doorsOf[w.tool]))
			}
		})
	}
	callers.Wait()
	logf("calls done; quiescing")
	// Quiesce: no more faults; every piece of work is carried to its end
	// by an honest caller and an honest worker; leases run out and the
	// reaper acts.
	r.lossy.Store(false)
	r.svc.mu.Lock()
	r.svc.faults = 0
	r.svc.mu.Unlock()
	stopBackground()
	background.Wait()
	if err := r.finish(ctx); err != nil {
		return nil, err
	}
	if err := r.finalRead(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Operations: r.h.Len(), Calls: r.calls, Answers: map[string]int{}}
	for _, op := range r.h.Operations() {
		switch in := op.Input.(Input); in.Kind {
		case Effect:
			rep.Effects++
		case Call:
			out := op.Output.(Output)
			rep.Answers[in.Door+" "+out.Status+planSuffix(out.Plan)]++
		}
	}
	logf("%d operations, %d effects; checking", rep.Operations, rep.Effects)
	return rep, r.h.Check(2 * time.Minute)
}

func (r *run) parseManifest() error {
	hash := func(tok string) string { h := gateway.HashToken(tok); return fmt.Sprintf("%x", h[:]) }
	text := strings.NewReplacer("WORK", workFields, "RULES", rulesField, "SVC", r.svcURL, "AGENT1", hash(agentToken), "AGENT2", hash(agent2Token),
		"ALICE", hash(aliceToken), "BOB", hash(bobToken), "ADMIN", hash(adminToken)).Replace(manifestText)
	m, err := manifest.Parse([]byte(text), "promise.yaml")
	r.m = m
	return err
}

// makeWorks draws the pieces of work: each tool's, some that its service
// refuses, plans of every rule.
func (r *run) makeWorks() {
	tools := []string{"note", "note_k", "save", "save_k", "pay", "payout"}
	for i := range r.cfg.Works {
		w := &work{tool: tools[i%len(tools)], args: Work{ID: fmt.Sprintf("W-%d", i)}}
		switch r.intn(3) {
		case 0:
			w.args.Amount = 50
		case 1:
			w.args.Amount = 500
		default:
			w.args.Amount = 5000
		}
		w.args.Fail = r.intn(10) == 0
		r.works = append(r.works, w)
	}
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) chance(p float64) bool {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64() < p
}

func (r *run) pick(doors []string) string { return doors[r.intn(len(doors))] }

func (r *run) count(door string) {
	r.mu.Lock()
	r.calls[door]++
	r.mu.Unlock()
}

// approve decides the plans that wait for people: alice approves every
// one, bob those of two approvers.
func (r *run) approve(ctx context.Context) {
	hc := &http.Client{Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		r.approvePass(ctx, hc)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *run) approvePass(ctx context.Context, hc *http.Client) {
	rep := r.reps[r.intn(len(r.reps))]
	var list struct {
		Plans []struct {
			ID                string `json:"id"`
			DecisionHash      string `json:"decision_hash"`
			ApprovalsRequired int    `json:"approvals_required"`
			Approvals         []struct {
				By string `json:"by"`
			} `json:"approvals"`
		} `json:"plans"`
	}
	if getJSON(ctx, hc, rep.direct()+"/v1/plans?status=awaiting_approval&limit=100", adminToken, &list) != nil {
		return
	}
	for _, p := range list.Plans {
		// A fifth of them are rejected (by their id, so every pass agrees):
		// their work must never run.
		verb := "approve"
		if p.ID[len(p.ID)-1]%5 == 0 {
			verb = "reject"
		}
		for _, tok := range []string{aliceToken, bobToken} {
			body, _ := json.Marshal(map[string]string{"reason": "checked", "decision_hash": p.DecisionHash})
			req, _ := http.NewRequestWithContext(ctx, "POST", rep.direct()+"/v1/plans/"+p.ID+"/"+verb, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

func getJSON(ctx context.Context, hc *http.Client, u, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// commitWorker runs approved payouts (a tool run by its caller) as a
// worker in the caller's process: with faults, it vanishes mid-commit,
// stalls past its lease, or tampers its handle to name another plan.
func (r *run) commitWorker(ctx context.Context, faulty bool) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		c := client.New(&client.Config{URL: r.url(), Token: agentToken, HTTPClient: hc})
		held, err := c.NextCommit(ctx, []string{"payout"}, 200*time.Millisecond)
		if err != nil || held == nil || held.Plan == nil {
			continue
		}
		r.commit(ctx, c, held, faulty)
	}
}

// commit runs one held commit.
func (r *run) commit(ctx context.Context, c *client.Client, held *client.Held, faulty bool) {
	var args Work
	_ = json.Unmarshal(held.Plan.Args, &args)
	w := &work{tool: "payout", args: args}
	fault := 0
	if faulty && r.chance(r.cfg.Faults) {
		fault = 1 + r.intn(4)
	}
	if fault == 1 { // vanishes before running the work
		return
	}
	r.planMu.Lock()
	other := airlock.NewPlanID() // a plan that does not exist, or another the workers took
	if n := len(r.planIDs); n > 0 && r.intn(2) == 0 {
		other = r.planIDs[r.intn(n)]
	}
	r.planIDs = append(r.planIDs, held.Plan.ID)
	r.planMu.Unlock()
	if (fault == 4 || r.chance(r.cfg.Faults)) && other != held.Plan.ID {
		// It names another plan in its handle, with a result of its own
		// making: refused, nothing changes. Were it accepted, the answer
		// is recorded for the model to judge (the other plan would show a
		// result no effect produced).
		forged := held.Claim[:strings.LastIndex(held.Claim, ".")+1] + other
		n := NewNonce()
		done := r.h.Begin(-2, Input{Kind: Call, Work: w.name(), Door: "commit-forged"})
		if _, err := c.Complete(ctx, forged, client.Outcome{Kind: client.Succeeded, Result: json.RawMessage(`{"done":"` + n + `"}`)}); err == nil {
			done(Output{Status: "succeeded", Result: n})
		} else {
			done(Output{Status: Refused})
		}
	}
	out := r.request(ctx, w, held.IdempotencyKey)
	if fault == 2 { // vanishes after running the work
		return
	}
	if fault == 3 {
		time.Sleep(lease + 300*time.Millisecond)
	}
	outcome := completion(out)
	_, _ = c.Complete(ctx, held.Claim, outcome)
}

// chaos runs the configured store fault every ChaosEvery.
func (r *run) chaos(ctx context.Context) {
	every := r.cfg.ChaosEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
			_ = r.cfg.Chaos(ctx)
		}
	}
}

// finish carries every piece of work to its end without faults: an honest
// caller calls each until its answer is final, in doubt or its plan has
// ended, and an honest worker commits what is approved; leases then run
// out and the reaper acts.
func (r *run) finish(ctx context.Context) error {
	ag := r.newAgent(1000)
	defer ag.close()
	deadline := time.Now().Add(60 * time.Second)
	var hc = &http.Client{Timeout: 5 * time.Second}
	var workers sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	workers.Go(func() { r.commitWorker(wctx, false) })
	workers.Go(func() { r.approve(wctx) })
	defer func() { stop(); workers.Wait() }()
	pending := append([]*work(nil), r.works...)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var next []*work
		for _, w := range pending {
			door := doorsOf[w.tool][0]
			before := r.h.Len()
			ag.call(ctx, w, door)
			ops := r.h.Operations()[before:]
			if !ended(ops, w.name()) {
				next = append(next, w)
			}
		}
		pending = next
		if len(pending) > 0 {
			r.approvePass(ctx, hc)
			time.Sleep(200 * time.Millisecond)
		}
	}
	if len(pending) > 0 {
		names := make([]string, 0, len(pending))
		for _, w := range pending {
			names = append(names, w.name())
		}
		return fmt.Errorf("work not carried to its end in 60 s: %s", strings.Join(names, ", "))
	}
	time.Sleep(2 * lease) // leases of vanished holders run out; the reaper acts
	return nil
}

// ended reports whether the last call of work among ops got an answer
// that ends it: final, in doubt, or a plan that ended.
func ended(ops []porcupine.Operation, name string) bool {
	for i := len(ops) - 1; i >= 0; i-- {
		in, out := ops[i].Input.(Input), ops[i].Output.(Output)
		if in.Kind != Call || in.Work != name {
			continue
		}
		if out.Plan != "" {
			return planRank[out.Plan] == 4
		}
		return out.Status == "succeeded" || out.Status == "failed" || out.Status == "in_doubt"
	}
	return false
}

// finalRead records each piece of work's record and plan as the run left
// them, and checks that the audit trail says what the record says.
func (r *run) finalRead(ctx context.Context) error {
	rep := r.reps[0]
	m := rep.app().Manifest
	hc := &http.Client{Timeout: 10 * time.Second}
	var problems []string
	for _, w := range r.works {
		tool := m.Tool(w.tool)
		args, _ := json.Marshal(w.args)
		d, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &m.Calendar, Args: airlock.MustArgs(string(args)).Value(), At: time.Now()})
		if err != nil {
			return err
		}
		out := Output{Status: None}
		var rec struct {
			State  string          `json:"state"`
			Result json.RawMessage `json:"result"`
		}
		switch err := getJSON(ctx, hc, rep.direct()+"/v1/records/"+d.Key, adminToken, &rec); {
		case err == nil:
			out = Output{Status: rec.State, Result: NonceOf(string(rec.Result))}
		case !strings.Contains(err.Error(), ": 404 "):
			return err
		}
		if tool.Kind == airlock.KindIrreversible {
			var list struct {
				Plans []planView `json:"plans"`
			}
			if err := getJSON(ctx, hc, rep.direct()+"/v1/plans?tool="+w.tool+"&limit=1000", adminToken, &list); err != nil {
				return err
			}
			for _, p := range list.Plans {
				var a Work
				if json.Unmarshal(p.Args, &a) == nil && a.ID == w.args.ID {
					out.Plan = p.Status
					if problem := p.decidedAsItsRuleSays(); problem != "" {
						problems = append(problems, w.name()+": "+problem)
					}
				}
			}
		}
		r.h.Instant(-3, Input{Kind: Final, Work: w.name()}, out)
		if problem := r.auditAgrees(ctx, hc, rep, d.Key, out); problem != "" {
			problems = append(problems, w.name()+": "+problem)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the record, its plan and its audit trail disagree:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// planView is a plan as an admin reads it.
type planView struct {
	ID                string          `json:"id"`
	Status            string          `json:"status"`
	Args              json.RawMessage `json:"args"`
	Decision          string          `json:"decision"`
	ApprovalsRequired int             `json:"approvals_required"`
	Approvals         []struct {
		By string `json:"by"`
	} `json:"approvals"`
}

// decidedAsItsRuleSays: a plan that was approved (and perhaps carried out)
// was approved by its rule or by as many distinct people as it asks for.
func (p *planView) decidedAsItsRuleSays() string {
	if planRank[p.Status] < planRank["approved"] || p.Status == "rejected" || p.Status == "expired" || p.Status == "withdrawn" || p.Decision == "auto" {
		return ""
	}
	people := map[string]bool{}
	for _, a := range p.Approvals {
		people[a.By] = true
	}
	if len(people) < max(1, p.ApprovalsRequired) {
		return fmt.Sprintf("plan %s is %s with %d distinct approvals of the %d its rule asks for", p.ID, p.Status, len(people), max(1, p.ApprovalsRequired))
	}
	return ""
}

// auditAgrees checks a record's audit trail: work that ended has one
// completion (or settlement) event, carrying the record's result.
func (r *run) auditAgrees(ctx context.Context, hc *http.Client, rep *replica, key string, out Output) string {
	if out.Status != "succeeded" && out.Status != "failed" {
		return ""
	}
	var nonces []string
	for try := 0; try < 50; try++ {
		var page struct {
			Events []airlock.AuditEvent `json:"events"`
		}
		if err := getJSON(ctx, hc, rep.direct()+"/v1/audit?key="+key+"&limit=1000", adminToken, &page); err != nil {
			return err.Error()
		}
		nonces = nonces[:0]
		for _, e := range page.Events {
			if e.Kind == airlock.EventCompleted || e.Kind == airlock.EventFailed || e.Kind == airlock.EventSettled {
				nonces = append(nonces, NonceOf(string(e.Result)))
			}
		}
		if len(nonces) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond) // events are written in batches
	}
	if len(nonces) != 1 || nonces[0] != out.Result {
		return fmt.Sprintf("record %s with %s; completion events carry %v", out.Status, out.Result, nonces)
	}
	return ""
}
