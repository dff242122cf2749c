package gateway_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

const testManifest = `version: 1
calendar: {timezone: UTC}
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
    upstream: {name: svc, path: /get}
  - name: note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    timeout: 100ms
    max_calls_per_run: 3
    upstream: {name: svc, path: /note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "First result."}
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /pay}
    answers: {undo: "No.", approver: "Rule or a person.", on_repeat: "First."}
    approval:
      lookup: {tool: lookup, args: {record_id: "args.record_id"}}
      rules:
        - {name: small, when: "facts.amount < 100", decide: auto}
        - {name: rest, when: "true", decide: human}
`

// A scripted workload with known repeats, a timeout, a budget refusal and
// plans; each figure must equal the expected number.
func TestMetricsCountTheWorkload(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(testManifest), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	met, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	guard := guard.New(s, &guard.Config{Observer: met})
	defer guard.Close()
	svc := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		var in struct {
			RecordID string `json:"record_id"`
		}
		_ = json.Unmarshal(req.Args, &in)
		switch {
		case req.Tool.Name == "lookup":
			amount := 50
			if strings.HasPrefix(in.RecordID, "BIG") {
				amount = 5000
			}
			b, _ := json.Marshal(map[string]any{"amount": amount})
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: b}
		case in.RecordID == "SLOW":
			<-ctx.Done() // runs into the 100ms timeout
			return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: ctx.Err()}
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}
	})
	callers := func(*airlock.Tool) (upstream.Caller, bool) { return svc, true }
	plans, err := plan.New(plan.Config{Manifest: m, Store: s, Guard: guard, Callers: callers, Observer: met})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Manifest: m, Guard: guard, Store: s, Upstreams: map[string]upstream.Caller{"svc": svc}, Plans: plans, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.CloseSessions)
	ctx := context.Background()
	call := func(tool, record, run string) {
		_, _ = gw.Call(ctx, &gateway.CallRequest{Tool: tool, Args: json.RawMessage(`{"record_id":"` + record + `"}`), RunID: run})
	}
	call("note", "A", "r1")
	call("note", "A", "r1") // repeat
	call("note", "A", "r1") // repeat
	call("note", "B", "r1")
	call("note", "SLOW", "r1") // timeout → in_doubt
	call("note", "C", "r1")    // 4th new call of the run: refused by the budget of 3
	call("note", "SLOW", "r2") // a repeat of the in-doubt record
	call("lookup", "A", "r1")
	call("pay", "X", "r1")       // refused: irreversible
	call("plan_pay", "S1", "r1") // auto
	call("plan_pay", "BIG1", "r1")
	call("plan_pay", "BIG1", "r1") // repeat of a plan
	guard.Wait()
	time.Sleep(50 * time.Millisecond)

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"note succeeded", testutil.ToFloat64(met.ToolCalls.WithLabelValues("note", "write", "succeeded")), 4},
		{"note in_doubt", testutil.ToFloat64(met.ToolCalls.WithLabelValues("note", "write", "in_doubt")), 2},
		{"note refused", testutil.ToFloat64(met.ToolCalls.WithLabelValues("note", "write", "refused")), 1},
		{"repeats of succeeded", testutil.ToFloat64(met.Repeats.WithLabelValues("note", "succeeded")), 2},
		{"repeats of in_doubt", testutil.ToFloat64(met.Repeats.WithLabelValues("note", "in_doubt")), 1},
		{"budget refusals", testutil.ToFloat64(met.BudgetRefusals.WithLabelValues("note")), 1},
		{"timeouts", testutil.ToFloat64(met.ToolTimeouts.WithLabelValues("note")), 1},
		{"in doubt", testutil.ToFloat64(met.InDoubt.WithLabelValues("note")), 1},
		{"reads", testutil.ToFloat64(met.ToolCalls.WithLabelValues("lookup", "read", "succeeded")), 1},
		{"irreversible refused", testutil.ToFloat64(met.ToolCalls.WithLabelValues("pay", "irreversible", "refused")), 1},
		{"plans auto", testutil.ToFloat64(met.Plans.WithLabelValues("pay", "auto")), 1},
		{"plans human", testutil.ToFloat64(met.Plans.WithLabelValues("pay", "human")), 1},
		{"plan repeats", testutil.ToFloat64(met.Repeats.WithLabelValues("pay", "planned")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(met.ToolDuration); n < 1 {
		t.Errorf("no duration observed")
	}
	// Calls per run: A, B and SLOW were new calls of run r1 (counts 1, 2, 3).
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var perRun uint64
	var sum float64
	for _, f := range families {
		if f.GetName() != "airlock_side_effect_calls_per_run" {
			continue
		}
		for _, mm := range f.GetMetric() {
			perRun += mm.GetHistogram().GetSampleCount()
			sum = mm.GetHistogram().GetSampleSum()
		}
	}
	if perRun != 3 || sum != 6 {
		t.Errorf("calls per run: %d samples summing to %v, want 3 summing to 6", perRun, sum)
	}
}

func TestReportFromTheStore(t *testing.T) {
	t.Parallel()
	m, _ := manifest.Parse([]byte(testManifest), "test.yaml")
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Migrate(context.Background())
	guard := guard.New(s, nil)
	svc := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		if req.Tool.Name == "lookup" {
			if strings.Contains(string(req.Args), "BIG") {
				return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"amount":5000}`)}
			}
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"amount":5}`)}
		}
		if strings.Contains(string(req.Args), "SLOW") {
			<-ctx.Done()
			return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: ctx.Err()}
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}
	})
	plans, _ := plan.New(plan.Config{Manifest: m, Store: s, Guard: guard, Callers: func(*airlock.Tool) (upstream.Caller, bool) { return svc, true }})
	gw, err := gateway.New(gateway.Config{Manifest: m, Guard: guard, Store: s, Upstreams: map[string]upstream.Caller{"svc": svc}, Plans: plans})
	if err != nil {
		t.Fatal(err)
	}
	ctx := airlock.WithActor(context.Background(), "agent-1")
	call := func(tool, record, run string) {
		_, _ = gw.Call(ctx, &gateway.CallRequest{Tool: tool, Args: json.RawMessage(`{"record_id":"` + record + `"}`), RunID: run})
	}
	call("note", "A", "r1")
	call("note", "A", "r1")
	call("note", "A", "r1")
	call("note", "B", "r1")
	call("note", "SLOW", "r1")
	call("note", "C", "r1") // refused by the budget
	call("note", "SLOW", "r2")
	call("plan_pay", "S1", "r1")
	call("plan_pay", "BIG1", "r1")
	guard.Close() // flush the buffered events

	r, err := metrics.Compute(context.Background(), s, &m.Catalog, 24*time.Hour, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var note, pay metrics.ToolReport
	for _, tr := range r.Tools {
		switch tr.Tool {
		case "note":
			note = tr
		case "pay":
			pay = tr
		}
	}
	if note.Calls != 3 || note.Repeats != 3 || note.Timeouts != 1 || note.CallsPerRunMax != 3 || note.DurationP99s < 0.09 {
		t.Errorf("note: %+v", note)
	}
	if pay.Plans != 2 || pay.AutoApprovals != 1 || pay.AutoRate != 0.5 || pay.QueueDepth != 1 {
		t.Errorf("pay: %+v", pay)
	}
	if r.AuditCompleteness != 1 {
		t.Errorf("completeness %v", r.AuditCompleteness)
	}
	figures := map[string]bool{}
	for _, w := range r.Warnings {
		figures[w.Tool+"/"+w.Figure] = true
	}
	if !figures["note/duration_p99"] || !figures["note/calls_per_run"] || figures["note/repeats"] {
		t.Errorf("warnings: %+v", r.Warnings)
	}
	var b strings.Builder
	r.WriteText(&b)
	if !strings.Contains(b.String(), "audit completeness: 100.0%") {
		t.Errorf("text:\n%s", b.String())
	}
}
