package metrics

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock"
)

// The report (docs/audit.md, "The figures") is computed from the store — the audit log and
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
	// AuditEventsLost is how many buffered events were given up in the
	// period (events_lost events); they count against AuditCompleteness.
	AuditEventsLost int `json:"audit_events_lost"`
	Calls           int `json:"side_effecting_calls"`
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
	// InDoubt is how many of the tool's records are in doubt now (at the
	// report's time, whatever the period): settle them.
	InDoubt int `json:"in_doubt_now"`
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

// Source is what the report reads: the rollup the sealer keeps, and the
// plans waiting now.
type Source interface {
	Figures(ctx context.Context, p *airlock.FiguresParams) (*airlock.Figures, error)
	WaitingPlans(ctx context.Context) ([]airlock.WaitingPlans, error)
	InDoubtByTool(ctx context.Context) (map[string]int, error)
	// SealAudit seals pending events (and adds them to the rollup).
	SealAudit(ctx context.Context, limit int) (int, error)
}

// sealFor bounds the sealing a report does before it reads: the events
// written just before it was asked for are counted, and a sealer far
// behind does not hold the report up.
const sealFor = 2 * time.Second

// sealPending seals what is pending, in pages, for at most sealFor. The
// sealers of every process take turns, so this is safe beside them.
func sealPending(ctx context.Context, src Source) error {
	deadline := time.Now().Add(sealFor)
	for time.Now().Before(deadline) {
		n, err := src.SealAudit(ctx, 10000)
		if err != nil || n < 10000 {
			return err
		}
	}
	return nil
}

// Compute builds the report for the whole minutes of [now-period, now]
// from the rollup, after sealing what is pending; the period before is
// read for the changes in repeats and in the automatic approval rate. It
// reads a few rows per tool and minute, however many events there are.
func Compute(ctx context.Context, src Source, m *airlock.Catalog, period time.Duration, now time.Time) (*Report, error) {
	if err := sealPending(ctx, src); err != nil {
		return nil, err
	}
	since := now.Add(-period)
	// The minute now is in counts (it holds the latest events).
	until := now.Add(time.Minute)
	cur, err := src.Figures(ctx, &airlock.FiguresParams{Since: since, Until: until})
	if err != nil {
		return nil, err
	}
	prev, err := src.Figures(ctx, &airlock.FiguresParams{Since: since.Add(-period), Until: since})
	if err != nil {
		return nil, err
	}
	waiting, err := src.WaitingPlans(ctx)
	if err != nil {
		return nil, err
	}
	inDoubt, err := src.InDoubtByTool(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Since: since, Until: now}
	queue := map[string]airlock.WaitingPlans{}
	for _, w := range waiting {
		queue[w.Tool] = w
	}
	var calls, incomplete, lost int64
	for _, f := range cur.ByTool {
		calls += f[airlock.FigureCalls]
		incomplete += f[airlock.FigureIncomplete]
		lost += f[airlock.FigureLost]
	}
	r.Calls = int(calls)
	r.AuditEventsLost = int(lost)
	r.AuditCompleteness = 1
	if calls+lost > 0 {
		// Events given up count against completeness as calls whose
		// events are missing would.
		r.AuditCompleteness = 1 - float64(min(incomplete+lost, calls+lost))/float64(calls+lost)
	}
	for _, t := range m.Tools {
		if !t.Kind.SideEffecting() {
			continue
		}
		f, p := cur.ByTool[t.Name], prev.ByTool[t.Name]
		tr := ToolReport{Tool: t.Name, Kind: string(t.Kind),
			Calls: int(f[airlock.FigureCalls]), Repeats: int(f[airlock.FigureRepeats]), RepeatsPrev: int(p[airlock.FigureRepeats]),
			Timeouts: int(f[airlock.FigureTimeouts]), MaxCallsPerRun: t.MaxCallsPerRun, Timeout: t.TimeoutOr().Seconds(),
			Plans: int(f[airlock.FigurePlans]), AutoApprovals: int(f[airlock.FigureAuto]), QueueDepth: queue[t.Name].Depth,
			OldestWaitS: math.Round(OldestWait(queue[t.Name], now).Seconds()), InDoubt: inDoubt[t.Name]}
		if t.Approval != nil {
			tr.ExpiresAfterS = t.Approval.ExpiresAfterOr().Seconds()
		}
		tr.CallsPerRunP50, tr.CallsPerRunMax = runQuantiles(cur.RunsByCalls[t.Name])
		if tr.Calls > 0 {
			tr.TimeoutRate = float64(tr.Timeouts) / float64(tr.Calls)
		}
		durations := buckets(f, airlock.FigureDuration)
		tr.DurationP50s, tr.DurationP99s = bucketQuantile(durations, 0.5), bucketQuantile(durations, 0.99)
		if tr.Plans > 0 {
			tr.AutoRate = float64(tr.AutoApprovals) / float64(tr.Plans)
		}
		if pp := p[airlock.FigurePlans]; pp > 0 {
			tr.AutoRatePrev = float64(p[airlock.FigureAuto]) / float64(pp)
		}
		waits := buckets(f, airlock.FigureWait)
		tr.ApprovalWaitP50, tr.ApprovalWaitP99 = bucketQuantile(waits, 0.5), bucketQuantile(waits, 0.99)
		r.Tools = append(r.Tools, tr)
		r.Warnings = append(r.Warnings, warnings(tr)...)
	}
	if lost > 0 {
		r.Warnings = append(r.Warnings, Warning{Level: "error", Figure: "audit_events_lost", Message: fmt.Sprintf(
			"%d audit events (repeats served, conflicts, in-progress answers) were given up because the store refused them or took nothing in time; see the log for why", lost)})
	}
	if r.AuditCompleteness < 1 {
		r.Warnings = append(r.Warnings, Warning{Level: "error", Figure: "audit_completeness", Message: fmt.Sprintf(
			"%.1f%% of side-effecting calls have complete audit events (run id, key, arguments, result); it must be 100%%", 100*r.AuditCompleteness)})
	}
	return r, nil
}

