package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/store/rules"
)

// RunFigures checks the rollup the sealer keeps, and the report computed
// from it, against counts made independently from the events themselves.
func RunFigures(t *testing.T, newStore NewStore) {
	t.Run("RollupCountsWhatWasSealed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
		events, want := mixedEvents(now, 3000, 7)
		// Written in several appends and sealed in small pages, so that
		// the rollup adds up rows across seals.
		for chunk := range slices.Chunk(events, 700) {
			must(t, s.AppendAudit(ctx, chunk))
			for {
				n, err := s.SealAudit(ctx, 250)
				must(t, err)
				if n == 0 {
					break
				}
			}
		}
		got, err := s.Figures(ctx, &airlock.FiguresParams{Since: now.Add(-24 * time.Hour), Until: now.Add(time.Minute)})
		must(t, err)
		for tool, figures := range want.byTool {
			for figure, n := range figures {
				if got.ByTool[tool][figure] != n {
					t.Errorf("%s %s: rollup %d, counted %d", tool, figure, got.ByTool[tool][figure], n)
				}
			}
			for figure, n := range got.ByTool[tool] {
				if figures[figure] != n {
					t.Errorf("%s %s: rollup %d, counted %d", tool, figure, n, figures[figure])
				}
			}
		}
		for tool, runs := range want.runsByCalls {
			if fmt.Sprint(got.RunsByCalls[tool]) != fmt.Sprint(runs) {
				t.Errorf("%s runs by calls: rollup %v, counted %v", tool, got.RunsByCalls[tool], runs)
			}
		}
		// A period that ends before the events holds none of them.
		empty, err := s.Figures(ctx, &airlock.FiguresParams{Since: now.Add(-72 * time.Hour), Until: now.Add(-48 * time.Hour)})
		must(t, err)
		if len(empty.ByTool) != 0 || len(empty.RunsByCalls) != 0 {
			t.Errorf("an empty period: %+v", empty)
		}
	})

	t.Run("AnyPeriodSumsItsMinutes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Hour).Add(17*time.Minute + 30*time.Second)
		events, _ := mixedEvents(now, 2000, 5)
		must(t, s.AppendAudit(ctx, events))
		for {
			n, err := s.SealAudit(ctx, 500)
			must(t, err)
			if n == 0 {
				break
			}
		}
		// The expected figures fold the events per minute, then sum the
		// minutes of the period: what the hour rows must agree with.
		rows, runs := rules.RollUp(events)
		for _, p := range []struct {
			name         string
			since, until time.Time
		}{
			{"whole hours", now.Truncate(time.Hour).Add(-20 * time.Hour), now.Truncate(time.Hour).Add(-2 * time.Hour)},
			{"ragged edges", now.Add(-20*time.Hour - 13*time.Minute), now.Add(-3*time.Hour + 41*time.Minute)},
			{"inside one hour", now.Add(-5*time.Hour + 3*time.Minute), now.Add(-5*time.Hour + 29*time.Minute)},
			{"across one boundary", now.Add(-5 * time.Hour), now.Add(-4*time.Hour + 30*time.Minute)},
			{"two days", now.Add(-48 * time.Hour), now.Add(time.Minute)},
		} {
			from, to := airlock.RollupMinute(p.since), airlock.RollupMinute(p.until)
			want := map[string]map[string]int64{}
			for _, r := range rows {
				if r.Minute < from || r.Minute >= to {
					continue
				}
				if want[r.Tool] == nil {
					want[r.Tool] = map[string]int64{}
				}
				want[r.Tool][r.Figure] += r.Value
			}
			wantRuns := map[string]map[int64]int64{}
			for _, r := range runs {
				if r.Minute < from || r.Minute >= to {
					continue
				}
				if wantRuns[r.Tool] == nil {
					wantRuns[r.Tool] = map[int64]int64{}
				}
				wantRuns[r.Tool][r.Calls]++
			}
			got, err := s.Figures(ctx, &airlock.FiguresParams{Since: p.since, Until: p.until})
			must(t, err)
			if fmt.Sprint(got.ByTool) != fmt.Sprint(want) {
				t.Errorf("%s: figures\n%v\nwant\n%v", p.name, got.ByTool, want)
			}
			if fmt.Sprint(got.RunsByCalls) != fmt.Sprint(wantRuns) {
				t.Errorf("%s: runs by calls\n%v\nwant\n%v", p.name, got.RunsByCalls, wantRuns)
			}
		}
	})

	t.Run("ReportMatchesAnIndependentCount", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
		events, _ := mixedEvents(now, 2000, 11)
		must(t, s.AppendAudit(ctx, events))
		m := &airlock.Catalog{Tools: []*airlock.Tool{
			{Name: "write_a", Kind: airlock.KindWrite, Timeout: &airlock.Duration{Duration: 2 * time.Second}},
			{Name: "write_b", Kind: airlock.KindWrite},
		}}
		r, err := metrics.Compute(ctx, s, m, 24*time.Hour, now)
		must(t, err)
		// The independent count: straight over the events of the period.
		since := now.Add(-24 * time.Hour).Truncate(time.Minute)
		type count struct {
			calls, repeats, timeouts int
			durations                []float64
			runs                     map[string]int
		}
		by := map[string]*count{}
		firstOfRun := map[string]time.Time{}
		callsOfRun := map[string]int{}
		for _, e := range events {
			if e.Kind == airlock.EventClaimed {
				k := e.Tool + " " + e.RunID
				if f, ok := firstOfRun[k]; !ok || e.At.Before(f) {
					firstOfRun[k] = e.At
				}
				callsOfRun[k]++
			}
		}
		for _, e := range events {
			if e.At.Before(since) {
				continue
			}
			c := by[e.Tool]
			if c == nil {
				c = &count{runs: map[string]int{}}
				by[e.Tool] = c
			}
			switch e.Kind {
			case airlock.EventClaimed:
				c.calls++
				if k := e.Tool + " " + e.RunID; !firstOfRun[k].Before(since) {
					c.runs[e.RunID] = callsOfRun[k]
				}
			case airlock.EventRepeat, airlock.EventConflict:
				c.repeats++
			case airlock.EventCompleted, airlock.EventFailed, airlock.EventInDoubt:
				if e.TimedOut {
					c.timeouts++
				}
				c.durations = append(c.durations, float64(e.DurationUS)/1e6)
			}
		}
		for _, tr := range r.Tools {
			c := by[tr.Tool]
			if tr.Calls != c.calls || tr.Repeats != c.repeats || tr.Timeouts != c.timeouts {
				t.Errorf("%s: report calls %d repeats %d timeouts %d; counted %d %d %d", tr.Tool, tr.Calls, tr.Repeats, tr.Timeouts, c.calls, c.repeats, c.timeouts)
			}
			var perRun []float64
			most := 0
			for _, n := range c.runs {
				perRun = append(perRun, float64(n))
				most = max(most, n)
			}
			if tr.CallsPerRunMax != most || tr.CallsPerRunP50 != exactQuantile(perRun, 0.5) {
				t.Errorf("%s calls per run: report p50 %v max %d; counted %v %d", tr.Tool, tr.CallsPerRunP50, tr.CallsPerRunMax, exactQuantile(perRun, 0.5), most)
			}
			// Durations are bucketed: the report's quantile is the bucket's
			// upper bound, never below the true one and at most 9 % above.
			for _, q := range []struct {
				got, p float64
			}{{tr.DurationP50s, 0.5}, {tr.DurationP99s, 0.99}} {
				exact := exactQuantile(c.durations, q.p)
				if q.got < exact-0.001 || q.got > exact*1.0906+0.001 {
					t.Errorf("%s p%v duration: report %v, exact %v", tr.Tool, q.p*100, q.got, exact)
				}
			}
		}
	})
}

