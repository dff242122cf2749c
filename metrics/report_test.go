package metrics_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/metrics"
)

func TestWarningsFireWhenTheyShould(t *testing.T) {
	t.Parallel()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	ctx := context.Background()
	now := time.Now()
	ev := func(kind, key string, args, result string) *airlock.AuditEvent {
		e := &airlock.AuditEvent{At: now, Kind: kind, RunID: "r1", Key: key, Tool: "add_note", Actor: "a"}
		if args != "" {
			e.Args = json.RawMessage(args)
		}
		if result != "" {
			e.Result = json.RawMessage(result)
		}
		return e
	}
	// Two calls, no repeats; the second call's claim lacks its arguments.
	if err := s.AppendAudit(ctx, []*airlock.AuditEvent{
		ev(airlock.EventClaimed, "k1", `{"record_id":"WD-1"}`, ""), ev(airlock.EventCompleted, "k1", "", `{"ok":true}`),
		ev(airlock.EventClaimed, "k2", "", ""), ev(airlock.EventCompleted, "k2", "", `{"ok":true}`),
	}); err != nil {
		t.Fatal(err)
	}
	r, err := metrics.Compute(ctx, s, &m.Catalog, time.Hour, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range r.Warnings {
		got[w.Tool+"/"+w.Figure] = w.Level
	}
	if got["add_note/repeats"] != "warning" {
		t.Errorf("zero repeats: no warning in %+v", r.Warnings)
	}
	if got["/audit_completeness"] != "error" || r.AuditCompleteness != 0.5 {
		t.Errorf("completeness %v, warnings %+v", r.AuditCompleteness, r.Warnings)
	}
}

func TestRisingRepeatsWarn(t *testing.T) {
	t.Parallel()
	m, _ := withdrawals.Manifest()
	s := openStore(t)
	ctx := context.Background()
	now := time.Now()
	var events []*airlock.AuditEvent
	add := func(at time.Time, n int) {
		for range n {
			events = append(events, &airlock.AuditEvent{At: at, Kind: airlock.EventRepeat, RunID: "r", Key: "k", Tool: "add_note", Actor: "a"})
		}
	}
	add(now.Add(-90*time.Minute), 5) // the previous hour
	add(now.Add(-10*time.Minute), 30)
	if err := s.AppendAudit(ctx, events); err != nil {
		t.Fatal(err)
	}
	r, err := metrics.Compute(ctx, s, &m.Catalog, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range r.Warnings {
		if w.Figure == "repeats_rising" && w.Tool == "add_note" {
			return
		}
	}
	t.Fatalf("no rising-repeats warning: %+v", r.Warnings)
}

// Events given up (an events_lost event in the log) count against the
// audit completeness and have a warning of their own.
func TestLostEventsCountAgainstCompleteness(t *testing.T) {
	t.Parallel()
	m, _ := withdrawals.Manifest()
	s := openStore(t)
	ctx := context.Background()
	now := time.Now()
	var events []*airlock.AuditEvent
	for i := range 3 {
		key := "k" + string(rune('0'+i))
		events = append(events,
			&airlock.AuditEvent{At: now, Kind: airlock.EventClaimed, RunID: "r", Key: key, Tool: "add_note", Actor: "a", Args: json.RawMessage(`{}`)},
			&airlock.AuditEvent{At: now, Kind: airlock.EventCompleted, RunID: "r", Key: key, Tool: "add_note", Actor: "a", Result: json.RawMessage(`{}`), Outcome: airlock.OutcomeTextSucceeded})
	}
	events = append(events, &airlock.AuditEvent{At: now, Kind: airlock.EventLost, Actor: airlock.ActorSystem, Result: json.RawMessage(`{"lost":1}`), DurationUS: 1})
	if err := s.AppendAudit(ctx, events); err != nil {
		t.Fatal(err)
	}
	r, err := metrics.Compute(ctx, s, &m.Catalog, time.Hour, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lostWarned := false
	for _, w := range r.Warnings {
		lostWarned = lostWarned || w.Figure == "audit_events_lost"
	}
	if r.AuditEventsLost != 1 || r.AuditCompleteness != 0.75 || !lostWarned {
		t.Fatalf("lost %d, completeness %v, warnings %+v: want 1 lost, 75 %%, a warning", r.AuditEventsLost, r.AuditCompleteness, r.Warnings)
	}
}
