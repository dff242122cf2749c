package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/upstream"
)

const tasksManifest = `version: 1
calendar: {timezone: UTC}
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
    upstream: {name: svc, path: /get}
  - name: slow
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    timeout: 30s
    respond_within: 50ms
    repeat_wait: 50ms
    upstream: {name: svc, path: /slow}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "First result."}
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /pay}
    answers: {undo: "No.", approver: "A person.", on_repeat: "First."}
    approval:
      rules:
        - {name: people, when: "true", decide: human}
`

// tasksSetup serves tasksManifest: slow blocks until its record is let go
// (release), pay waits for a person; two agent tokens and an approver.
type tasksSetup struct {
	url      string
	plans    *plan.Service
	executed atomic.Int64
	release  map[string]chan struct{}
}

func setupTasks(t *testing.T, configure ...func(*gateway.Config)) *tasksSetup {
	t.Helper()
	ts := &tasksSetup{release: map[string]chan struct{}{}}
	for _, id := range []string{"R1", "R2", "R3", "R4", "R5"} {
		ts.release[id] = make(chan struct{})
	}
	slow := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		ts.executed.Add(1)
		var args struct {
			RecordID string `json:"record_id"`
		}
		_ = json.Unmarshal(req.Args, &args)
		if ch := ts.release[args.RecordID]; ch != nil {
			<-ch
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"done":"` + args.RecordID + `"}`)}
	})
	ok := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"paid":true}`)}
	})
	g := frontGatewayWith(t, tasksManifest, map[string]upstream.Caller{"lookup": ok, "slow": slow, "pay": ok}, func(c *gateway.Config) {
		var err error
		ts.plans, err = plan.New(plan.Config{Manifest: c.Manifest, Store: c.Store.(airlock.PlanStore), Guard: c.Guard,
			Callers: func(*airlock.Tool) (upstream.Caller, bool) { return ok, true }})
		if err != nil {
			t.Fatal(err)
		}
		c.Plans = ts.plans
		c.Tokens = append(c.Tokens, gateway.Token{Name: "other-agent", Role: airlock.RoleAgent, SHA256: gateway.HashToken("other-token")})
		for _, f := range configure {
			f(c)
		}
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.CloseSessions)
	t.Cleanup(func() {
		for _, ch := range ts.release {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	ts.url = srv.URL
	return ts
}

// withTasks declares the Tasks extension in a 2026-07-28 request's _meta.
func withTasks(params map[string]any) map[string]any {
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{gateway.ExtTasks: map[string]any{}}}}
	return params
}

// statelessTasks posts a 2026-07-28 request that declares the extension
// (statelessCall would overwrite its capabilities).
func statelessTasks(t *testing.T, url string, id any, method, name string, params map[string]any, header ...string) (int, map[string]any) {
	t.Helper()
	params = withTasks(params)
	meta := params["_meta"].(map[string]any)
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	h := append([]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}, header...)
	if name != "" {
		h = append(h, "Mcp-Name", name)
	}
	return postMCP(t, url, string(body), h...)
}

func resultOf(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	res, _ := out["result"].(map[string]any)
	if res == nil {
		t.Fatalf("no result: %v", out)
	}
	return res
}

