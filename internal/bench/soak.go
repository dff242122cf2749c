package bench

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
)

// SoakConfig describes a soak run: fill a database with about Events audit
// events at a realistic mix, then time what an operator reads and runs.
type SoakConfig struct {
	Store string // "sqlite" or "postgres", for the result
	// Events is about how many audit events the fill writes. Default 1,000,000.
	Events int
	// Concurrency is how many writers fill at once. Default 16.
	Concurrency int
	// Samples is how many times each page is read. Default 200.
	Samples int
	// Now is the end of the filled period (two days long). Default time.Now().
	Now time.Time
}

// SoakResult is the JSON line of a soak run. Durations in milliseconds.
type SoakResult struct {
	Mode        string `json:"mode"`
	Store       string `json:"store"`
	Events      int64  `json:"events"` // sealed events after the fill
	Records     int64  `json:"records"`
	Plans       int64  `json:"plans"`
	Concurrency int    `json:"concurrency"`
	// Fill: wall time, and the rate records were written at (claim and
	// completion, two transactions each, among the other writes).
	FillS            float64 `json:"fill_s"`
	FillEventsPerS   float64 `json:"fill_events_per_s"`
	RecordWritesPerS float64 `json:"record_writes_per_s"`
	SealS            float64 `json:"seal_s"` // sealing what the fill left unsealed
	VerifyS          float64 `json:"verify_s"`
	ReportMs         float64 `json:"report_ms"` // metrics.Compute of the last 24 h
	ReportOK         bool    `json:"report_ok"` // its counts match what the fill wrote
	// Pages: each list the page and the API read, p50/p99/max over Samples.
	Pages map[string]Quantiles `json:"pages"`
	// Purges: a day of records past retention, then a day of audit events.
	PurgeRecords        Purge   `json:"purge_records"`
	PurgeAudit          Purge   `json:"purge_audit"`
	PurgeFasterThanFill bool    `json:"purge_faster_than_writes"`
	VerifyAfterPurgeS   float64 `json:"verify_after_purge_s"`
	// Memory: the peak RSS of the whole run, and of the read phase alone
	// (report, pages, verify, purge), which must not grow with the log.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// Vacuums: on a PostgreSQL server whose autovacuum is off, the soak
	// runs VACUUM (ANALYZE) a minute after the last one ended during the
	// fill and once after it, as autovacuum would (0: autovacuum is on, or
	// SQLite).
	Vacuums        int      `json:"vacuums,omitempty"`
	ReadPeakRSSMiB float64  `json:"read_peak_rss_mib"`
	OK             bool     `json:"ok"`
	Problems       []string `json:"problems,omitempty"`
}

// Quantiles of one page's answer time, in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Purge is one purge's size and speed.
type Purge struct {
	Rows     int     `json:"rows"`
	S        float64 `json:"s"`
	RowsPerS float64 `json:"rows_per_s"`
}

// Soak tools; "approve" is the one with plans.
var soakTools = []string{"write_a", "write_b", "approve"}

// SoakManifest is the manifest the report of a soak run is computed with.
func SoakManifest() *manifest.Manifest {
	m := &manifest.Manifest{Version: 1}
	for _, name := range soakTools {
		m.Tools = append(m.Tools, &airlock.Tool{Name: name, Kind: airlock.KindWrite})
	}
	return m
}

// soakCounts is what the fill wrote into the last 24 hours, to check the
// report against.
type soakCounts struct {
	calls, succeeded, repeats atomic.Int64
}

