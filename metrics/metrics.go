// Package metrics exposes the figures that show the protection works
// (docs/audit.md, "The figures") as Prometheus metrics (client_golang), registered on a
// prometheus.Registerer passed in — never the global one.
package metrics

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clocks"
	"github.com/jonboulle/clockwork"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockhq/airlock"
)

// Metrics holds the collectors.
type Metrics struct {
	ToolCalls       *prometheus.CounterVec   // airlock_tool_calls_total{tool,kind,outcome}
	Repeats         *prometheus.CounterVec   // airlock_repeats_total{tool,state}
	BudgetRefusals  *prometheus.CounterVec   // airlock_run_budget_refusals_total{tool}
	ToolDuration    *prometheus.HistogramVec // airlock_tool_duration_seconds{tool}
	ToolTimeouts    *prometheus.CounterVec   // airlock_tool_timeouts_total{tool}
	InDoubt         *prometheus.CounterVec   // airlock_in_doubt_total{tool}
	Plans           *prometheus.CounterVec   // airlock_plans_total{tool,decision}
	ApprovalWait    *prometheus.HistogramVec // airlock_approval_wait_seconds{tool}
	ToolTimeout     *prometheus.GaugeVec     // airlock_tool_timeout_seconds{tool}: the configured limit
	AuditEvents     prometheus.Counter       // airlock_audit_events_total: events sealed into the chain
	AuthFailures    *prometheus.CounterVec   // airlock_auth_failures_total{kind}: wrong bearer tokens, failed sign-ins
	AuthRefused     *prometheus.CounterVec   // airlock_auth_throttled_total{kind}: attempts refused while an address waits
	AuditHeadSeq    prometheus.Gauge         // airlock_audit_head_seq: the sequence number of the last sealed event
	AuditLostTotal  prometheus.Counter       // airlock_audit_incomplete_total: buffered events given up
	PlansExpired    *prometheus.CounterVec   // airlock_plans_expired_total{tool}
	PlansDecided    *prometheus.CounterVec   // airlock_plans_decided_total{tool,decision}
	SettledTotal    *prometheus.CounterVec   // airlock_settled_total{tool,happened,by}
	Purged          *prometheus.CounterVec   // airlock_purged_total{what}: audit_events | figure_rows
	queueDepth      *prometheus.Desc
	oldestWait      *prometheus.Desc
	waiting         func(ctx context.Context) ([]airlock.WaitingPlans, error)
	inDoubtNow      *prometheus.Desc
	inDoubt         func(ctx context.Context) (map[string]int, error)
	now             func() time.Time
	sideEffectCalls *prometheus.HistogramVec // airlock_side_effect_calls_per_run

	runsMu sync.Mutex
	runs   map[string]int

	// The series every guarded call touches, found once per label values
	// (a vector's lookup hashes and compares its labels on every call).
	callSeries, durationSeries, runSeries sync.Map
}

