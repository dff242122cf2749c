package airlock

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
)

// Outcomes as completion events carry them (AuditEvent.Outcome): the
// report counts them from this field, never from message text.
const (
	OutcomeTextSucceeded = "succeeded"
	OutcomeTextFailed    = "failed"
	OutcomeTextUnknown   = "unknown" // in doubt: the call may or may not have happened
)

// CompletionOutcome is the outcome a record's final state records.
func CompletionOutcome(st State) string {
	switch st {
	case StateSucceeded:
		return OutcomeTextSucceeded
	case StateFailed:
		return OutcomeTextFailed
	}
	return OutcomeTextUnknown
}

// Figures of the rollup, summed per tool and minute by the sealer as it
// seals (every event is sealed once, by one sealer), so that the report
// reads a few thousand rows for a day instead of every event.
const (
	FigureCalls      = "calls"      // claims: new side-effecting calls
	FigureRepeats    = "repeats"    // repeats and conflicts answered from the first result
	FigureSucceeded  = "succeeded"  // completions by outcome
	FigureFailed     = "failed"     //
	FigureUnknown    = "unknown"    //
	FigureTimeouts   = "timeouts"   // completions whose last attempt ran into the tool's timeout
	FigurePlans      = "plans"      // plans made
	FigureAuto       = "auto"       // plans approved by a rule
	FigureDecided    = "decided"    // plans decided by a person
	FigureIncomplete = "incomplete" // claim or completion events missing run id, key, arguments or result
	FigureLost       = "lost"       // buffered events given up (events_lost)
	FigureDuration   = "duration_b" // + bucket: completions by duration (claim to completion)
	FigureWait       = "wait_b"     // + bucket: decisions by a person by their wait since the plan
	rollupBucketStep = 8            // buckets per doubling: an upper bound at most 9 % above the value
)

// RollupRow is one figure of one tool in one minute (Unix minutes).
type RollupRow struct {
	Minute int64
	Tool   string
	Figure string
	Value  int64
}

// RunCalls counts one run's new calls of one tool; Minute is the minute of
// the run's first call of the tool (rows add up across seals).
type RunCalls struct {
	Tool   string
	RunID  string
	Minute int64
	Calls  int64
}

// Figures are the rollup summed over a period.
type Figures struct {
	// ByTool holds each tool's figures (FigureCalls, …, and the bucket
	// figures FigureDuration+"N", FigureWait+"N").
	ByTool map[string]map[string]int64
	// RunsByCalls holds, per tool, how many runs (whose first call of the
	// tool is in the period) made each number of calls.
	RunsByCalls map[string]map[int64]int64
}

// FigureStore reads the rollup; drivers fill it as they seal.
type FigureStore interface {
	// Figures sums the rollup over the whole minutes in [Since, Until).
	Figures(ctx context.Context, p *FiguresParams) (*Figures, error)
	// PurgeFigures deletes up to Limit rollup rows (and runs' call counts)
	// of minutes before Before's, oldest first, and returns how many.
	PurgeFigures(ctx context.Context, p *PurgeFiguresParams) (int, error)
}

// FiguresParams are the period Figures sums: named, so that its two
// instants cannot be passed in each other's place.
type FiguresParams struct {
	Since, Until time.Time
}

// PurgeFiguresParams are what PurgeFigures deletes: rollup rows of minutes
// before Before, at most Limit of them.
type PurgeFiguresParams struct {
	Before time.Time
	Limit  int
}

// RollupMinute is the rollup minute of t.
func RollupMinute(t time.Time) int64 { return t.Truncate(time.Minute).Unix() / 60 }

// DurationBucket is the rollup bucket of a duration: 8 per doubling from
// one microsecond; 0 holds everything under it.
func DurationBucket(d time.Duration) int {
	us := d.Microseconds()
	if us < 1 {
		return 0
	}
	return int(math.Floor(math.Log2(float64(us))*rollupBucketStep)) + 1
}

// BucketUpper is the upper bound of a duration bucket: what the report
// gives as a quantile that falls in it.
func BucketUpper(b int) time.Duration {
	if b <= 0 {
		return time.Microsecond
	}
	return time.Duration(math.Exp2(float64(b)/rollupBucketStep) * float64(time.Microsecond))
}

// BucketOf reads the bucket number of a bucket figure with the prefix;
// ok false when the figure is no such figure.
func BucketOf(figure, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(figure, prefix)
	if !ok {
		return 0, false
	}
	b, err := strconv.Atoi(rest)
	return b, err == nil
}

// RollupHour is the Unix hour of a Unix minute. The rollup is kept at two
// resolutions: per minute, and per hour for the whole hours of a period,
// so that a day's figures read about 24 rows a figure rather than 1,440
// (and calls per run a histogram rather than every run).
func RollupHour(minute int64) int64 {
	if minute < 0 {
		return (minute - 59) / 60
	}
	return minute / 60
}

// RollupSpans splits a period into the whole hours inside it and the
// minutes at its edges, each [from, to).
type RollupSpans struct {
	Hours   [2]int64    // Unix hours; empty when from == to
	Minutes [2][2]int64 // Unix minutes before the first whole hour and after the last
}

// SpansOf is the period [since, until) in whole minutes, split.
func SpansOf(since, until time.Time) RollupSpans {
	from, to := RollupMinute(since), RollupMinute(until)
	var s RollupSpans
	if to <= from {
		s.Minutes[0] = [2]int64{from, from}
		return s
	}
	hf := RollupHour(from + 59) // the first hour that starts at or after from
	ht := RollupHour(to)        // the hour to ends in
	if hf >= ht {
		s.Minutes[0] = [2]int64{from, to}
		return s
	}
	s.Hours = [2]int64{hf, ht}
	s.Minutes[0] = [2]int64{from, hf * 60}
	s.Minutes[1] = [2]int64{ht * 60, to}
	return s
}