// Soak fills s and times the operator's reads, the purges and verify.
func Soak(ctx context.Context, s airlock.Store, cfg SoakConfig) (*SoakResult, error) {
	if cfg.Events <= 0 {
		cfg.Events = 1_000_000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Samples <= 0 {
		cfg.Samples = 200
	}
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	now := cfg.Now.UTC().Truncate(time.Minute)
	res := &SoakResult{Mode: "soak", Store: cfg.Store, Concurrency: cfg.Concurrency, Pages: map[string]Quantiles{}}

	// A unit is one call (claim, completion, 0-2 repeats: 3 events on
	// average) and, every second unit, a plan (planned; decided by the rules
	// 70 %, by a person 20 %, waiting 10 %; committed when approved: 2.7
	// events): 4.35 events a unit, about 1 plan per 8.7 events.
	units := max(cfg.Events*20/87, 10) // 4.35 events a unit
	start := now.Add(-48 * time.Hour)
	step := 48 * time.Hour / time.Duration(units)
	dayAgo := now.Add(-24 * time.Hour)
	var counts soakCounts
	var next, records, plans, recordNanos atomic.Int64
	sealer := audit.NewSealer(s, 200*time.Millisecond, nil, nil, nil) // the server's sealer, as it runs beside the writes
	if err := sealer.Start(ctx); err != nil {
		return nil, err
	}
	vacuumCtx, stopVacuum := context.WithCancel(ctx)
	vacuumDone := make(chan struct{})
	vac, vacuumed := vacuumerOf(ctx, s)
	go func() { // autovacuum, where the server has it off
		defer close(vacuumDone)
		for vac != nil {
			select {
			case <-vacuumCtx.Done():
				return
			case <-time.After(time.Minute):
			}
			if err := vac.Vacuum(vacuumCtx); err == nil {
				vacuumed++
			}
		}
	}()
	began := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Concurrency)
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := mrand.New(mrand.NewPCG(uint64(w), 7))
			var repeats []*airlock.AuditEvent
			flush := func() error {
				if len(repeats) == 0 {
					return nil
				}
				err := s.AppendAudit(ctx, repeats)
				repeats = repeats[:0]
				return err
			}
			for {
				u := next.Add(1) - 1
				if u >= int64(units) || ctx.Err() != nil {
					break
				}
				at := start.Add(time.Duration(u) * step)
				recent := !at.Before(dayAgo)
				t0 := time.Now()
				if err := soakCall(ctx, s, rnd, u, at, &counts, recent, &repeats); err != nil {
					errc <- err
					return
				}
				recordNanos.Add(int64(time.Since(t0)))
				records.Add(1)
				if len(repeats) >= 500 {
					if err := flush(); err != nil {
						errc <- err
						return
					}
				}
				if u%2 == 0 {
					if err := soakPlan(ctx, s, rnd, u, at); err != nil {
						errc <- err
						return
					}
					plans.Add(1)
				}
			}
			if err := flush(); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		sealer.Stop()
		stopVacuum()
		<-vacuumDone
		return nil, fmt.Errorf("filling: %w", err)
	}
	fill := time.Since(began)
	sealer.Stop()
	stopVacuum()
	<-vacuumDone
	t := time.Now()
	if _, err := audit.SealPending(ctx, s); err != nil {
		return nil, err
	}
	res.SealS = secs(time.Since(t))
	fill += time.Since(t)
	if vac != nil {
		if err := vac.Vacuum(ctx); err != nil {
			return nil, fmt.Errorf("vacuum: %w", err)
		}
		vacuumed++
	}
	res.Vacuums = vacuumed
	res.FillS = secs(fill)
	res.Records, res.Plans = records.Load(), plans.Load()
	// Each record is written by two transactions of one writer; with
	// Concurrency writers the rate is records per writer-second times them.
	res.RecordWritesPerS = round1(float64(res.Records) / (float64(recordNanos.Load()) / 1e9) * float64(cfg.Concurrency))

	// The read phase: from here the process is the server's reader, whose
	// memory must not depend on the size of the log.
	runtime.GC()
	resetPeakRSS()

	t = time.Now()
	rep, err := audit.Verify(ctx, s)
	if err != nil {
		return nil, err
	}
	res.VerifyS = secs(time.Since(t))
	res.Events = rep.Events
	res.FillEventsPerS = round1(float64(rep.Events) / fill.Seconds())
	if !rep.OK {
		res.Problems = append(res.Problems, "verify: "+rep.Problem.Message)
	}

	t = time.Now()
	report, err := metrics.Compute(ctx, s, &SoakManifest().Catalog, 24*time.Hour, now)
	if err != nil {
		return nil, err
	}
	res.ReportMs = ms(time.Since(t))
	res.ReportOK = soakReportMatches(report, &counts, &res.Problems)

	if err := soakPages(ctx, s, cfg, units, now, res); err != nil {
		return nil, err
	}

	// A day's purge against a day's writes: the records of the older day
	// are past their retention (ExpiresAt a day after the call).
	t = time.Now()
	for {
		n, err := s.Purge(ctx, &airlock.PurgeParams{Now: now, Limit: 1000})
		res.PurgeRecords.Rows += n
		if err != nil {
			return nil, err
		}
		if n < 1000 {
			break
		}
	}
	res.PurgeRecords.S = secs(time.Since(t))
	res.PurgeRecords.RowsPerS = round1(float64(res.PurgeRecords.Rows) / max(time.Since(t).Seconds(), 1e-9))
	t = time.Now()
	st, err := audit.Purge(ctx, s, dayAgo, 1000)
	if err != nil {
		return nil, err
	}
	res.PurgeAudit = Purge{Rows: st.Events, S: secs(time.Since(t)), RowsPerS: round1(float64(st.Events) / max(time.Since(t).Seconds(), 1e-9))}
	// Writing a day's records took about half the fill's record time;
	// purging them must cost less.
	res.PurgeFasterThanFill = res.PurgeRecords.RowsPerS > res.RecordWritesPerS && res.PurgeAudit.RowsPerS > res.FillEventsPerS
	t = time.Now()
	rep, err = audit.Verify(ctx, s)
	if err != nil {
		return nil, err
	}
	res.VerifyAfterPurgeS = secs(time.Since(t))
	if !rep.OK {
		res.Problems = append(res.Problems, "verify after purge: "+rep.Problem.Message)
	}
	res.ReadPeakRSSMiB = peakRSSMiB()
	res.PeakRSSMiB = res.ReadPeakRSSMiB
	if res.PeakRSSMiB < fillPeak {
		res.PeakRSSMiB = fillPeak
	}
	for name, q := range res.Pages {
		if q.P99 >= 100 {
			res.Problems = append(res.Problems, fmt.Sprintf("page %s: p99 %.1f ms, over 100 ms", name, q.P99))
		}
	}
	if res.ReportMs >= 1000 {
		res.Problems = append(res.Problems, fmt.Sprintf("report: %.0f ms, over a second", res.ReportMs))
	}
	if !res.PurgeFasterThanFill {
		res.Problems = append(res.Problems, "a day's purge is slower than a day's writes")
	}
	res.OK = len(res.Problems) == 0
	return res, nil
}

