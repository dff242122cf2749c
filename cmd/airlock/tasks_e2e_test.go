package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testdb"
)

// tasksTool is a write that answers within 200 ms while its upstream
// takes longer: a 2026-07-28 client that declares tasks gets a task.
const tasksTool = `
  - name: slow_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}]
    window: forever
    respond_within: 200ms
    repeat_wait: 100ms
    upstream: {name: payments, path: /withdrawals/note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note is returned."}
`

// mcpTasksCall posts one 2026-07-28 request that declares the Tasks
// extension, without a session, and returns its result or error.
func mcpTasksCall(t *testing.T, url, token string, id any, method string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	for _, k := range []string{"name", "taskId"} {
		if v, ok := params[k].(string); ok {
			req.Header.Set("Mcp-Name", v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			raw = []byte(data)
			break
		}
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: HTTP %d, not JSON: %s", method, resp.StatusCode, raw)
	}
	if res, ok := out["result"].(map[string]any); ok {
		return res
	}
	t.Fatalf("%s: %v", method, out)
	return nil
}

// Two replicas share one PostgreSQL: a task made on one is the task a
// re-issued call on the other names, the other reports it as the record
// moves and carries its first result; a plan's task made on one completes
// on the other when a person approves; and a replica started afterwards
// still answers for both.
func TestE2ETasksAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	payments := startPayments(t, "--latency", "1500ms")
	config := e2eManifest(t, payments.url(), "", "", tasksTool)
	a, b := serve(t, config, dsn), serve(t, config, dsn)

	call := func(url string, id int) map[string]any {
		return mcpTasksCall(t, url, agentToken, id, "tools/call", map[string]any{"name": "slow_note", "arguments": map[string]any{"record_id": "WD-T1", "text": "across replicas"}})
	}
	get := func(url, taskID string) map[string]any {
		return mcpTasksCall(t, url, agentToken, "g", "tasks/get", map[string]any{"taskId": taskID})
	}
	created := call(a.url(), 1)
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || id == "" || created["status"] != "working" {
		t.Fatalf("replica a: %v", created)
	}
	if again := call(b.url(), 2); again["taskId"] != id {
		t.Fatalf("the re-issued call on replica b named %v, want %s", again["taskId"], id)
	}
	if w := get(b.url(), id); w["status"] != "working" {
		t.Fatalf("replica b while the call runs: %v", w)
	}
	deadline := time.Now().Add(20 * time.Second)
	var done map[string]any
	for {
		done = get(b.url(), id)
		if done["status"] == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not complete: %v", done)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sc, _ := done["result"].(map[string]any)["structuredContent"].(map[string]any)
	if sc["status"] != "succeeded" || sc["repeat"] != false {
		t.Fatalf("the task's result: %v", done)
	}
	if n := len(stats(t, payments).Notes["WD-T1"]); n != 1 {
		t.Fatalf("the payments service saw %d notes, want 1", n)
	}

	// A plan that waits for a person, proposed on a, approved on b.
	planned := mcpTasksCall(t, a.url(), agentToken, 3, "tools/call", map[string]any{"name": "plan_approve_withdrawal", "arguments": map[string]any{"record_id": "WD-T2"}})
	pid, _ := planned["taskId"].(string)
	if planned["resultType"] != "task" || pid == "" {
		t.Fatalf("plan task: %v", planned)
	}
	_, list := apiCall(t, "GET", b.url()+"/v1/plans?status=awaiting_approval", approverToken, "")
	plans, _ := list["plans"].([]any)
	if len(plans) != 1 {
		t.Fatalf("waiting plans: %v", list)
	}
	p := plans[0].(map[string]any)
	if status, body := apiCall(t, "POST", b.url()+"/v1/plans/"+p["id"].(string)+"/approve", approverToken,
		`{"reason":"checked","decision_hash":"`+p["decision_hash"].(string)+`"}`); status != 200 {
		t.Fatalf("approve: %d %v", status, body)
	}
	// A replica started now answers for both tasks.
	c := serve(t, config, dsn)
	deadline = time.Now().Add(30 * time.Second)
	for {
		done = get(c.url(), pid)
		if done["status"] == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan's task did not complete: %v", done)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := stats(t, payments); st.Approvals["WD-T2"] != 1 {
		t.Fatalf("approved %d times", st.Approvals["WD-T2"])
	}
	if again := get(c.url(), id); again["status"] != "completed" {
		t.Fatalf("the first task on a new replica: %v", again)
	}
}
