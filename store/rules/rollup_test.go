package rules_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

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
	rows, runs := rules.RollUp(events)
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
		changes []rules.RunCallsChange
		want    []rules.RunHistRow
	}{
		{"a new run", []rules.RunCallsChange{{Tool: "a", Minute: 125, Before: 0, After: 1}},
			[]rules.RunHistRow{{Hour: 2, Tool: "a", Calls: 1, Runs: 1}}},
		{"a run grows", []rules.RunCallsChange{{Tool: "a", Minute: 125, Before: 1, After: 3}},
			[]rules.RunHistRow{{Hour: 2, Tool: "a", Calls: 1, Runs: -1}, {Hour: 2, Tool: "a", Calls: 3, Runs: 1}}},
		{"moves cancel out", []rules.RunCallsChange{
			{Tool: "a", Minute: 60, Before: 1, After: 2},
			{Tool: "a", Minute: 61, Before: 2, After: 3},
			{Tool: "b", Minute: 61, Before: 0, After: 2},
		}, []rules.RunHistRow{
			{Hour: 1, Tool: "a", Calls: 1, Runs: -1},
			{Hour: 1, Tool: "a", Calls: 3, Runs: 1},
			{Hour: 1, Tool: "b", Calls: 2, Runs: 1},
		}},
		{"nothing", nil, []rules.RunHistRow{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := rules.RunHistDelta(tc.changes)
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
	got := rules.ByHour([]airlock.RollupRow{
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
