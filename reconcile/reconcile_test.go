package reconcile_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/reconcile"
	"github.com/airlockhq/airlock/upstream"
)

const reconcileManifest = `version: 1
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: get_withdrawal
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
    upstream: {name: svc, path: /get}
  - name: approve
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, note: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /approve}
    answers: {undo: "No.", approver: "No one.", on_repeat: "The first."}
    reconcile_with: get_withdrawal
    reconcile:
      happened_when: 'result.status == "approved"'
      not_happened_when: 'result.status == "queued"'
  - name: note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first."}
    reconcile_with: get_withdrawal
`

// The read tool's answer, by record, as the system of record gives it.
type systemOfRecord struct {
	mu     sync.Mutex
	status map[string]string
	asked  []json.RawMessage
}

func (s *systemOfRecord) Call(_ context.Context, req *upstream.Request) airlock.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, req.Args)
	var a struct {
		RecordID string `json:"record_id"`
	}
	_ = json.Unmarshal(req.Args, &a)
	switch st := s.status[a.RecordID]; st {
	case "":
		return airlock.Outcome{Kind: airlock.OutcomeUnknown}
	case "garbled":
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`not json`)}
	default:
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"status":"` + st + `"}`)}
	}
}

// Reconcile asks the read tool with the arguments it takes and reads its
// answer through the tool's conditions; a tool without conditions gets the
// answer for a person; an unreachable or garbled answer is an error.
func TestReconcileReadsTheSystemOfRecord(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(reconcileManifest), "reconcile.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sor := &systemOfRecord{status: map[string]string{"WD-1": "approved", "WD-2": "queued", "WD-3": "pending", "WD-5": "garbled"}}
	r, err := reconcile.New(reconcile.Config{Catalog: &m.Catalog, Callers: func(*airlock.Tool) (upstream.Caller, bool) { return sor, true }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Any() || !r.Automatic("approve") || r.Automatic("note") || r.Automatic("get_withdrawal") {
		t.Fatalf("automatic: any %v, approve %v, note %v", r.Any(), r.Automatic("approve"), r.Automatic("note"))
	}
	rec := func(tool, id string) *airlock.Record {
		return &airlock.Record{Key: "k-" + id, Tool: tool, State: airlock.StateInDoubt,
			Args: json.RawMessage(`{"note":"not the read tool's","record_id":"` + id + `"}`)}
	}
	for _, tc := range []struct {
		tool, id string
		want     airlock.Verdict
		problem  string
	}{
		{"approve", "WD-1", airlock.VerdictHappened, ""},
		{"approve", "WD-2", airlock.VerdictNotHappened, ""},
		{"approve", "WD-3", airlock.VerdictUnknown, ""},
		{"note", "WD-1", airlock.VerdictUnknown, ""}, // no conditions: a person reads it
		{"approve", "WD-4", "", "get_withdrawal"},    // the read failed
		{"approve", "WD-5", "", "not JSON"},
	} {
		got, err := r.Reconcile(context.Background(), rec(tc.tool, tc.id))
		switch {
		case tc.problem != "":
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%s %s: %v %+v, want an error naming %q", tc.tool, tc.id, err, got, tc.problem)
			}
		case err != nil:
			t.Errorf("%s %s: %v", tc.tool, tc.id, err)
		case got.Verdict != tc.want || got.Tool != "get_withdrawal":
			t.Errorf("%s %s: %+v, want %s", tc.tool, tc.id, got, tc.want)
		}
	}
	for _, asked := range sor.asked {
		if strings.Contains(string(asked), "note") {
			t.Fatalf("the read tool was asked with arguments it does not take: %s", asked)
		}
	}
	if _, err := r.Ask(context.Background(), rec("gone", "WD-1")); err == nil {
		t.Fatal("a tool no longer in the manifest was asked about")
	}
}