type counted struct {
	byTool      map[string]map[string]int64
	runsByCalls map[string]map[int64]int64
}

// mixedEvents makes n calls' worth of events over the last day and the day
// before (which the figures of the last day must leave out), with
// outcomes, timeouts, durations, repeats, plans and decisions, and counts
// the last day's figures the plain way.
func mixedEvents(now time.Time, n int, seed uint64) ([]*airlock.AuditEvent, counted) {
	rnd := rand.New(rand.NewPCG(seed, seed))
	c := counted{byTool: map[string]map[string]int64{}, runsByCalls: map[string]map[int64]int64{}}
	runCalls := map[[2]string]int64{}
	since := now.Add(-24 * time.Hour).Truncate(time.Minute)
	bump := func(e *airlock.AuditEvent, figure string) {
		if e.At.Before(since) {
			return
		}
		if c.byTool[e.Tool] == nil {
			c.byTool[e.Tool] = map[string]int64{}
		}
		c.byTool[e.Tool][figure]++
	}
	firstOfRun := map[[2]string]time.Time{}
	var events []*airlock.AuditEvent
	for i := range n {
		at := now.Add(-time.Duration(rnd.Int64N(int64(47 * time.Hour))))
		tool := []string{"write_a", "write_b"}[rnd.IntN(2)]
		run := fmt.Sprintf("run-%d", rnd.IntN(n/5))
		key := fmt.Sprintf("k-%d", i)
		claim := &airlock.AuditEvent{At: at, Kind: airlock.EventClaimed, RunID: run, Key: key, Tool: tool, Args: json.RawMessage(`{"id":1}`), Actor: "agent"}
		if rnd.IntN(50) == 0 {
			claim.Args = nil // an incomplete claim
		}
		events = append(events, claim)
		bump(claim, airlock.FigureCalls)
		if claim.Args == nil {
			bump(claim, airlock.FigureIncomplete)
		}
		k := [2]string{tool, run}
		if f, ok := firstOfRun[k]; !ok || at.Before(f) {
			firstOfRun[k] = at
		}
		runCalls[k]++
		took := time.Duration(rnd.ExpFloat64() * float64(300*time.Millisecond))
		done := &airlock.AuditEvent{At: at.Add(took), Key: key, Tool: tool, RunID: run, Actor: "agent", DurationUS: took.Microseconds()}
		switch x := rnd.IntN(20); {
		case x < 16:
			done.Kind, done.Outcome, done.Result = airlock.EventCompleted, airlock.OutcomeTextSucceeded, json.RawMessage(`{"ok":true}`)
		case x < 18:
			done.Kind, done.Outcome, done.Result = airlock.EventFailed, airlock.OutcomeTextFailed, json.RawMessage(`{"ok":false}`)
		default:
			done.Kind, done.Outcome, done.Error, done.TimedOut = airlock.EventInDoubt, airlock.OutcomeTextUnknown, "outcome unknown", true
		}
		done.At = at // in the claim's minute, so that both fall in one period
		events = append(events, done)
		bump(done, done.Outcome)
		if done.TimedOut {
			bump(done, airlock.FigureTimeouts)
		}
		if done.DurationUS > 0 {
			bump(done, airlock.FigureDuration+fmt.Sprint(airlock.DurationBucket(took)))
		}
		for range rnd.IntN(3) {
			rep := &airlock.AuditEvent{At: at, Kind: airlock.EventRepeat, RunID: run, Key: key, Tool: tool, Actor: "agent"}
			events = append(events, rep)
			bump(rep, airlock.FigureRepeats)
		}
		if rnd.IntN(10) == 0 {
			plan := fmt.Sprintf("pl-%d", i)
			p := &airlock.AuditEvent{At: at, Kind: airlock.EventPlanned, Key: "plan-" + key, Tool: tool, PlanID: plan, Actor: airlock.ActorSystem}
			events = append(events, p)
			bump(p, airlock.FigurePlans)
			d := &airlock.AuditEvent{At: at, Kind: airlock.EventDecided, Key: p.Key, Tool: tool, PlanID: plan, Actor: airlock.ActorSystem}
			if rnd.IntN(2) == 0 {
				d.Actor, d.DurationUS = "alice", rnd.Int64N(int64(time.Hour/time.Microsecond))+1
			}
			events = append(events, d)
			if d.Actor == airlock.ActorSystem {
				bump(d, airlock.FigureAuto)
			} else {
				bump(d, airlock.FigureDecided)
				bump(d, airlock.FigureWait+fmt.Sprint(airlock.DurationBucket(time.Duration(d.DurationUS)*time.Microsecond)))
			}
		}
	}
	// Calls per run: the runs whose first call of the tool is in the
	// period, with all their calls. The rollup dates a run by its first
	// sealed claim, so the events are written in time order.
	slices.SortStableFunc(events, func(a, b *airlock.AuditEvent) int { return a.At.Compare(b.At) })
	for k, calls := range runCalls {
		if firstOfRun[k].Before(since) {
			continue
		}
		if c.runsByCalls[k[0]] == nil {
			c.runsByCalls[k[0]] = map[int64]int64{}
		}
		c.runsByCalls[k[0]][calls]++
	}
	return events, c
}

func exactQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchReport times the report of a day over a store filled with calls
// spread over two days (AIRLOCK_BENCH_REPORT_CALLS, default 20,000; about
// four events each), sealed and rolled up. What the report reads grows
// with minutes and tools, not with events.
func BenchReport(b *testing.B, newStore NewStore) {
	n := 20000
	if v := os.Getenv("AIRLOCK_BENCH_REPORT_CALLS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	s := newStore(b)
	ctx := context.Background()
	now := time.Now().UTC()
	const perBatch = 50000
	for i := 0; i < n; i += perBatch {
		events, _ := mixedEvents(now, min(perBatch, n-i), uint64(i+1))
		for chunk := range slices.Chunk(events, 5000) {
			if err := s.AppendAudit(ctx, chunk); err != nil {
				b.Fatal(err)
			}
		}
		for {
			k, err := s.SealAudit(ctx, 20000)
			if err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				break
			}
		}
	}
	m := &airlock.Catalog{Tools: []*airlock.Tool{{Name: "write_a", Kind: airlock.KindWrite}, {Name: "write_b", Kind: airlock.KindWrite}}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := metrics.Compute(ctx, s, m, 24*time.Hour, now); err != nil {
			b.Fatal(err)
		}
	}
}
