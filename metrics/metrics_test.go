package metrics_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/store/sqlite"
)

// The age of the oldest plan waiting for a person is read from the store
// at each scrape, so it shows while nobody decides, on every replica alike;
// the report gives it too, with a warning past half of expires_after.
func TestOldestWaitFromTheStore(t *testing.T) {
	t.Parallel()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	for i, age := range []time.Duration{13 * time.Hour, 2 * time.Hour} {
		args := json.RawMessage(`{"record_id":"WD-` + string(rune('A'+i)) + `"}`)
		created := now.Add(-age)
		if _, _, err := s.CreatePlan(ctx, &airlock.Plan{ID: "pl_" + string(rune('a'+i)), Key: "k" + string(rune('a'+i)), Tool: "approve_withdrawal",
			Status: airlock.PlanAwaitingApproval, Decision: "human", Args: args, CreatedAt: created, UpdatedAt: created, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, &metrics.Config{
		Waiting: func(ctx context.Context) ([]airlock.WaitingPlans, error) { return plan.WaitingByTool(ctx, s, m) },
		Clock:   clockwork.NewFakeClockAt(now),
	}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP airlock_approval_oldest_wait_seconds How long the oldest plan waiting for a person has waited (0: none waits).
# TYPE airlock_approval_oldest_wait_seconds gauge
airlock_approval_oldest_wait_seconds{tool="approve_withdrawal"} 46800
# HELP airlock_approval_queue_depth Plans waiting for a person.
# TYPE airlock_approval_queue_depth gauge
airlock_approval_queue_depth{tool="approve_withdrawal"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "airlock_approval_oldest_wait_seconds", "airlock_approval_queue_depth"); err != nil {
		t.Fatal(err)
	}
	rep, err := metrics.Compute(ctx, s, &m.Catalog, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	var tr *metrics.ToolReport
	for i := range rep.Tools {
		if rep.Tools[i].Tool == "approve_withdrawal" {
			tr = &rep.Tools[i]
		}
	}
	if tr == nil || tr.QueueDepth != 2 || tr.OldestWaitS != 46800 {
		t.Fatalf("report: %+v", tr)
	}
	found := false
	for _, w := range rep.Warnings {
		found = found || (w.Figure == "approval_oldest_wait" && w.Tool == "approve_withdrawal")
	}
	if !found {
		t.Fatalf("no warning for a plan waiting 13h of its 24h: %+v", rep.Warnings)
	}
}

// A record the reaper marks in doubt after a crash (no answer counted it)
// shows in airlock_records_in_doubt, read from the store at each scrape,
// and in the report with an error-level warning.
func TestRecordsInDoubtFromTheStore(t *testing.T) {
	t.Parallel()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	ctx := context.Background()
	now := time.Now()
	if _, _, err := s.Claim(ctx, &airlock.Claim{Key: "k-crashed", Tool: "add_note", RunID: "r", WindowID: "w",
		Args: json.RawMessage(`{"record_id":"WD-1"}`), ArgsHash: "h", Owner: "dead-process", Now: now.Add(-time.Minute),
		LeaseUntil: now.Add(-30 * time.Second), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ExpireLease(ctx, &airlock.ExpireLeaseParams{Key: "k-crashed", Now: now, Note: "lease expired: the process stopped"}); err != nil || !ok {
		t.Fatalf("reaping: %v %v", ok, err)
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, &metrics.Config{InDoubt: s.InDoubtByTool}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP airlock_records_in_doubt Records whose outcome is unknown now (read from the store: every replica reports the same).
# TYPE airlock_records_in_doubt gauge
airlock_records_in_doubt{tool="add_note"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "airlock_records_in_doubt"); err != nil {
		t.Fatal(err)
	}
	r, err := metrics.Compute(ctx, s, &m.Catalog, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, w := range r.Warnings {
		warned = warned || (w.Figure == "in_doubt" && w.Tool == "add_note" && w.Level == "error")
	}
	for _, tr := range r.Tools {
		if tr.Tool == "add_note" && (tr.InDoubt != 1 || !warned) {
			t.Fatalf("report: in doubt %d, warnings %+v", tr.InDoubt, r.Warnings)
		}
	}
}

// openStore is a migrated SQLite store for the test.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// A tool nobody configured is named by the caller, so its name is no label
// value: a thousand made-up names are one series, and a configured tool
// keeps its own.
func TestCallsToUnknownToolsAreOneSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	unknown := &airlock.Error{Code: airlock.CodeUnknownTool, Message: "no such tool"}
	for i := range 1000 {
		m.Call("made_up_"+strconv.Itoa(i), metrics.UnknownKind, nil, unknown)
	}
	m.Call("add_note", airlock.KindWrite, &airlock.Answer{Status: airlock.StatusSucceeded}, nil)
	want := `
# HELP airlock_tool_calls_total Tool calls by tool, kind and outcome (succeeded, failed, in_progress, in_doubt, planned, refused, error).
# TYPE airlock_tool_calls_total counter
airlock_tool_calls_total{kind="write",outcome="succeeded",tool="add_note"} 1
airlock_tool_calls_total{kind="unknown",outcome="refused",tool="_unknown"} 1000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "airlock_tool_calls_total"); err != nil {
		t.Fatal(err)
	}
}
