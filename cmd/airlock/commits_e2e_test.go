package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commitsManifest has two irreversible tools run by their caller: pay_out,
// whose function passes airlock's key to a service that runs a key once
// (honors_idempotency_key), and wire_out, whose function does not.
func commitsManifest(t *testing.T) string {
	t.Helper()
	tool := func(name string, honors bool) string {
		return fmt.Sprintf(`  - name: %s
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}, amount: {type: number}}, required: [record_id, amount]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true, honors_idempotency_key: %v}
    answers: {undo: "No.", approver: "A person above 100, else automatic.", on_repeat: "The first payout."}
    approval: {rules: [{name: small, when: "args.amount < 100", decide: auto}, {name: large, when: "true", decide: human}]}
`, name, honors)
	}
	return writeManifest(t, "tools:\n"+tool("pay_out", true)+tool("wire_out", false))
}

// TestE2ECallerCommits: an irreversible tool run by its caller is proposed
// as a plan; nothing runs before approval; a worker asking for commits gets
// the approved plan's work (execute) and completes it, and the plan is
// committed with its result. The agent cannot reach the tool. A worker
// killed mid-commit: for a tool that honours keys another worker takes
// the work over with the same key; for one that does not, the plan goes in
// doubt and nobody runs it again.
func TestE2ECallerCommits(t *testing.T) {
	t.Parallel()
	srv := start(t, tokenEnv, bin(t, "airlock"), "serve", "--config", commitsManifest(t), "--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"),
		"--listen", freeAddr(t), "--lease", "1s")
	client := specChecked(t) // the claims and commits answers as docs/openapi.yaml describes them
	call := func(token, method, path, body string) (int, map[string]any) {
		t.Helper()
		if !strings.HasPrefix(path, "/v1/c") { // calls, claims, commits: in the document
			return apiCall(t, method, srv.url()+path, token, body)
		}
		status, a, err := tryAPICallWith(client, method, srv.url()+path, token, body)
		if err != nil {
			t.Fatal(err)
		}
		return status, a
	}
	next := func(tools string, wait float64) map[string]any {
		t.Helper()
		status, a := call(agentToken, "POST", "/v1/commits/next", fmt.Sprintf(`{"tools":%s,"wait_seconds":%v}`, tools, wait))
		if status != 200 {
			t.Fatalf("commits/next: %d %v", status, a)
		}
		return a
	}
	planStatus := func(id string) string {
		t.Helper()
		_, p := call(approverToken, "GET", "/v1/plans/"+id, "")
		return fmt.Sprint(p["status"])
	}

	// A large payout waits for a person; no worker gets it before.
	status, a := call(agentToken, "POST", "/v1/calls", `{"tool":"plan_pay_out","args":{"record_id":"P-1","amount":500}}`)
	plan, _ := a["plan"].(map[string]any)
	if status != 200 || a["status"] != "planned" || plan["status"] != "awaiting_approval" {
		t.Fatalf("propose: %d %v", status, a)
	}
	id := plan["id"].(string)
	if a := next(`["pay_out"]`, 0.3); a["status"] != "idle" {
		t.Fatalf("a commit before approval: %v", a)
	}
	_, full := call(approverToken, "GET", "/v1/plans/"+id, "")
	if status, a := call(approverToken, "POST", "/v1/plans/"+id+"/approve", fmt.Sprintf(`{"reason":"ok","decision_hash":%q}`, full["decision_hash"])); status != 200 {
		t.Fatalf("approve: %d %v", status, a)
	}
	work := next(`["pay_out","wire_out"]`, 5)
	wp, _ := work["plan"].(map[string]any)
	if work["status"] != "execute" || wp["id"] != id || fmt.Sprint(wp["args"]) != "map[amount:500 record_id:P-1]" {
		t.Fatalf("the approved plan's work: %v", work)
	}
	if a := next(`["pay_out"]`, 0); a["status"] != "idle" {
		t.Fatalf("the same commit given twice: %v", a)
	}
	if status, a := call(agentToken, "POST", "/v1/claims/"+work["claim"].(string)+"/complete", `{"outcome":"succeeded","result":{"payout":"PO-1"}}`); status != 200 || a["status"] != "succeeded" {
		t.Fatalf("complete: %d %v", status, a)
	}
	if s := planStatus(id); s != "committed" {
		t.Fatalf("plan after the commit: %s", s)
	}
	if _, a := call(agentToken, "POST", "/v1/calls", `{"tool":"plan_status","args":{"plan_id":"`+id+`"}}`); fmt.Sprint(a["plan"]) == "" || !strings.Contains(fmt.Sprint(a), "PO-1") {
		t.Fatalf("plan_status: %v", a)
	}
	// The agent cannot reach the tool itself.
	for _, path := range []string{"/v1/calls", "/v1/claims"} {
		if status, a := call(agentToken, "POST", path, `{"tool":"pay_out","args":{"record_id":"P-1","amount":500}}`); status != 403 || code(a) != "not_callable" {
			t.Fatalf("pay_out through %s: %d %v", path, status, a)
		}
	}
	// Bad worker requests.
	for _, tc := range []struct{ body, field string }{
		{`{}`, "tools"},
		{`{"tools":["pay"]}`, "tools[0]"},
		{`{"tools":["pay_out"],"wait_seconds":99}`, "wait_seconds"},
	} {
		status, a := call(agentToken, "POST", "/v1/commits/next", tc.body)
		e, _ := a["error"].(map[string]any)
		if status != 400 || e["field"] != tc.field {
			t.Errorf("commits/next %s: %d %v; want 400 naming %s", tc.body, status, a, tc.field)
		}
	}

	// A worker killed mid-commit of work that honours keys: the next worker
	// takes it over with the same key once the lease has run out.
	_, a = call(agentToken, "POST", "/v1/calls", `{"tool":"plan_pay_out","args":{"record_id":"P-2","amount":5}}`)
	id2 := a["plan"].(map[string]any)["id"].(string)
	first := next(`["pay_out"]`, 5)
	if first["status"] != "execute" || first["plan"].(map[string]any)["id"] != id2 {
		t.Fatalf("the automatic plan's work: %v", first)
	}
	// (The first worker dies here: no renewal, no completion.)
	second := next(`["pay_out"]`, 15)
	if second["status"] != "execute" || second["plan"].(map[string]any)["id"] != id2 || keyOf(second) != keyOf(first) || second["claim"] == first["claim"] ||
		second["idempotency_key"] != keyOf(first) {
		t.Fatalf("the next worker: %v; want the same plan's work, taken over with the same key", second)
	}
	if status, a := call(agentToken, "POST", "/v1/claims/"+first["claim"].(string)+"/complete", `{"outcome":"succeeded"}`); status != 409 || code(a) != "lease_lost" {
		t.Fatalf("the dead worker's late completion: %d %v", status, a)
	}
	call(agentToken, "POST", "/v1/claims/"+second["claim"].(string)+"/complete", `{"outcome":"succeeded","result":{"payout":"PO-2"}}`)
	if s := planStatus(id2); s != "committed" {
		t.Fatalf("plan after the takeover: %s", s)
	}

	// A worker killed mid-commit of work that does not honour keys: the
	// plan goes in doubt, and no worker is given it again.
	_, a = call(agentToken, "POST", "/v1/calls", `{"tool":"plan_wire_out","args":{"record_id":"W-1","amount":5}}`)
	id3 := a["plan"].(map[string]any)["id"].(string)
	held := next(`["wire_out"]`, 5)
	if held["status"] != "execute" || held["idempotency_key"] != nil {
		t.Fatalf("wire_out's work: %v", held)
	}
	deadline := time.Now().Add(20 * time.Second)
	for planStatus(id3) != "in_doubt" {
		if w := next(`["wire_out"]`, 0.5); w["status"] != "idle" {
			t.Fatalf("the work of a dead worker given again: %v", w)
		}
		if time.Now().After(deadline) {
			t.Fatalf("plan %s: %s; want in_doubt", id3, planStatus(id3))
		}
	}
	// Polls passed over the held work with a read: its audit trail has no
	// answers from them.
	_, trail := call(approverToken, "GET", "/v1/audit?key="+keyOf(held), "")
	for _, e := range trail["events"].([]any) {
		if kind := e.(map[string]any)["kind"]; kind == "in_progress_answered" {
			t.Errorf("an audit event of the held work from a poll: %v", e)
		}
	}
}

// keyOf is the key part of an execute answer's claim handle.
func keyOf(a map[string]any) string {
	parts := strings.Split(fmt.Sprint(a["claim"]), ".")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}
