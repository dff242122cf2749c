package metrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock"
)

// The report (DESIGN §2.6) is computed from the store — the audit log and
// the plans — so it works without Prometheus.

// Report is the figures per tool over a period, with warnings.
type Report struct {
	Since    time.Time    `json:"since"`
	Until    time.Time    `json:"until"`
	Tools    []ToolReport `json:"tools"`
	Warnings []Warning    `json:"warnings"`
	// AuditCompleteness is the share of side-effecting calls whose events
	// carry run id, key, arguments and result (1 = all).
	AuditCompleteness float64 `json:"audit_completeness"`
	Calls             int     `json:"side_effecting_calls"`
}

// ToolReport is one tool's figures.
type ToolReport struct {
	Tool            string  `json:"tool"`
	Kind            string  `json:"kind"`
	Calls           int     `json:"calls"`            // new side-effecting calls (claims)
	Repeats         int     `json:"repeats"`          // repeats served from the first result
	RepeatsPrev     int     `json:"repeats_previous"` // the same in the period before
	CallsPerRunP50  float64 `json:"calls_per_run_p50"`
	CallsPerRunMax  int     `json:"calls_per_run_max"`
	MaxCallsPerRun  int     `json:"max_calls_per_run,omitempty"`
	Timeouts        int     `json:"timeouts"`
	TimeoutRate     float64 `json:"timeout_rate"`
	DurationP50s    float64 `json:"duration_p50_s"`
	DurationP99s    float64 `json:"duration_p99_s"`
	Timeout         float64 `json:"timeout_s"`
	Plans           int     `json:"plans"`
	AutoApprovals   int     `json:"auto_approvals"`
	AutoRate        float64 `json:"auto_approval_rate"`
	AutoRatePrev    float64 `json:"auto_approval_rate_previous"`
	ApprovalWaitP50 float64 `json:"approval_wait_p50_s"`
	ApprovalWaitP99 float64 `json:"approval_wait_p99_s"`
	QueueDepth      int     `json:"queue_depth"`
	// OldestWaitS is how long the oldest plan still awaiting a person has
	// waited at the report's end (0: none waits).
	OldestWaitS float64 `json:"approval_oldest_wait_s"`
	// ExpiresAfterS is the tool's expires_after, to read OldestWaitS against.
	ExpiresAfterS float64 `json:"expires_after_s,omitempty"`
}

// Warning is one thing an operator should look at.
type Warning struct {
	Tool    string `json:"tool,omitempty"`
	Level   string `json:"level"` // warning | error
	Figure  string `json:"figure"`
	Message string `json:"message"`
}

// Source is what the report reads.
type Source interface {
	AuditSince(ctx context.Context, since time.Time, limit int) ([]*airlock.AuditEvent, error)
	WaitingPlans(ctx context.Context) ([]airlock.WaitingPlans, error)
}

// maxEvents bounds the events read for one report.
const maxEvents = 1_000_000