// vacuumer is a store whose database needs vacuuming (PostgreSQL).
type vacuumer interface {
	AutovacuumOn(ctx context.Context) (bool, error)
	Vacuum(ctx context.Context) error
}

// vacuumerOf is s when its database's autovacuum is off, else nil.
func vacuumerOf(ctx context.Context, s airlock.Store) (vacuumer, int) {
	v, ok := s.(vacuumer)
	if !ok {
		return nil, 0
	}
	if on, err := v.AutovacuumOn(ctx); err != nil || on {
		return nil, 0
	}
	return v, 0
}

// fillPeak is the peak RSS before the read phase reset it.
var fillPeak float64

func resetPeakRSS() {
	fillPeak = peakRSSMiB()
	// Linux: writing 5 resets the peak resident set size (VmHWM).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		fillPeak = -1 // cannot tell the read phase apart
	}
}

func soakCall(ctx context.Context, s airlock.Store, rnd *mrand.Rand, u int64, at time.Time, c *soakCounts, recent bool, repeats *[]*airlock.AuditEvent) error {
	tool := soakTools[u%2]
	key := fmt.Sprintf("soak-%d", u)
	run := fmt.Sprintf("run-%d", u/7)
	args := json.RawMessage(fmt.Sprintf(`{"id":%d}`, u))
	_, claimed, err := s.Claim(ctx, &airlock.Claim{Key: key, Tool: tool, RunID: run, WindowID: "soak", Args: args,
		ArgsHash: airlock.ArgsHash(args), Owner: "soak", Now: at, LeaseUntil: at.Add(30 * time.Second),
		ExpiresAt: at.Add(24 * time.Hour), Actor: "agent-soak"})
	if err != nil {
		return err
	}
	if !claimed {
		return fmt.Errorf("key %s was claimed already: the database is not empty", key)
	}
	took := time.Duration(rnd.ExpFloat64() * float64(200*time.Millisecond))
	comp := &airlock.Completion{Key: key, Owner: "soak", Now: at.Add(took), Took: took, Actor: "agent-soak"}
	switch x := rnd.IntN(10); {
	case x < 8:
		comp.State, comp.Result = airlock.StateSucceeded, json.RawMessage(`{"ok":true}`)
	case x < 9:
		comp.State, comp.Result = airlock.StateFailed, json.RawMessage(`{"ok":false}`)
	default:
		comp.State, comp.Note, comp.TimedOut = airlock.StateInDoubt, "the upstream did not answer in time", true
	}
	if err := s.Complete(ctx, comp); err != nil {
		return err
	}
	n := rnd.IntN(3)
	for range n {
		*repeats = append(*repeats, &airlock.AuditEvent{At: at, Kind: airlock.EventRepeat, RunID: run, Key: key, Tool: tool, Actor: "agent-soak"})
	}
	if recent {
		c.calls.Add(1)
		c.repeats.Add(int64(n))
		if comp.State == airlock.StateSucceeded {
			c.succeeded.Add(1)
		}
	}
	return nil
}