// buckets picks a tool's bucket figures with the prefix: bucket -> count.
func buckets(f map[string]int64, prefix string) map[int]int64 {
	out := map[int]int64{}
	for name, n := range f {
		if b, ok := airlock.BucketOf(name, prefix); ok {
			out[b] += n
		}
	}
	return out
}

// bucketQuantile is the q-quantile of bucketed durations, in seconds: the
// upper bound of the bucket it falls in (at most 9 % above the true value,
// never below it), rounded to the millisecond.
func bucketQuantile(counts map[int]int64, q float64) float64 {
	var total int64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	rank = max(1, min(rank, total))
	var seen int64
	for _, b := range slices.Sorted(maps.Keys(counts)) {
		seen += counts[b]
		if seen >= rank {
			return math.Round(airlock.BucketUpper(b).Seconds()*1000) / 1000
		}
	}
	return 0
}

// runQuantiles is the median and the largest number of calls per run,
// from how many runs made each number of calls.
func runQuantiles(runsByCalls map[int64]int64) (p50 float64, most int) {
	var runs int64
	for _, n := range runsByCalls {
		runs += n
	}
	if runs == 0 {
		return 0, 0
	}
	rank := max(1, int64(math.Ceil(0.5*float64(runs))))
	var seen int64
	keys := slices.Sorted(maps.Keys(runsByCalls))
	p50 = -1
	for _, calls := range keys {
		seen += runsByCalls[calls]
		if p50 < 0 && seen >= rank {
			p50 = float64(calls)
		}
	}
	return p50, int(keys[len(keys)-1])
}

func warnings(t ToolReport) []Warning {
	var w []Warning
	if t.InDoubt > 0 {
		w = append(w, Warning{Tool: t.Tool, Level: "error", Figure: "in_doubt", Message: fmt.Sprintf(
			"%d records are in doubt now (their outcome is unknown); settle them on the page, with airlock records settle KEY, or GET /v1/records?state=in_doubt", t.InDoubt)})
	}
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

// WriteText renders the report for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "airlock report %s → %s\n\n", r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCALLS\tREPEATS\tCALLS/RUN p50/max\tTIMEOUTS\tDURATION p50/p99 (limit)\tPLANS\tAUTO\tWAIT p50/p99\tQUEUE (oldest)\tIN DOUBT")
	for _, t := range r.Tools {
		limit := ""
		if t.MaxCallsPerRun > 0 {
			limit = fmt.Sprintf(" (≤%d)", t.MaxCallsPerRun)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f/%d%s\t%d (%.1f%%)\t%.2fs/%.2fs (%.0fs)\t%d\t%.0f%%\t%.0fs/%.0fs\t%d (%s)\t%d\n",
			t.Tool, t.Calls, t.Repeats, t.CallsPerRunP50, t.CallsPerRunMax, limit, t.Timeouts, 100*t.TimeoutRate,
			t.DurationP50s, t.DurationP99s, t.Timeout, t.Plans, 100*t.AutoRate, t.ApprovalWaitP50, t.ApprovalWaitP99, t.QueueDepth, time.Duration(t.OldestWaitS)*time.Second, t.InDoubt)
	}
	tw.Flush()
	fmt.Fprintf(w, "\naudit completeness: %.1f%% of %d side-effecting calls\n", 100*r.AuditCompleteness, r.Calls)
	if r.AuditEventsLost > 0 {
		fmt.Fprintf(w, "audit events given up: %d\n", r.AuditEventsLost)
	}
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