// Config configures New. A nil *Config means all defaults.
type Config struct {
	// Waiting, when set, is read at each scrape for
	// airlock_approval_queue_depth{tool} (plans waiting for a person) and
	// airlock_approval_oldest_wait_seconds{tool} (how long the oldest has
	// waited). It reads the store, so every replica reports the same.
	// Default: neither is reported.
	Waiting func(ctx context.Context) ([]airlock.WaitingPlans, error)
	// InDoubt, when set, is read at each scrape for
	// airlock_records_in_doubt{tool}: the records whose outcome is unknown
	// now, however they came to be (an answer in doubt, or the reaper after
	// a crash), from the store. Default: not reported.
	InDoubt func(ctx context.Context) (map[string]int, error)
	// Clock tells the time for the oldest wait. Default: the system clock.
	Clock clockwork.Clock
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer, cfg *Config) (*Metrics, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	m := &Metrics{
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_tool_calls_total", Help: "Tool calls by tool, kind and outcome (succeeded, failed, in_progress, in_doubt, planned, refused, error).",
		}, []string{"tool", "kind", "outcome"}),
		Repeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_repeats_total", Help: "Repeated calls answered from the first call's record, by the record's state.",
		}, []string{"tool", "state"}),
		BudgetRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_run_budget_refusals_total", Help: "Calls refused by max_calls_per_run.",
		}, []string{"tool"}),
		ToolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_tool_duration_seconds", Help: "Duration of upstream side-effect attempts.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60},
		}, []string{"tool"}),
		ToolTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_tool_timeouts_total", Help: "Side-effect attempts that ran into the tool's timeout.",
		}, []string{"tool"}),
		InDoubt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_in_doubt_total", Help: "Calls answered in_doubt (their outcome is unknown).",
		}, []string{"tool"}),
		Plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_plans_total", Help: "Plans created, by the rule's decision (auto or human).",
		}, []string{"tool", "decision"}),
		ApprovalWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_approval_wait_seconds", Help: "How long plans waited for a person's decision.",
			Buckets: []float64{10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400},
		}, []string{"tool"}),
		sideEffectCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_side_effect_calls_per_run", Help: "Side-effecting calls a run had made, observed at each new one.",
			Buckets: []float64{1, 2, 3, 5, 10, 20, 50, 100},
		}, []string{"tool"}),
		ToolTimeout: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "airlock_tool_timeout_seconds", Help: "Each side-effecting tool's configured timeout, to compare durations against.",
		}, []string{"tool"}),
		AuditEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_audit_events_total", Help: "Audit events sealed into the hash chain by this process.",
		}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_auth_failures_total", Help: "Failed authentications: wrong bearer tokens (bearer) and failed sign-ins on the page (signin).",
		}, []string{"kind"}),
		AuthRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_auth_throttled_total", Help: "Authentication attempts refused (429) because their address failed too often.",
		}, []string{"kind"}),
		AuditHeadSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_audit_head_seq", Help: "The sequence number of the last sealed audit event, as this process last sealed it: a record outside the database against which a truncated log is found (audit verify --expect-count).",
		}),
		AuditLostTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_audit_incomplete_total", Help: "Audit events that could not be written (the log misses them).",
		}),
		Purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_purged_total", Help: "Rows purged past retention by this process: audit_events (after archiving), figure_rows (the rollup).",
		}, []string{"what"}),
		PlansExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_plans_expired_total", Help: "Plans nobody decided before they expired.",
		}, []string{"tool"}),
		PlansDecided: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_plans_decided_total", Help: "Plans decided by a person, by decision (approved or rejected).",
		}, []string{"tool", "decision"}),
		SettledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_settled_total", Help: "In-doubt records settled, by whether the work happened and by whom (person or reconcile).",
		}, []string{"tool", "happened", "by"}),
		queueDepth: prometheus.NewDesc("airlock_approval_queue_depth", "Plans waiting for a person.", []string{"tool"}, nil),
		oldestWait: prometheus.NewDesc("airlock_approval_oldest_wait_seconds", "How long the oldest plan waiting for a person has waited (0: none waits).", []string{"tool"}, nil),
		waiting:    cfg.Waiting,
		inDoubtNow: prometheus.NewDesc("airlock_records_in_doubt", "Records whose outcome is unknown now (read from the store: every replica reports the same).", []string{"tool"}, nil),
		inDoubt:    cfg.InDoubt,
		now:        clocks.Or(cfg.Clock).Now,
		runs:       map[string]int{},
	}
	for _, c := range []prometheus.Collector{m.ToolCalls, m.Repeats, m.BudgetRefusals, m.ToolDuration, m.ToolTimeouts, m.InDoubt, m.Plans, m.ApprovalWait,
		m.sideEffectCalls, m.ToolTimeout, m.AuditEvents, m.AuditHeadSeq, m.AuthFailures, m.AuthRefused, m.AuditLostTotal, m.PlansExpired, m.PlansDecided, m.SettledTotal, m.Purged, queueCollector{m}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

type queueCollector struct{ m *Metrics }

func (q queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.m.queueDepth
	ch <- q.m.oldestWait
	ch <- q.m.inDoubtNow
}

func (q queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if q.m.inDoubt != nil {
		if byTool, err := q.m.inDoubt(ctx); err == nil {
			for tool, n := range byTool {
				ch <- prometheus.MustNewConstMetric(q.m.inDoubtNow, prometheus.GaugeValue, float64(n), tool)
			}
		}
	}
	if q.m.waiting == nil {
		return
	}
	waiting, err := q.m.waiting(ctx)
	if err != nil {
		return
	}
	now := q.m.now()
	for _, w := range waiting {
		ch <- prometheus.MustNewConstMetric(q.m.queueDepth, prometheus.GaugeValue, float64(w.Depth), w.Tool)
		ch <- prometheus.MustNewConstMetric(q.m.oldestWait, prometheus.GaugeValue, OldestWait(w, now).Seconds(), w.Tool)
	}
}

// OldestWait is how long the oldest waiting plan has waited at now; zero
// when none waits.
func OldestWait(w airlock.WaitingPlans, now time.Time) time.Duration {
	if w.Depth == 0 || w.Oldest.IsZero() {
		return 0
	}
	return max(0, now.Sub(w.Oldest))
}

// SideEffect implements guard.Observer.
func (m *Metrics) SideEffect(tool *airlock.Tool, out airlock.Outcome, took time.Duration, timedOut bool) {
	series(&m.durationSeries, tool.Name, func() prometheus.Observer { return m.ToolDuration.WithLabelValues(tool.Name) }).Observe(took.Seconds())
	if timedOut {
		m.ToolTimeouts.WithLabelValues(tool.Name).Inc()
	}
}

// The labels of calls to a tool nobody configured: the caller chose the
// name, so it is not a label value (a tool's name starts with a letter, so
// UnknownTool is no tool's).
const (
	UnknownTool = "_unknown"
	UnknownKind = airlock.ToolKind("unknown")
)

// Call records one agent call's answer (or error); a call to a tool nobody
// configured (kind UnknownKind) is counted under tool UnknownTool.
func (m *Metrics) Call(tool string, kind airlock.ToolKind, a *airlock.Answer, err error) {
	if kind == UnknownKind {
		// A tool nobody configured is named by the caller: one series for
		// all of them, or a caller could add series without end.
		tool = UnknownTool
	}
	outcome := "error"
	switch {
	case err != nil:
		var e *airlock.Error
		if errors.As(err, &e) {
			switch e.Code {
			case airlock.CodeBudgetExceeded:
				m.BudgetRefusals.WithLabelValues(tool).Inc()
				outcome = "refused"
			case airlock.CodeInvalidArgument, airlock.CodeMissingField, airlock.CodeUnknownTool, airlock.CodeNotCallable, airlock.CodeArgumentsMismatch:
				outcome = "refused"
			}
		}
	case a != nil:
		outcome = string(a.Status)
		if a.Repeat {
			state := string(a.Status)
			m.Repeats.WithLabelValues(tool, state).Inc()
		}
		if a.Status == airlock.StatusInDoubt && !a.Repeat {
			m.InDoubt.WithLabelValues(tool).Inc()
		}
	}
	labels := [3]string{tool, string(kind), outcome}
	series(&m.callSeries, labels, func() prometheus.Counter { return m.ToolCalls.WithLabelValues(labels[:]...) }).Inc()
}

// series is the series of a vector for its label values, from cache.
func series[K comparable, S any](cache *sync.Map, labels K, find func() S) S {
	if s, ok := cache.Load(labels); ok {
		return s.(S)
	}
	s, _ := cache.LoadOrStore(labels, find())
	return s.(S)
}

// RunCall counts a new side-effecting call of a run (in this process: the
// count needs no database read on the hot path) and observes the run's
// count so far. Counts are kept for the last maxRuns runs.
func (m *Metrics) RunCall(tool, run string) {
	m.runsMu.Lock()
	if len(m.runs) >= maxRuns {
		clear(m.runs)
	}
	m.runs[run]++
	n := m.runs[run]
	m.runsMu.Unlock()
	series(&m.runSeries, tool, func() prometheus.Observer { return m.sideEffectCalls.WithLabelValues(tool) }).Observe(float64(n))
}

const maxRuns = 10000

// Planned implements plan.Observer: a new plan.
func (m *Metrics) Planned(tool, decision string) { m.Plans.WithLabelValues(tool, decision).Inc() }

// Decided implements plan.Observer: a person's decision after a wait.
func (m *Metrics) Decided(tool string, approved bool, waited time.Duration) {
	m.ApprovalWait.WithLabelValues(tool).Observe(waited.Seconds())
	decision := "rejected"
	if approved {
		decision = "approved"
	}
	m.PlansDecided.WithLabelValues(tool, decision).Inc()
}

// Expired implements plan.Observer: a plan nobody decided in time.
func (m *Metrics) Expired(tool string, waited time.Duration) {
	m.PlansExpired.WithLabelValues(tool).Inc()
}

// AuditLost implements guard.Observer.
func (m *Metrics) AuditLost(n int) { m.AuditLostTotal.Add(float64(n)) }

// Settled implements guard.Observer.
func (m *Metrics) Settled(tool string, happened bool, by string) {
	if by != airlock.ActorReconcile {
		by = "person"
	}
	m.SettledTotal.WithLabelValues(tool, strconv.FormatBool(happened), by).Inc()
}

// SetTimeouts publishes each side-effecting tool's timeout.
func (m *Metrics) SetTimeouts(man *airlock.Catalog) {
	for _, t := range man.Tools {
		if t.Kind.SideEffecting() {
			m.ToolTimeout.WithLabelValues(t.Name).Set(t.TimeoutOr().Seconds())
		}
	}
}