func rpcCode(out map[string]any) float64 {
	e, _ := out["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// pollTask polls tasks/get until the task has the status, with get
// answering as the revision does.
func pollTask(t *testing.T, get func() map[string]any, status string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		task := get()
		if task["status"] == status {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not become %s: %v", status, task)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// On 2026-07-28, a client that declares the Tasks extension gets a task
// for a write that outlives respond_within and for a plan that waits for a
// person; the task is the same for a repeat, reports the record's or
// plan's status, carries the first result when there is one, belongs to
// its token, and a waiting plan is withdrawn by cancelling it. A client
// that does not declare the extension gets today's answers.
func TestMCPTasksOn20260728(t *testing.T) {
	t.Parallel()
	ts := setupTasks(t)
	url := ts.url

	_, out := statelessCall(t, url, 1, "server/discover", "", nil)
	caps, _ := resultOf(t, out)["capabilities"].(map[string]any)
	if ext, _ := caps["extensions"].(map[string]any); ext[gateway.ExtTasks] == nil {
		t.Fatalf("server/discover does not name the Tasks extension: %v", caps)
	}

	callSlow := func(id any, record string) map[string]any {
		t.Helper()
		_, out := statelessTasks(t, url, id, "tools/call", "slow", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": record}})
		return resultOf(t, out)
	}
	get := func(taskID string) func() map[string]any {
		return func() map[string]any {
			_, out := statelessTasks(t, url, "g", "tasks/get", taskID, map[string]any{"taskId": taskID})
			return resultOf(t, out)
		}
	}

	created := callSlow(2, "R1")
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || !airlock.ValidTaskID(id) || created["status"] != "working" || created["task"] != nil ||
		created["content"] != nil || !hasKey(created, "ttlMs") || created["pollIntervalMs"] == nil || created["createdAt"] == nil ||
		created["lastUpdatedAt"].(string) < created["createdAt"].(string) {
		t.Fatalf("CreateTaskResult: %v", created)
	}
	if again := callSlow(3, "R1"); again["taskId"] != id {
		t.Fatalf("the re-issued call named task %v, want %s", again["taskId"], id)
	}
	working := get(id)()
	if working["status"] != "working" || working["resultType"] != "complete" || working["result"] != nil || working["statusMessage"] == nil {
		t.Fatalf("tasks/get while working: %v", working)
	}

	t.Run("bad task requests name the problem", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			params map[string]any
			token  string
			want   float64
			says   string
		}{
			{"unknown id", map[string]any{"taskId": airlock.NewTaskID()}, "", -32602, "no task"},
			{"malformed id", map[string]any{"taskId": "../etc"}, "", -32602, "not a task id"},
			{"no id", map[string]any{}, "", -32602, "taskId"},
			{"another token's task", map[string]any{"taskId": id}, "other-token", -32602, "no task"},
		} {
			var h []string
			if tc.token != "" {
				h = []string{"Authorization", "Bearer " + tc.token}
			}
			_, out := statelessTasks(t, url, "e", "tasks/get", "", tc.params, h...)
			msg, _ := out["error"].(map[string]any)["message"].(string)
			if rpcCode(out) != tc.want || !strings.Contains(msg, tc.says) {
				t.Errorf("%s: %v", tc.name, out)
			}
		}
		// A routing header that names another task; methods of 2025-11-25.
		if status, out := statelessTasks(t, url, "h", "tasks/get", airlock.NewTaskID(), map[string]any{"taskId": id}); status != 400 || rpcCode(out) != -32020 {
			t.Errorf("Mcp-Name of another task: HTTP %d %v", status, out)
		}
		for _, method := range []string{"tasks/result", "tasks/list"} {
			if _, out := statelessTasks(t, url, "m", method, id, map[string]any{"taskId": id}); rpcCode(out) != -32601 {
				t.Errorf("%s on 2026-07-28: %v", method, out)
			}
		}
		// Without the extension declared on the request: -32021, naming it.
		for _, method := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
			_, out := statelessCall(t, url, "n", method, id, map[string]any{"taskId": id})
			e, _ := out["error"].(map[string]any)
			if rpcCode(out) != -32021 || !strings.Contains(e["message"].(string), gateway.ExtTasks) {
				t.Errorf("%s without the extension: %v", method, out)
			}
		}
	})

	t.Run("cancelling a call under way does not stop it", func(t *testing.T) {
		_, out := statelessTasks(t, url, "c", "tasks/cancel", id, map[string]any{"taskId": id})
		ack := resultOf(t, out)
		note, _ := ack["_meta"].(map[string]any)["io.airlock/note"].(string)
		if ack["resultType"] != "complete" || ack["taskId"] != nil || ack["status"] != nil || !strings.Contains(note, "cannot be stopped") {
			t.Fatalf("cancel ack: %v", ack)
		}
		close(ts.release["R1"])
		done := pollTask(t, get(id), "completed")
		res, _ := done["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		first, _ := sc["result"].(map[string]any)
		if sc["status"] != "succeeded" || sc["repeat"] != false || first["done"] != "R1" {
			t.Fatalf("completed task: %v", done)
		}
		if n := ts.executed.Load(); n != 1 {
			t.Fatalf("slow ran %d times for one piece of work", n)
		}
		// Cancelling a task that ended is acknowledged again, the same way.
		_, out = statelessTasks(t, url, "c2", "tasks/cancel", id, map[string]any{"taskId": id})
		if ack := resultOf(t, out); ack["resultType"] != "complete" || ack["taskId"] != nil {
			t.Fatalf("cancel of an ended task: %v", ack)
		}
		// A call of the same work now is answered at once, as a repeat.
		if again := callSlow(4, "R1"); again["resultType"] == "task" || again["isError"] == true {
			t.Fatalf("a repeat after the end: %v", again)
		}
	})

	t.Run("2025-11-25's params.task does not make a task on 2026-07-28", func(t *testing.T) {
		_, out := statelessCall(t, url, 10, "tools/call", "slow", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R4"}, "task": map[string]any{"ttl": 1000}})
		if res := resultOf(t, out); res["resultType"] == "task" || res["task"] != nil || res["content"] == nil {
			t.Fatalf("a legacy task parameter on 2026-07-28: %v", res)
		}
	})

	t.Run("a repeat's task says repeat", func(t *testing.T) {
		// The other token's first call makes its own task for the same work.
		_, out := statelessCall(t, url, 5, "tools/call", "slow", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R2"}})
		if res := resultOf(t, out); res["resultType"] == "task" {
			t.Fatalf("a client that did not declare tasks got one: %v", res)
		}
		_, out = statelessTasks(t, url, 6, "tools/call", "slow", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R2"}},
			"Authorization", "Bearer other-token")
		other := resultOf(t, out)
		oid, _ := other["taskId"].(string)
		if oid == "" || oid == id {
			t.Fatalf("the other token's task: %v", other)
		}
		close(ts.release["R2"])
		done := pollTask(t, func() map[string]any {
			_, out := statelessTasks(t, url, "g", "tasks/get", oid, map[string]any{"taskId": oid}, "Authorization", "Bearer other-token")
			return resultOf(t, out)
		}, "completed")
		sc, _ := done["result"].(map[string]any)["structuredContent"].(map[string]any)
		if sc["repeat"] != true {
			t.Fatalf("the task of a repeat: %v", done)
		}
	})

	t.Run("a waiting plan is a task; cancelling withdraws it", func(t *testing.T) {
		_, out := statelessTasks(t, url, 7, "tools/call", "plan_pay", map[string]any{"name": "plan_pay", "arguments": map[string]any{"record_id": "P1"}})
		created := resultOf(t, out)
		pid, _ := created["taskId"].(string)
		if created["resultType"] != "task" || pid == "" || !strings.Contains(created["statusMessage"].(string), "approval") {
			t.Fatalf("plan task: %v", created)
		}
		_, out = statelessTasks(t, url, 8, "tasks/cancel", pid, map[string]any{"taskId": pid})
		if ack := resultOf(t, out); ack["resultType"] != "complete" {
			t.Fatalf("cancel: %v", ack)
		}
		cancelled := get(pid)()
		if cancelled["status"] != "cancelled" || cancelled["result"] != nil {
			t.Fatalf("withdrawn plan's task: %v", cancelled)
		}
		plans, err := ts.plans.List(context.Background(), airlock.PlanFilter{Status: airlock.PlanWithdrawn})
		if err != nil || len(plans) != 1 || plans[0].DecidedBy != "agent" {
			t.Fatalf("withdrawn plans: %v %+v", err, plans)
		}
	})

	t.Run("only the proposer's task withdraws a shared plan", func(t *testing.T) {
		callPlan := func(id any, header ...string) string {
			t.Helper()
			_, out := statelessTasks(t, url, id, "tools/call", "plan_pay", map[string]any{"name": "plan_pay", "arguments": map[string]any{"record_id": "P3"}}, header...)
			pid, _ := resultOf(t, out)["taskId"].(string)
			return pid
		}
		mine := callPlan(20)
		other := []string{"Authorization", "Bearer other-token"}
		theirs := callPlan(21, other...)
		if mine == "" || theirs == "" || mine == theirs {
			t.Fatalf("tasks of the one plan: %q %q", mine, theirs)
		}
		_, out := statelessTasks(t, url, 22, "tasks/cancel", theirs, map[string]any{"taskId": theirs}, other...)
		note, _ := resultOf(t, out)["_meta"].(map[string]any)["io.airlock/note"].(string)
		if !strings.Contains(note, "only its proposer") {
			t.Fatalf("another principal's cancel: %v", out)
		}
		waiting, err := ts.plans.List(context.Background(), airlock.PlanFilter{Status: airlock.PlanAwaitingApproval})
		if err != nil || len(waiting) != 1 || waiting[0].ProposedBy != "agent" {
			t.Fatalf("the plan after another principal's cancel: %v %+v", err, waiting)
		}
		_, out = statelessTasks(t, url, "g", "tasks/get", theirs, map[string]any{"taskId": theirs}, other...)
		if task := resultOf(t, out); task["status"] != "working" {
			t.Fatalf("their task: %v", task)
		}
		statelessTasks(t, url, 23, "tasks/cancel", mine, map[string]any{"taskId": mine})
		if task := get(mine)(); task["status"] != "cancelled" {
			t.Fatalf("the proposer's cancel: %v", task)
		}
	})

	t.Run("an approved plan's task completes with its result", func(t *testing.T) {
		_, out := statelessTasks(t, url, 9, "tools/call", "plan_pay", map[string]any{"name": "plan_pay", "arguments": map[string]any{"record_id": "P2"}})
		pid, _ := resultOf(t, out)["taskId"].(string)
		plans, _ := ts.plans.List(context.Background(), airlock.PlanFilter{Status: airlock.PlanAwaitingApproval})
		if len(plans) != 1 {
			t.Fatalf("waiting plans: %+v", plans)
		}
		if _, err := ts.plans.Decide(context.Background(), airlock.PlanDecision{ID: plans[0].ID, Approve: true, By: "ana", Role: airlock.RoleApprover,
			Reason: "checked", DecisionHash: plans[0].DecisionHash}); err != nil {
			t.Fatal(err)
		}
		if err := ts.plans.Commit(context.Background(), plans[0].ID); err != nil {
			t.Fatal(err)
		}
		done := pollTask(t, get(pid), "completed")
		if !strings.Contains(string(mustJSON(t, done["result"])), "paid") {
			t.Fatalf("the plan's result: %v", done)
		}
	})
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sessionPost posts a message in a 2025-11-25 session; it returns the
// answer and the session id the server named. An answer that does not
// come within 20 s fails the test (a wait that never ends).
func sessionPost(t *testing.T, url, session string, body map[string]any) (map[string]any, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/mcp", strings.NewReader(string(raw)))
	req.Header.Set("Authorization", "Bearer "+frontToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if _, isCall := body["id"]; !isCall {
		return nil, resp.Header.Get("Mcp-Session-Id")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			b = []byte(data)
			break
		}
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("HTTP %d, not JSON: %s", resp.StatusCode, b)
	}
	return out, resp.Header.Get("Mcp-Session-Id")
}

// On 2025-11-25, the experimental tasks: the capability and each write's
// and plan's taskSupport are declared; a task-augmented call gets a task
// nested under "task"; tasks/get, tasks/result, tasks/list and tasks/cancel
// answer as that revision defines them.
//
// The gateway's clock never moves here: tasks/result learns that the work
// ended from the record's change, not from a timer.
func TestMCPTasksOn20251125(t *testing.T) {
	t.Parallel()
	ts := setupTasks(t, func(c *gateway.Config) { c.Clock = clockwork.NewFakeClock() })
	url := ts.url
	init, session := sessionPost(t, url, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}})
	caps, _ := resultOf(t, init)["capabilities"].(map[string]any)
	tasksCap, _ := caps["tasks"].(map[string]any)
	if session == "" || tasksCap == nil || tasksCap["requests"] == nil || tasksCap["cancel"] == nil || tasksCap["list"] == nil {
		t.Fatalf("initialize: session %q, capabilities %v", session, caps)
	}
	sessionPost(t, url, session, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	post := func(id any, method string, params map[string]any) map[string]any {
		t.Helper()
		out, _ := sessionPost(t, url, session, map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		return out
	}

	support := map[string]any{}
	for _, tool := range resultOf(t, post(2, "tools/list", nil))["tools"].([]any) {
		tm := tool.(map[string]any)
		support[tm["name"].(string)] = tm["execution"]
	}
	if support["slow"] == nil || support["plan_pay"] == nil || support["lookup"] != nil || support["plan_status"] != nil {
		t.Fatalf("execution.taskSupport: %v", support)
	}

	created := resultOf(t, post(3, "tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R3"}, "task": map[string]any{"ttl": 60000}}))
	task, _ := created["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if !airlock.ValidTaskID(id) || task["status"] != "working" || !hasKey(task, "ttl") || created["content"] != nil {
		t.Fatalf("CreateTaskResult: %v", created)
	}
	if got := resultOf(t, post(4, "tasks/get", map[string]any{"taskId": id})); got["taskId"] != id || got["status"] != "working" {
		t.Fatalf("tasks/get: %v", got)
	}
	if got := resultOf(t, post(5, "tasks/cancel", map[string]any{"taskId": id})); got["status"] != "working" || !strings.Contains(got["statusMessage"].(string), "cannot be stopped") {
		t.Fatalf("tasks/cancel of a call under way: %v", got)
	}
	close(ts.release["R3"])
	res := resultOf(t, post(6, "tasks/result", map[string]any{"taskId": id}))
	related, _ := res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)
	if related["taskId"] != id || !strings.Contains(string(mustJSON(t, res)), "R3") || res["isError"] == true {
		t.Fatalf("tasks/result: %v", res)
	}
	if out := post(7, "tasks/cancel", map[string]any{"taskId": id}); rpcCode(out) != -32602 {
		t.Fatalf("tasks/cancel of an ended task: %v", out)
	}
	// A task-augmented call whose work has ended still gets a task: the
	// client asked for one.
	done := resultOf(t, post(8, "tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R3"}, "task": map[string]any{}}))
	if dt, _ := done["task"].(map[string]any); dt["taskId"] != id || dt["status"] != "completed" {
		t.Fatalf("a task-augmented repeat: %v", done)
	}
	listed := resultOf(t, post(9, "tasks/list", map[string]any{}))
	if l, _ := listed["tasks"].([]any); len(l) != 1 || l[0].(map[string]any)["taskId"] != id {
		t.Fatalf("tasks/list: %v", listed)
	}
	// A plan that waits; cancelling withdraws it.
	pt := resultOf(t, post(10, "tools/call", map[string]any{"name": "plan_pay", "arguments": map[string]any{"record_id": "P9"}, "task": map[string]any{}}))
	pid, _ := pt["task"].(map[string]any)["taskId"].(string)
	if got := resultOf(t, post(11, "tasks/cancel", map[string]any{"taskId": pid})); got["status"] != "cancelled" {
		t.Fatalf("tasks/cancel of a waiting plan: %v", got)
	}
	// A bad task parameter is refused before anything runs.
	if out := post(12, "tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"record_id": "R4"}, "task": 5}); rpcCode(out) != -32602 {
		t.Fatalf("task: 5 → %v", out)
	}
	if n := ts.executed.Load(); n != 1 {
		t.Fatalf("slow ran %d times", n)
	}
}