func soakPlan(ctx context.Context, s airlock.Store, rnd *mrand.Rand, u int64, at time.Time) error {
	args := json.RawMessage(fmt.Sprintf(`{"record_id":"WD-%d","amount_minor":%d}`, u, rnd.IntN(100000)))
	facts := json.RawMessage(`{"status":"pending"}`)
	p := &airlock.Plan{ID: fmt.Sprintf("pl-%09d", u), Key: fmt.Sprintf("plan-%d", u), Tool: "approve", Args: args, Facts: facts,
		DecisionHash: airlock.DecisionHash("approve", args, facts), RunID: fmt.Sprintf("run-%d", u/7),
		CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(24 * time.Hour)}
	x := rnd.IntN(10)
	if x < 7 { // decided by the rules
		p.Status, p.Rule, p.Decision, p.DecidedAt = airlock.PlanApproved, "small", "auto", at
	} else {
		p.Status, p.Rule, p.Decision = airlock.PlanAwaitingApproval, "large", "human"
	}
	if _, _, err := s.CreatePlan(ctx, p); err != nil {
		return err
	}
	if x >= 7 && x < 9 { // a person decides within the hour
		decided, err := s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: x == 7, By: fmt.Sprintf("approver-%d", u%5), Role: airlock.RoleApprover,
			Reason: "checked the ledger", DecisionHash: p.DecisionHash, Now: at.Add(time.Duration(rnd.IntN(3600)) * time.Second)})
		if err != nil {
			return err
		}
		p = decided
	}
	if p.Status == airlock.PlanApproved {
		if _, err := s.SetPlanStatus(ctx, &airlock.SetPlanStatusParams{ID: p.ID, From: []airlock.PlanStatus{airlock.PlanApproved}, To: airlock.PlanCommitted, Result: json.RawMessage(`{"ok":true}`), Error: "", At: at.Add(time.Second)}); err != nil {
			return err
		}
	}
	return nil
}

func soakReportMatches(r *metrics.Report, c *soakCounts, problems *[]string) bool {
	var calls, repeats int64
	for _, t := range r.Tools {
		calls += int64(t.Calls)
		repeats += int64(t.Repeats)
	}
	ok := true
	// The period is whole minutes and so is the fill's "a day ago": the
	// counts must be equal.
	if calls != c.calls.Load() {
		*problems = append(*problems, fmt.Sprintf("report: %d calls in the last 24 h, the fill wrote %d", calls, c.calls.Load()))
		ok = false
	}
	if repeats != c.repeats.Load() {
		*problems = append(*problems, fmt.Sprintf("report: %d repeats served, the fill wrote %d", repeats, c.repeats.Load()))
		ok = false
	}
	return ok
}

