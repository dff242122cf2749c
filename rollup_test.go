package airlock_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

func TestDurationBuckets(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 500 * time.Nanosecond, time.Microsecond, 3 * time.Microsecond, time.Millisecond,
		7 * time.Millisecond, 250 * time.Millisecond, time.Second, 29 * time.Second, 30 * time.Second, time.Hour, 48 * time.Hour} {
		b := airlock.DurationBucket(d)
		up := airlock.BucketUpper(b)
		// The upper bound is never below the duration and at most 9 % above
		// (the report's quantiles rest on this).
		if up < d.Truncate(time.Microsecond) || float64(up) > 1.0906*float64(max(d, time.Microsecond))+1 {
			t.Errorf("%v: bucket %d, upper %v", d, b, up)
		}
		if b > 0 && airlock.BucketUpper(b-1) > d {
			t.Errorf("%v: bucket %d is not the first whose upper bound holds it", d, b)
		}
	}
}

func FuzzDurationBucket(f *testing.F) {
	f.Add(int64(1500))
	f.Add(int64(0))
	f.Add(int64(1) << 40)
	f.Fuzz(func(t *testing.T, us int64) {
		if us < 0 || us > int64(1)<<50 {
			return
		}
		d := time.Duration(us) * time.Microsecond
		b := airlock.DurationBucket(d)
		if up := airlock.BucketUpper(b); up < d || float64(up) > 1.0906*float64(max(d, time.Microsecond))+1 {
			t.Fatalf("%v: bucket %d upper %v", d, b, up)
		}
	})
}

func TestRollUp(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 15, 30, 0, time.UTC)
	minute := airlock.RollupMinute(at)
	events := []*airlock.AuditEvent{
		{At: at, Kind: airlock.EventClaimed, RunID: "r", Key: "k1", Tool: "t", Args: []byte(`{}`)},
		{At: at, Kind: airlock.EventCompleted, RunID: "r", Key: "k1", Tool: "t", Result: []byte(`1`), Outcome: airlock.OutcomeTextSucceeded, DurationUS: 1000},
		{At: at, Kind: airlock.EventClaimed, RunID: "r", Key: "k2", Tool: "t"}, // no arguments: incomplete
		{At: at, Kind: airlock.EventInDoubt, RunID: "r", Key: "k2", Tool: "t", Error: "x", Outcome: airlock.OutcomeTextUnknown, TimedOut: true},
		{At: at.Add(time.Minute), Kind: airlock.EventRepeat, Key: "k1", Tool: "t"},
		{At: at, Kind: airlock.EventInDoubt, Key: "p", Tool: "t", PlanID: "pl_1"}, // a plan's status: not a call
		{At: at, Kind: airlock.EventPlanned, Key: "p", Tool: "t", PlanID: "pl_1"},
		{At: at, Kind: airlock.EventDecided, Key: "p", Tool: "t", PlanID: "pl_1", Actor: "alice", DurationUS: 2_000_000},
	}
	rows, runs := airlock.RollUp(events)
	got := map[[2]any]int64{}
	for _, r := range rows {
		got[[2]any{r.Minute, r.Figure}] += r.Value
	}
	want := map[[2]any]int64{
		{minute, airlock.FigureCalls}: 2, {minute, airlock.FigureSucceeded}: 1, {minute, airlock.FigureUnknown}: 1,
		{minute, airlock.FigureTimeouts}: 1, {minute, airlock.FigureIncomplete}: 1,
		{minute, airlock.FigureDuration + "80"}: 1, // 1 ms: 8·log2(1000) = 79.7
		{minute + 1, airlock.FigureRepeats}:     1, {minute, airlock.FigurePlans}: 1, {minute, airlock.FigureDecided}: 1,
		{minute, airlock.FigureWait + "168"}: 1, // 2 s: 8·log2(2e6) = 167.4
	}
	if len(got) != len(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(runs) != 1 || runs[0] != (airlock.RunCalls{Tool: "t", RunID: "r", Minute: minute, Calls: 2}) {
		t.Errorf("runs: %+v", runs)
	}
}