// Compute builds the report for [now-period, now]; the previous period
// is read for the change in the automatic approval rate.
func Compute(ctx context.Context, src Source, m *airlock.Manifest, period time.Duration, now time.Time) (*Report, error) {
	since := now.Add(-period)
	events, err := src.AuditSince(ctx, since.Add(-period), maxEvents)
	if err != nil {
		return nil, err
	}
	waiting, err := src.WaitingPlans(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Since: since, Until: now}
	type acc struct {
		claims, repeats, timeouts, plans, auto, prevPlans, prevAuto, prevRepeats int
		runs                                                                     map[string]int
		durations, waits                                                         []float64
	}
	by := map[string]*acc{}
	get := func(tool string) *acc {
		if by[tool] == nil {
			by[tool] = &acc{runs: map[string]int{}}
		}
		return by[tool]
	}
	claimedAt := map[string]time.Time{}
	plannedAt := map[string]time.Time{}
	complete := map[string]bool{} // key -> the claim's events carry everything
	claimed := map[string]bool{}
	for _, e := range events {
		current := !e.At.Before(since)
		a := get(e.Tool)
		switch e.Kind {
		case airlock.EventClaimed:
			if !current {
				continue
			}
			a.claims++
			if e.RunID != "" {
				a.runs[e.RunID]++
			}
			claimedAt[e.Key] = e.At
			claimed[e.Key] = true
			complete[e.Key] = e.RunID != "" && e.Key != "" && len(e.Args) > 0
		case airlock.EventCompleted, airlock.EventFailed, airlock.EventInDoubt:
			if t, ok := claimedAt[e.Key]; ok && e.PlanID == "" {
				a.durations = append(a.durations, e.At.Sub(t).Seconds())
			}
			if claimed[e.Key] && e.PlanID == "" {
				complete[e.Key] = complete[e.Key] && e.RunID != "" && (len(e.Result) > 0 || e.Error != "")
			}
			if strings.Contains(e.Error, "deadline exceeded") || strings.Contains(strings.ToLower(e.Error), "timeout") {
				if current {
					a.timeouts++
				}
			}
		case airlock.EventRepeat, airlock.EventConflict:
			if current {
				a.repeats++
			} else {
				a.prevRepeats++
			}
		case airlock.EventPlanned:
			plannedAt[e.PlanID] = e.At
			if current {
				a.plans++
			} else {
				a.prevPlans++
			}
		case airlock.EventDecided:
			auto := e.Actor == airlock.ActorSystem
			if t, ok := plannedAt[e.PlanID]; ok && !auto && current {
				a.waits = append(a.waits, e.At.Sub(t).Seconds())
			}
			if auto {
				if current {
					a.auto++
				} else {
					a.prevAuto++
				}
			}
		}
	}
	queue := map[string]airlock.WaitingPlans{}
	for _, w := range waiting {
		queue[w.Tool] = w
	}
	total, whole := 0, 0
	for k := range claimed {
		total++
		if complete[k] {
			whole++
		}
	}
	r.Calls = total
	r.AuditCompleteness = 1
	if total > 0 {
		r.AuditCompleteness = float64(whole) / float64(total)
	}
	for _, t := range m.Tools {
		if !t.Kind.SideEffecting() {
			continue
		}
		a := get(t.Name)
		tr := ToolReport{Tool: t.Name, Kind: string(t.Kind), Calls: a.claims, Repeats: a.repeats, RepeatsPrev: a.prevRepeats, Timeouts: a.timeouts,
			MaxCallsPerRun: t.MaxCallsPerRun, Timeout: t.TimeoutOr().Seconds(), Plans: a.plans, AutoApprovals: a.auto, QueueDepth: queue[t.Name].Depth,
			OldestWaitS: math.Round(OldestWait(queue[t.Name], now).Seconds())}
		if t.Approval != nil {
			tr.ExpiresAfterS = t.Approval.ExpiresAfterOr().Seconds()
		}
		var perRun []float64
		for _, n := range a.runs {
			perRun = append(perRun, float64(n))
			tr.CallsPerRunMax = max(tr.CallsPerRunMax, n)
		}
		tr.CallsPerRunP50 = quantile(perRun, 0.5)
		if a.claims > 0 {
			tr.TimeoutRate = float64(a.timeouts) / float64(a.claims)
		}
		tr.DurationP50s, tr.DurationP99s = quantile(a.durations, 0.5), quantile(a.durations, 0.99)
		if a.plans > 0 {
			tr.AutoRate = float64(a.auto) / float64(a.plans)
		}
		if a.prevPlans > 0 {
			tr.AutoRatePrev = float64(a.prevAuto) / float64(a.prevPlans)
		}
		tr.ApprovalWaitP50, tr.ApprovalWaitP99 = quantile(a.waits, 0.5), quantile(a.waits, 0.99)
		r.Tools = append(r.Tools, tr)
		r.Warnings = append(r.Warnings, warnings(tr)...)
	}
	if r.AuditCompleteness < 1 {
		r.Warnings = append(r.Warnings, Warning{Level: "error", Figure: "audit_completeness", Message: fmt.Sprintf(
			"%.1f%% of side-effecting calls have complete audit events (run id, key, arguments, result); it must be 100%%", 100*r.AuditCompleteness)})
	}
	return r, nil
}