// soakPages reads each list as the page and the API do, Samples times,
// from different places in the data.
func soakPages(ctx context.Context, s airlock.Store, cfg SoakConfig, units int, now time.Time, res *SoakResult) error {
	rnd := mrand.New(mrand.NewPCG(42, 42))
	randomUnit := func() int64 { return rnd.Int64N(int64(units)) }
	// A cursor deep in the plans, for "the next page" reads.
	deep := func() string {
		u := randomUnit() &^ 1
		p, err := s.GetPlan(ctx, fmt.Sprintf("pl-%09d", u))
		if err != nil {
			return ""
		}
		return airlock.PlanCursor(p)
	}
	day := now.Add(-time.Duration(rnd.IntN(48)) * time.Hour).Truncate(24 * time.Hour)
	pages := []struct {
		name string
		read func() error
	}{
		{"plans_awaiting", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Status: airlock.PlanAwaitingApproval, Limit: 50})
			return err
		}},
		{"plans_awaiting_next", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Status: airlock.PlanAwaitingApproval, Limit: 50, After: deep()})
			return err
		}},
		{"history_newest", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Decided: true, Newest: true, Limit: 50})
			return err
		}},
		{"history_next", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Decided: true, Newest: true, Limit: 50, After: deep()})
			return err
		}},
		{"history_by_tool", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Tool: "approve", Decided: true, Newest: true, Limit: 50})
			return err
		}},
		{"history_by_approver", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{DecidedBy: fmt.Sprintf("approver-%d", rnd.IntN(5)), Decided: true, Newest: true, Limit: 50})
			return err
		}},
		{"history_by_status", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Status: airlock.PlanRejected, Newest: true, Limit: 50})
			return err
		}},
		{"history_by_date", func() error {
			_, err := s.ListPlans(ctx, airlock.PlanFilter{Since: day, Until: day.AddDate(0, 0, 1), Decided: true, Newest: true, Limit: 50})
			return err
		}},
		{"in_doubt", func() error {
			_, err := s.ListRecords(ctx, airlock.RecordFilter{State: airlock.StateInDoubt, Limit: 50})
			return err
		}},
		{"in_doubt_next", func() error {
			rec, err := s.Get(ctx, fmt.Sprintf("soak-%d", randomUnit()))
			if err != nil {
				return err
			}
			_, err = s.ListRecords(ctx, airlock.RecordFilter{State: airlock.StateInDoubt, Limit: 50, After: airlock.RecordCursor(rec)})
			return err
		}},
		{"audit_by_key", func() error {
			_, err := s.AuditTrail(ctx, airlock.AuditFilter{Key: fmt.Sprintf("soak-%d", randomUnit()), Limit: 100})
			return err
		}},
		{"plan_trail", func() error {
			u := randomUnit() &^ 1
			_, err := s.AuditTrail(ctx, airlock.AuditFilter{PlanID: fmt.Sprintf("pl-%09d", u), Key: fmt.Sprintf("plan-%d", u), Limit: 100})
			return err
		}},
		{"plan", func() error {
			_, err := s.GetPlan(ctx, fmt.Sprintf("pl-%09d", randomUnit()&^1))
			return err
		}},
		{"watch_figures_day", func() error {
			_, err := s.Figures(ctx, &airlock.FiguresParams{Since: now.Add(-24 * time.Hour), Until: now})
			return err
		}},
	}
	for _, p := range pages {
		times := make([]time.Duration, 0, cfg.Samples)
		for range cfg.Samples {
			t := time.Now()
			if err := p.read(); err != nil && airlock.ErrorCode(err) != airlock.CodeNotFound {
				return fmt.Errorf("page %s: %w", p.name, err)
			}
			times = append(times, time.Since(t))
		}
		slices.Sort(times)
		res.Pages[p.name] = Quantiles{P50: ms(times[len(times)/2]), P99: ms(times[len(times)*99/100]), Max: ms(times[len(times)-1])}
	}
	return nil
}

func secs(d time.Duration) float64 { return round1(d.Seconds()*1000) / 1000 }
func ms(d time.Duration) float64   { return round1(float64(d.Microseconds()) / 1000) }
func round1(x float64) float64     { return float64(int64(x*10+0.5)) / 10 }
