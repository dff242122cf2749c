package rules

import (
	"strconv"
	"time"

	"github.com/airlockhq/airlock"
)

// RollUp sums sealed events into rollup rows and per-run call counts; the
// drivers add them to their tables in the sealing transaction.
func RollUp(events []*airlock.AuditEvent) ([]airlock.RollupRow, []airlock.RunCalls) {
	type cell struct {
		minute       int64
		tool, figure string
	}
	sums := map[cell]int64{}
	type run struct{ tool, run string }
	runs := map[run]*airlock.RunCalls{}
	var order []cell
	var runOrder []run
	add := func(e *airlock.AuditEvent, figure string) {
		c := cell{airlock.RollupMinute(e.At), e.Tool, figure}
		if _, ok := sums[c]; !ok {
			order = append(order, c)
		}
		sums[c]++
	}
	for _, e := range events {
		switch e.Kind {
		case airlock.EventClaimed:
			add(e, airlock.FigureCalls)
			if e.RunID == "" || e.Key == "" || len(e.Args) == 0 {
				add(e, airlock.FigureIncomplete)
			}
			if e.RunID != "" {
				k := run{e.Tool, e.RunID}
				if r := runs[k]; r != nil {
					r.Calls++
				} else {
					runs[k] = &airlock.RunCalls{Tool: e.Tool, RunID: e.RunID, Minute: airlock.RollupMinute(e.At), Calls: 1}
					runOrder = append(runOrder, k)
				}
			}
		case airlock.EventCompleted, airlock.EventFailed, airlock.EventInDoubt:
			if e.PlanID != "" {
				continue // a plan's own status event, not a call's completion
			}
			switch e.Outcome {
			case airlock.OutcomeTextSucceeded:
				add(e, airlock.FigureSucceeded)
			case airlock.OutcomeTextFailed:
				add(e, airlock.FigureFailed)
			case airlock.OutcomeTextUnknown:
				add(e, airlock.FigureUnknown)
			}
			if e.TimedOut {
				add(e, airlock.FigureTimeouts)
			}
			if e.DurationUS > 0 {
				add(e, bucketFigure(durationFigures, airlock.FigureDuration, e.DurationUS))
			}
			if e.RunID == "" || (len(e.Result) == 0 && e.Error == "") {
				add(e, airlock.FigureIncomplete)
			}
		case airlock.EventRepeat, airlock.EventConflict:
			add(e, airlock.FigureRepeats)
		case airlock.EventLost:
			c := cell{airlock.RollupMinute(e.At), e.Tool, airlock.FigureLost}
			if _, ok := sums[c]; !ok {
				order = append(order, c)
			}
			sums[c] += max(1, e.DurationUS)
		case airlock.EventPlanned:
			add(e, airlock.FigurePlans)
		case airlock.EventDecided:
			if e.Actor == airlock.ActorSystem {
				add(e, airlock.FigureAuto)
				continue
			}
			add(e, airlock.FigureDecided)
			add(e, bucketFigure(waitFigures, airlock.FigureWait, e.DurationUS))
		}
	}
	rows := make([]airlock.RollupRow, 0, len(order))
	for _, c := range order {
		rows = append(rows, airlock.RollupRow{Minute: c.minute, Tool: c.tool, Figure: c.figure, Value: sums[c]})
	}
	rc := make([]airlock.RunCalls, 0, len(runOrder))
	for _, k := range runOrder {
		rc = append(rc, *runs[k])
	}
	return rows, rc
}

// The bucket figures' names, made once: every completion adds to one.
// A bucket is at most 8 × 64 (a doubling each of a duration's bits).
var durationFigures, waitFigures = bucketFigures(airlock.FigureDuration), bucketFigures(airlock.FigureWait)

func bucketFigures(prefix string) []string {
	names := make([]string, 8*64+2)
	for b := range names {
		names[b] = prefix + strconv.Itoa(b)
	}
	return names
}

// bucketFigure is the figure of the bucket of a duration in microseconds.
func bucketFigure(names []string, prefix string, us int64) string {
	b := airlock.DurationBucket(time.Duration(us) * time.Microsecond)
	if b >= 0 && b < len(names) {
		return names[b]
	}
	return prefix + strconv.Itoa(b)
}

// ByHour sums minute rows per hour; the rows' Minute holds the Unix hour.
func ByHour(rows []airlock.RollupRow) []airlock.RollupRow {
	type cell struct {
		hour         int64
		tool, figure string
	}
	sums := map[cell]int64{}
	var order []cell
	for _, r := range rows {
		c := cell{airlock.RollupHour(r.Minute), r.Tool, r.Figure}
		if _, ok := sums[c]; !ok {
			order = append(order, c)
		}
		sums[c] += r.Value
	}
	out := make([]airlock.RollupRow, len(order))
	for i, c := range order {
		out[i] = airlock.RollupRow{Minute: c.hour, Tool: c.tool, Figure: c.figure, Value: sums[c]}
	}
	return out
}

// RunHistRow changes the histogram of calls per run: Runs runs of Tool
// whose first call was in Hour (Unix hours) more (or fewer, when negative)
// have Calls calls.
type RunHistRow struct {
	Hour  int64
	Tool  string
	Calls int64
	Runs  int64
}

// RunHistDelta is how the histogram changes when runs' counts grow: for
// each run, its first minute and its count before (0: new) and after.
func RunHistDelta(changes []RunCallsChange) []RunHistRow {
	type cell struct {
		hour  int64
		tool  string
		calls int64
	}
	sums := map[cell]int64{}
	var order []cell
	add := func(c cell, n int64) {
		if _, ok := sums[c]; !ok {
			order = append(order, c)
		}
		sums[c] += n
	}
	for _, ch := range changes {
		h := airlock.RollupHour(ch.Minute)
		if ch.Before > 0 {
			add(cell{h, ch.Tool, ch.Before}, -1)
		}
		add(cell{h, ch.Tool, ch.After}, 1)
	}
	out := make([]RunHistRow, 0, len(order))
	for _, c := range order {
		if n := sums[c]; n != 0 {
			out = append(out, RunHistRow{Hour: c.hour, Tool: c.tool, Calls: c.calls, Runs: n})
		}
	}
	return out
}

// RunCallsChange is one run's count of calls before and after a seal.
type RunCallsChange struct {
	Tool          string
	Minute        int64 // the run's first minute
	Before, After int64
}
