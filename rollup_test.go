package airlock_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"pgregory.net/rapid"
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

func TestSpansOf(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h := func(s string) int64 { return RollupHourOf(at(s)) }
	m := func(s string) int64 { return airlock.RollupMinute(at(s)) }
	for _, tc := range []struct {
		name         string
		since, until string
		hours        [2]int64
		minutes      [2][2]int64
	}{
		{"a whole day", "2026-12-03T00:00:00Z", "2026-12-04T00:00:00Z",
			[2]int64{h("2026-12-03T00:00:00Z"), h("2026-12-04T00:00:00Z")},
			[2][2]int64{{m("2026-12-03T00:00:00Z"), m("2026-12-03T00:00:00Z")}, {m("2026-12-04T00:00:00Z"), m("2026-12-04T00:00:00Z")}}},
		{"ragged edges", "2026-12-03T10:17:00Z", "2026-12-03T13:05:00Z",
			[2]int64{h("2026-12-03T11:00:00Z"), h("2026-12-03T13:00:00Z")},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T11:00:00Z")}, {m("2026-12-03T13:00:00Z"), m("2026-12-03T13:05:00Z")}}},
		{"inside one hour", "2026-12-03T10:17:00Z", "2026-12-03T10:45:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:45:00Z")}, {}}},
		{"across one hour boundary, no whole hour", "2026-12-03T10:17:00Z", "2026-12-03T11:45:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T11:45:00Z")}, {}}},
		{"empty", "2026-12-03T10:17:00Z", "2026-12-03T10:17:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:17:00Z")}, {}}},
		{"backwards", "2026-12-03T10:17:00Z", "2026-12-03T09:00:00Z",
			[2]int64{},
			[2][2]int64{{m("2026-12-03T10:17:00Z"), m("2026-12-03T10:17:00Z")}, {}}},
		{"before 1970", "1969-12-31T22:30:00Z", "1970-01-01T01:30:00Z",
			[2]int64{-1, 1},
			[2][2]int64{{-90, -60}, {60, 90}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := airlock.SpansOf(at(tc.since), at(tc.until))
			if s.Hours != tc.hours || s.Minutes != tc.minutes {
				t.Errorf("SpansOf = %+v, want hours %v minutes %v", s, tc.hours, tc.minutes)
			}
		})
	}
}

// RollupHourOf is the Unix hour of t.
func RollupHourOf(t time.Time) int64 { return airlock.RollupHour(airlock.RollupMinute(t)) }

// The spans cover the period's minutes exactly once: every minute in
// [since, until) is in one span, none outside it is in any.
func TestSpansOfCoversEachMinuteOnce(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		from := rapid.Int64Range(-3000, 3000).Draw(t, "from")
		to := rapid.Int64Range(-3000, 3000).Draw(t, "to")
		s := airlock.SpansOf(time.Unix(from*60, 0), time.Unix(to*60, 0))
		for minute := int64(-3100); minute < 3100; minute++ {
			n := 0
			if s.Hours[0] <= airlock.RollupHour(minute) && airlock.RollupHour(minute) < s.Hours[1] {
				n++
			}
			for _, span := range s.Minutes {
				if span[0] <= minute && minute < span[1] {
					n++
				}
			}
			want := 0
			if from <= minute && minute < to {
				want = 1
			}
			if n != want {
				t.Fatalf("minute %d counted %d times, want %d (spans %+v)", minute, n, want, s)
			}
		}
	})
}

func TestRollupHour(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ minute, hour int64 }{
		{0, 0}, {59, 0}, {60, 1}, {-1, -1}, {-60, -1}, {-61, -2}, {29_500_000, 491_666},
	} {
		if got := airlock.RollupHour(tc.minute); got != tc.hour {
			t.Errorf("RollupHour(%d) = %d, want %d", tc.minute, got, tc.hour)
		}
	}
}

func TestRunHistDelta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		changes []airlock.RunCallsChange
		want    []airlock.RunHistRow
	}{
		{"a new run", []airlock.RunCallsChange{{Tool: "a", Minute: 125, Before: 0, After: 1}},
			[]airlock.RunHistRow{{Hour: 2, Tool: "a", Calls: 1, Runs: 1}}},
		{"a run grows", []airlock.RunCallsChange{{Tool: "a", Minute: 125, Before: 1, After: 3}},
			[]airlock.RunHistRow{{Hour: 2, Tool: "a", Calls: 1, Runs: -1}, {Hour: 2, Tool: "a", Calls: 3, Runs: 1}}},
		{"moves cancel out", []airlock.RunCallsChange{
			{Tool: "a", Minute: 60, Before: 1, After: 2},
			{Tool: "a", Minute: 61, Before: 2, After: 3},
			{Tool: "b", Minute: 61, Before: 0, After: 2},
		}, []airlock.RunHistRow{
			{Hour: 1, Tool: "a", Calls: 1, Runs: -1},
			{Hour: 1, Tool: "a", Calls: 3, Runs: 1},
			{Hour: 1, Tool: "b", Calls: 2, Runs: 1},
		}},
		{"nothing", nil, []airlock.RunHistRow{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := airlock.RunHistDelta(tc.changes)
			if len(got) != len(tc.want) {
				t.Fatalf("RunHistDelta = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("row %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestByHour(t *testing.T) {
	t.Parallel()
	got := airlock.ByHour([]airlock.RollupRow{
		{Minute: 60, Tool: "a", Figure: "calls", Value: 2},
		{Minute: 119, Tool: "a", Figure: "calls", Value: 3},
		{Minute: 120, Tool: "a", Figure: "calls", Value: 1},
		{Minute: 61, Tool: "b", Figure: "calls", Value: 4},
	})
	want := []airlock.RollupRow{
		{Minute: 1, Tool: "a", Figure: "calls", Value: 5},
		{Minute: 2, Tool: "a", Figure: "calls", Value: 1},
		{Minute: 1, Tool: "b", Figure: "calls", Value: 4},
	}
	if len(got) != len(want) {
		t.Fatalf("ByHour = %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