func warnings(t ToolReport) []Warning {
	var w []Warning
	if t.Kind == string(airlock.KindWrite) && t.Calls > 0 && t.Repeats == 0 {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "repeats", Message: "no repeats served: the protection has never been tested in this period"})
	}
	if t.RepeatsPrev > 0 && t.Repeats >= 10 && t.Repeats > 2*t.RepeatsPrev {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "repeats_rising", Message: fmt.Sprintf(
			"repeats rose from %d to %d: agents retry more; look at the upstream's latency against the timeout", t.RepeatsPrev, t.Repeats)})
	}
	if t.DurationP99s > 0 && t.DurationP99s >= 0.9*t.Timeout {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "duration_p99", Message: fmt.Sprintf(
			"p99 duration %.1fs is within 10%% of the %.0fs timeout: calls will start to time out (and go in doubt)", t.DurationP99s, t.Timeout)})
	}
	if t.MaxCallsPerRun > 0 && t.CallsPerRunMax >= t.MaxCallsPerRun {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "calls_per_run", Message: fmt.Sprintf(
			"a run reached max_calls_per_run (%d)", t.MaxCallsPerRun)})
	}
	if t.ExpiresAfterS > 0 && t.OldestWaitS >= t.ExpiresAfterS/2 {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "approval_oldest_wait", Message: fmt.Sprintf(
			"the oldest plan has waited %s for a person, over half of its %s before it expires unattended",
			time.Duration(t.OldestWaitS)*time.Second, time.Duration(t.ExpiresAfterS)*time.Second)})
	}
	if t.Plans > 0 && t.AutoRatePrev > 0 && math.Abs(t.AutoRate-t.AutoRatePrev) >= 0.2 {
		w = append(w, Warning{Tool: t.Tool, Level: "warning", Figure: "auto_approval_rate", Message: fmt.Sprintf(
			"automatic approval rate moved from %.0f%% to %.0f%%", 100*t.AutoRatePrev, 100*t.AutoRate)})
	}
	return w
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return math.Round(s[max(0, min(i, len(s)-1))]*1000) / 1000
}

// WriteText renders the report for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "airlock report %s → %s\n\n", r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCALLS\tREPEATS\tCALLS/RUN p50/max\tTIMEOUTS\tDURATION p50/p99 (limit)\tPLANS\tAUTO\tWAIT p50/p99\tQUEUE (oldest)")
	for _, t := range r.Tools {
		limit := ""
		if t.MaxCallsPerRun > 0 {
			limit = fmt.Sprintf(" (≤%d)", t.MaxCallsPerRun)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f/%d%s\t%d (%.1f%%)\t%.2fs/%.2fs (%.0fs)\t%d\t%.0f%%\t%.0fs/%.0fs\t%d (%s)\n",
			t.Tool, t.Calls, t.Repeats, t.CallsPerRunP50, t.CallsPerRunMax, limit, t.Timeouts, 100*t.TimeoutRate,
			t.DurationP50s, t.DurationP99s, t.Timeout, t.Plans, 100*t.AutoRate, t.ApprovalWaitP50, t.ApprovalWaitP99, t.QueueDepth, time.Duration(t.OldestWaitS)*time.Second)
	}
	tw.Flush()
	fmt.Fprintf(w, "\naudit completeness: %.1f%% of %d side-effecting calls\n", 100*r.AuditCompleteness, r.Calls)
	if len(r.Warnings) == 0 {
		fmt.Fprintln(w, "no warnings")
		return
	}
	fmt.Fprintln(w)
	for _, x := range r.Warnings {
		if x.Tool != "" {
			fmt.Fprintf(w, "%s: %s: %s\n", strings.ToUpper(x.Level), x.Tool, x.Message)
		} else {
			fmt.Fprintf(w, "%s: %s\n", strings.ToUpper(x.Level), x.Message)
		}
	}
}
