package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/metrics"
)

func callNote(t *testing.T, s *mcp.ClientSession, tool, record, text string) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"record_id": record, "text": text}})
	if err != nil {
		t.Fatalf("CallTool %s: %v", tool, err)
	}
	return res
}

func TestE2EMCPClientListsAndCallsOnce(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	s := mcpClient(t, airlockProc.url(), agentToken)

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
		raw, _ := json.Marshal(tool)
		if strings.Contains(strings.ToLower(string(raw)), "key\"") || strings.Contains(strings.ToLower(string(raw)), "idempotency") {
			t.Errorf("tool %s mentions a key: %s", tool.Name, raw)
		}
	}
	if _, listed := byName["approve_withdrawal"]; listed {
		t.Error("the irreversible tool is listed as callable")
	}
	if r := byName["get_withdrawal"]; r == nil || !r.Annotations.ReadOnlyHint || !r.Annotations.IdempotentHint {
		t.Errorf("get_withdrawal annotations: %+v", r)
	}
	if w := byName["add_note"]; w == nil || w.Annotations.ReadOnlyHint || !w.Annotations.IdempotentHint ||
		w.Annotations.DestructiveHint == nil || *w.Annotations.DestructiveHint || w.Annotations.OpenWorldHint == nil || !*w.Annotations.OpenWorldHint {
		t.Errorf("add_note annotations: %+v", w.Annotations)
	}

	first := callNote(t, s, "add_note", "WD-1", "checked")
	second := callNote(t, s, "add_note", " wd-1", "checked ")
	a, b := structured(t, first), structured(t, second)
	if a["status"] != "succeeded" || a["repeat"] != false || b["repeat"] != true || second.Meta["io.airlock/repeat"] != true {
		t.Fatalf("first %v, second %v (meta %v)", a, b, second.Meta)
	}
	if fmt.Sprint(a["result"]) != fmt.Sprint(b["result"]) {
		t.Fatalf("the repeat did not get the first result: %v vs %v", a["result"], b["result"])
	}
	text := second.Content[0].(*mcp.TextContent).Text
	if !strings.Contains(text, "already done") || strings.Contains(text, "key") {
		t.Fatalf("repeat text: %q", text)
	}
	if got := stats(t, payments).Notes["WD-1"]; len(got) != 1 {
		t.Fatalf("upstream executed %d notes, want 1", len(got))
	}
	raw, _ := json.Marshal(first)
	if strings.Contains(string(raw), "idempotency") {
		t.Fatalf("the answer leaks the key: %s", raw)
	}
}

func TestE2EIncidentClientTimesOutAndRetries(t *testing.T) {
	t.Parallel()
	payments := startPayments(t, "--latency", "2500ms")
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	s := mcpClient(t, airlockProc.url(), agentToken)

	// A model's client gives up after 800ms and tries again, three times.
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": "WD-24817", "text": "approved overnight"}})
		cancel()
		if err == nil {
			t.Logf("attempt %d answered: %v", i, structured(t, res))
		}
	}
	// The last retry, with patience, gets the first (and only) result.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": "WD-24817", "text": "approved overnight"}})
	if err != nil {
		t.Fatal(err)
	}
	got := structured(t, res)
	if got["status"] != "succeeded" || got["repeat"] != true {
		t.Fatalf("final retry: %v", got)
	}
	time.Sleep(3 * time.Second) // anything still in flight upstream would land now
	if n := len(stats(t, payments).Notes["WD-24817"]); n != 1 {
		t.Fatalf("upstream executed %d times, want exactly 1", n)
	}
}

func TestE2EMCPUpstreams(t *testing.T) {
	t.Parallel()
	notesHTTP := start(t, nil, bin(t, "notes-mcp"), "--http", "127.0.0.1:0")
	payments := startPayments(t)
	airlockProc := serve(t, e2eManifest(t, payments.url(), bin(t, "notes-mcp"), notesHTTP.url(), ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	s := mcpClient(t, airlockProc.url(), agentToken)
	for _, via := range []string{"stdio", "http"} {
		t.Run(via, func(t *testing.T) {
			first := structured(t, callNote(t, s, "note_"+via, "WD-7", "via "+via))
			second := structured(t, callNote(t, s, "note_"+via, "WD-7", "via "+via))
			if first["status"] != "succeeded" || second["repeat"] != true {
				t.Fatalf("first %v second %v", first, second)
			}
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_" + via, Arguments: map[string]any{"record_id": "WD-7"}})
			if err != nil {
				t.Fatal(err)
			}
			// A read from an MCP upstream passes through as it came.
			list := structured(t, res)
			notes := list["notes"].([]any)
			if len(notes) != 1 {
				t.Fatalf("the MCP upstream executed %d notes, want 1: %v", len(notes), list)
			}
			if key, _ := notes[0].(map[string]any)["key"].(string); len(key) != 32 {
				t.Fatalf("the upstream did not receive the key in _meta: %v", notes[0])
			}
		})
	}
}

func TestE2EBadInputRunsNothing(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	calls := airlockProc.url() + "/v1/calls"
	big := `{"tool":"add_note","args":{"record_id":"WD-1","text":"` + strings.Repeat("x", 2<<20) + `"}}`
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		field      string
		contains   string
	}{
		{"malformed JSON", `{"tool": "add_note", "args": {`, 400, "invalid_argument", "", "not valid JSON"},
		{"empty body", ``, 400, "invalid_argument", "", "empty"},
		{"wrong type of tool", `{"tool": 5, "args": {}}`, 400, "invalid_argument", "tool", "must be a string"},
		{"args not an object", `{"tool": "add_note", "args": [1]}`, 400, "invalid_argument", "args", "object"},
		{"wrong type of a field", `{"tool": "add_note", "args": {"record_id": 5, "text": "x"}}`, 400, "invalid_argument", "record_id", "must be a string"},
		{"unknown field in args", `{"tool": "add_note", "args": {"record_id": "WD-1", "text": "x", "amount": 1}}`, 400, "invalid_argument", "amount", "unknown field"},
		{"unknown field in body", `{"tool": "add_note", "args": {}, "key": "x"}`, 400, "invalid_argument", "key", "unknown field"},
		{"unknown tool", `{"tool": "send_money", "args": {}}`, 404, "unknown_tool", "tool", "add_note"},
		{"missing natural-key field", `{"tool": "add_note", "args": {"text": "x"}}`, 400, "missing_field", "record_id", "record_id"},
		{"blank natural-key field", `{"tool": "add_note", "args": {"record_id": "  ", "text": "x"}}`, 400, "missing_field", "record_id", "empty"},
		{"irreversible tool", `{"tool": "approve_withdrawal", "args": {"record_id": "WD-1"}}`, 403, "not_callable", "tool", "Use plan_approve_withdrawal"},
		{"irreversible tool, name trick", `{"tool": " Approve_Withdrawal ", "args": {"record_id": "WD-1"}}`, 403, "not_callable", "tool", "plan_approve_withdrawal"},
		{"plan of a write tool", `{"tool": "plan_add_note", "args": {"record_id": "WD-1", "text": "x"}}`, 404, "unknown_tool", "tool", "plan_approve_withdrawal"},
		{"oversized body", big, 413, "too_large", "", "larger than"},
		{"run window without a run", `{"tool": "limited_note", "args": {"record_id": "WD-1", "text": "x"}}`, 400, "missing_field", "run_id", "run id"},
		{"NUL in the run id", `{"tool": "add_note", "args": {"record_id": "WD-1", "text": "x"}, "run_id": "r\u0000"}`, 400, "invalid_argument", "run_id", "NUL"},
		{"run id too long", `{"tool": "add_note", "args": {"record_id": "WD-1", "text": "x"}, "run_id": "` + strings.Repeat("r", 300) + `"}`, 400, "invalid_argument", "run_id", "at most 256 bytes"},
		{"NUL in a natural-key value", `{"tool": "add_note", "args": {"record_id": "WD-\u0000", "text": "x"}}`, 400, "invalid_argument", "args", "NUL"},
		{"invalid UTF-8 in a natural-key value", "{\"tool\": \"add_note\", \"args\": {\"record_id\": \"X\xff\xfe\", \"text\": \"x\"}}", 400, "invalid_argument", "body", "not valid UTF-8"},
		{"unpaired surrogate", `{"tool": "add_note", "args": {"record_id": "X\ud800", "text": "x"}}`, 400, "invalid_argument", "body", "surrogate"},
		{"huge tool name", `{"tool": "` + strings.Repeat("t", 5000) + `", "args": {}}`, 400, "invalid_argument", "tool", "at most 64 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, body := apiCall(t, "POST", calls, agentToken, tc.body)
			e, _ := body["error"].(map[string]any)
			if status != tc.status || e["code"] != tc.code || (tc.field != "" && e["field"] != tc.field) || !strings.Contains(fmt.Sprint(e["message"]), tc.contains) {
				t.Fatalf("got %d %v; want %d %s field %q containing %q", status, body, tc.status, tc.code, tc.field, tc.contains)
			}
		})
	}
	t.Run("budget", func(t *testing.T) {
		t.Parallel()
		for i := range 3 {
			status, body := apiCall(t, "POST", calls, agentToken, fmt.Sprintf(`{"tool":"limited_note","args":{"record_id":"WD-9","text":"n%d"}}`, i), "X-Airlock-Run", "run-budget")
			if i < 2 && status != 200 {
				t.Fatalf("call %d: %d %v", i, status, body)
			}
			if i == 2 {
				e, _ := body["error"].(map[string]any)
				if status != 429 || e["code"] != "budget_exceeded" || !strings.Contains(fmt.Sprint(e["message"]), "max_calls_per_run") {
					t.Fatalf("past the budget: %d %v", status, body)
				}
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		// Nothing of the bad input reached the upstream: only the two
		// budgeted notes did.
		if s := stats(t, payments); s.Calls != 2 {
			t.Errorf("upstream calls %d, want 2 (the budget test's)", s.Calls)
		}
	})
}

func TestE2EAuthMatrix(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	u := airlockProc.url()
	call := `{"tool":"get_withdrawal","args":{"record_id":"WD-1"}}`
	settle := `{"happened": false, "note": "checked"}`
	for _, tc := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", "POST", "/v1/calls", "", call, 401},
		{"wrong token", "POST", "/v1/calls", "nope", call, 401},
		{"agent calls", "POST", "/v1/calls", agentToken, call, 200},
		{"approver cannot call", "POST", "/v1/calls", approverToken, call, 403},
		{"admin calls", "POST", "/v1/calls", adminToken, call, 200},
		{"agent cannot list the registry", "GET", "/v1/tools", agentToken, "", 403},
		{"approver lists the registry", "GET", "/v1/tools", approverToken, "", 200},
		{"agent cannot read records", "GET", "/v1/records/abc", agentToken, "", 403},
		{"approver reads records", "GET", "/v1/records/abc", approverToken, "", 404},
		{"approver cannot settle", "POST", "/v1/records/abc/settle", approverToken, settle, 403},
		{"admin settles", "POST", "/v1/records/abc/settle", adminToken, settle, 404},
		{"approver cannot reach MCP", "POST", "/mcp", approverToken, `{}`, 403},
		{"no token on MCP", "POST", "/mcp", "", `{}`, 401},
		{"agent cannot read metrics", "GET", "/metrics", agentToken, "", 403},
		{"approver cannot read metrics", "GET", "/metrics", approverToken, "", 403},
		{"admin reads metrics", "GET", "/metrics", adminToken, "", 200},
		{"agent cannot read the report", "GET", "/v1/report", agentToken, "", 403},
		{"approver reads the report", "GET", "/v1/report?since=1h", approverToken, "", 200},
		{"bad report period", "GET", "/v1/report?since=soon", approverToken, "", 400},
		{"health needs no token", "GET", "/healthz", "", "", 200},
		{"readiness needs no token", "GET", "/readyz", "", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if status, body := apiCall(t, tc.method, u+tc.path, tc.token, tc.body); status != tc.want {
				t.Fatalf("%s %s: %d %v, want %d", tc.method, tc.path, status, body, tc.want)
			}
		})
	}
	t.Run("cross-origin MCP request is refused", func(t *testing.T) {
		t.Parallel()
		status, _ := apiCall(t, "POST", u+"/mcp", agentToken, `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "application/json")
		if status != http.StatusForbidden {
			t.Fatalf("cross-origin: %d, want 403", status)
		}
	})
}

func TestE2EStdioServer(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	c := mcp.NewClient(&mcp.Implementation{Name: "desktop-agent", Version: "v1"}, nil)
	cmd := exec.Command(bin(t, "airlock"), "mcp", "--config", config, "--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	cmd.Env = tokenEnv
	s, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := structured(t, callNote(t, s, "add_note", "WD-5", "stdio"))
	second := structured(t, callNote(t, s, "add_note", "WD-5", "stdio"))
	if first["repeat"] != false || second["repeat"] != true {
		t.Fatalf("first %v second %v", first, second)
	}
	if n := len(stats(t, payments).Notes["WD-5"]); n != 1 {
		t.Fatalf("upstream executed %d times", n)
	}
}

// Replicas started together on a fresh database all come up: airlock's
// migrations and the commit queue's (River's) run under one lock, so one
// replica migrates and the others find the schema done. Three trials.
func TestE2EReplicasStartTogetherOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	for trial := range 3 {
		t.Run(fmt.Sprint("trial ", trial), func(t *testing.T) {
			dsn := testdb.Schema(t)
			config := e2eManifest(t, payments.url(), "", "", "")
			var cmds []*exec.Cmd
			for range 3 {
				cmd := exec.Command(bin(t, "airlock"), "serve", "--config", config, "--db", dsn, "--listen", freeAddr(t))
				cmd.Env = append(os.Environ(), tokenEnv...)
				cmds = append(cmds, cmd)
			}
			for i, p := range startCmds(t, cmds...) {
				status, body := apiCall(t, "POST", p.url()+"/v1/calls", agentToken,
					fmt.Sprintf(`{"tool":"add_note","args":{"record_id":"WD-%d-%d","text":"up"}}`, trial, i))
				if status != 200 {
					t.Fatalf("replica %d: %d %v", i, status, body)
				}
			}
		})
	}
}

func TestE2EThreeReplicasOnePostgres(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	payments := startPayments(t) // naive: airlock alone must keep it to one execution per key
	config := e2eManifest(t, payments.url(), "", "", "")
	replicas := []*proc{serve(t, config, dsn), serve(t, config, dsn), serve(t, config, dsn)}
	sameWorkFromManyCallers(t, replicas, payments, 200, 8)
}

// sameWorkFromManyCallers sends each of keys pieces of work from callers
// callers at once, spread over the replicas, and checks that every caller
// was answered succeeded and that each piece ran once at the upstream.
func sameWorkFromManyCallers(t *testing.T, replicas []*proc, payments *proc, keys, callers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, keys*callers)
	for k := range keys {
		for c := range callers {
			wg.Go(func() {
				r := replicas[(k+c)%len(replicas)]
				status, body, err := tryAPICall("POST", r.url()+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"add_note","args":{"record_id":"WD-%d","text":"x"}}`, k))
				if err != nil || status != 200 || body["status"] != "succeeded" {
					errs <- fmt.Sprintf("key %d caller %d: %d %v %v", k, c, status, body, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	st := stats(t, payments)
	if st.Calls != keys {
		t.Errorf("upstream executed %d calls for %d keys", st.Calls, keys)
	}
	for k := range keys {
		if n := len(st.Notes[fmt.Sprintf("WD-%d", k)]); n != 1 {
			t.Errorf("WD-%d executed %d times", k, n)
		}
	}
}

func TestE2EGracefulShutdownFinishesInFlightCalls(t *testing.T) {
	t.Parallel()
	payments := startPayments(t, "--latency", "1500ms")
	db := filepath.Join(t.TempDir(), "a.db")
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+db)
	type reply struct {
		status int
		body   map[string]any
		err    error
	}
	done := make(chan reply, 1)
	go func() {
		s, b, err := tryAPICall("POST", airlockProc.url()+"/v1/calls", agentToken, `{"tool":"add_note","args":{"record_id":"WD-3","text":"late"}}`)
		done <- reply{s, b, err}
	}()
	// Stop airlock once the call is at the upstream (claimed, in flight).
	for deadline := time.Now().Add(30 * time.Second); stats(t, payments).InFlight == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the upstream")
		}
	}
	airlockProc.stop()
	r := <-done
	if r.err != nil || r.status != 200 || r.body["status"] != "succeeded" {
		t.Fatalf("in-flight call during shutdown: %d %v %v", r.status, r.body, r.err)
	}
	// Restarted on the same database, the record is complete: a repeat
	// gets the result, nothing runs again.
	again := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+db)
	status, body := apiCall(t, "POST", again.url()+"/v1/calls", agentToken, `{"tool":"add_note","args":{"record_id":"WD-3","text":"late"}}`)
	if status != 200 || body["repeat"] != true || body["status"] != "succeeded" {
		t.Fatalf("after restart: %d %v", status, body)
	}
	if n := len(stats(t, payments).Notes["WD-3"]); n != 1 {
		t.Fatalf("executed %d times", n)
	}
}

func TestServeRefusesPublicAddressWithoutTokens(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "serve", "--listen", "0.0.0.0:0", "--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"), "--example-payments", "off")
	if r.code == 0 || !strings.Contains(r.stderr, "without tokens") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestE2EAgentSimulatorThroughAirlock(t *testing.T) {
	t.Parallel()
	payments := startPayments(t, "--latency", "1200ms")
	airlockProc := serve(t, e2eManifest(t, payments.url(), "", "", ""), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	records := "WD-24811,WD-24812,WD-24813"
	out, err := exec.Command(bin(t, "agent"), "--url", airlockProc.url()+"/mcp", "--token", agentToken,
		"--tool", "add_note", "--records", records, "--timeout", "500ms", "--retries", "5").Output()
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	timeouts := strings.Count(string(out), `"outcome":"timeout"`)
	if timeouts == 0 {
		t.Fatalf("the agent never timed out, so this tested nothing:\n%s", out)
	}
	time.Sleep(1500 * time.Millisecond)
	st := stats(t, payments)
	for _, r := range strings.Split(records, ",") {
		if n := len(st.Notes[r]); n != 1 {
			t.Errorf("%s: executed %d times after %d timeouts and retries, want 1\n%s", r, n, timeouts, out)
		}
	}
}

func TestE2EServeWithNoFlagsRunsTheExample(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(bin(t, "airlock"), "serve", "--listen", freeAddr(t), "--db", "sqlite:"+filepath.Join(dir, "data", "airlock.db"))
	cmd.Dir = dir
	p := startCmd(t, cmd)
	out := p.output()
	for _, want := range []string{"dev tokens", "agent:", "approver:", "admin:", "MCP:  http://", "/mcp", "API:", "UI:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("serve did not print %q:\n%s", want, out)
		}
	}
	var agent string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "agent:"); ok {
			agent = strings.TrimSpace(v)
		}
	}
	s := mcpClient(t, p.url(), agent)
	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "add_note,get_withdrawal,plan_approve_withdrawal,plan_status" {
		t.Fatalf("tools %v", names)
	}
	if status, _ := apiCall(t, "GET", p.url()+"/readyz", "", ""); status != 200 {
		t.Fatalf("readyz %d", status)
	}
}

func TestE2EPlanApproveCommit(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	config := e2eManifest(t, payments.url(), "", "", "")
	airlockProc := serve(t, config, dsn)
	s := mcpClient(t, airlockProc.url(), agentToken)
	ctx := context.Background()

	// The irreversible tool itself is refused, pointing at plan_T.
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "approve_withdrawal", Arguments: map[string]any{"record_id": "WD-77"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "plan_approve_withdrawal") {
		t.Fatalf("direct call: %v %+v", err, res)
	}
	first, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": "WD-77"}})
	if err != nil {
		t.Fatal(err)
	}
	a := structured(t, first)
	p, _ := a["plan"].(map[string]any)
	if a["status"] != "planned" || p["status"] != "awaiting_approval" || p["rule"] != "all" || p["id"] == nil {
		t.Fatalf("plan: %v", a)
	}
	if raw, _ := json.Marshal(a); strings.Contains(string(raw), `"key"`) {
		t.Fatalf("the plan carries the key: %s", raw)
	}
	again := structured(t, func() *mcp.CallToolResult {
		r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": "WD-77"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}())
	if again["repeat"] != true || again["plan"].(map[string]any)["id"] != p["id"] {
		t.Fatalf("repeat: %v", again)
	}
	id := p["id"].(string)
	if _, ok := p["decision_hash"]; ok {
		t.Fatalf("the agent was given the decision hash: %v", p)
	}
	// The approver reads it with the plan.
	_, full := apiCall(t, "GET", airlockProc.url()+"/v1/plans/"+id, approverToken, "")
	hash := full["decision_hash"].(string)
	decide := fmt.Sprintf(`{"reason":"checked the ledger","decision_hash":%q}`, hash)
	if status, _ := apiCall(t, "POST", airlockProc.url()+"/v1/plans/"+id+"/approve", agentToken, decide); status != 403 {
		t.Fatalf("an agent approved: %d", status)
	}
	if status, body := apiCall(t, "POST", airlockProc.url()+"/v1/plans/"+id+"/approve", approverToken, `{"reason":"x","decision_hash":"stale"}`); status != 409 {
		t.Fatalf("stale hash: %d %v", status, body)
	}
	for range 2 {
		if status, body := apiCall(t, "POST", airlockProc.url()+"/v1/plans/"+id+"/approve", approverToken, decide); status != 200 {
			t.Fatalf("approve: %d %v", status, body)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, body := apiCall(t, "GET", airlockProc.url()+"/v1/plans/"+id, approverToken, "")
		if body["status"] == "committed" {
			if body["decided_by"] != "alice" {
				t.Fatalf("decided by %v", body["decided_by"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not committed: %v", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := stats(t, payments)
	if st.Approvals["WD-77"] != 1 {
		t.Fatalf("approved %d times", st.Approvals["WD-77"])
	}
	status, body := apiCall(t, "POST", airlockProc.url()+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"plan_status","args":{"plan_id":%q}}`, id))
	if status != 200 || body["status"] != "succeeded" {
		t.Fatalf("plan_status: %d %v", status, body)
	}

	// The CLI: list against the server, approve against the database.
	second := structured(t, func() *mcp.CallToolResult {
		r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": "WD-78"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}())
	id2 := second["plan"].(map[string]any)["id"].(string)
	r := runCLI(t, "plans", "list", "--url", airlockProc.url(), "--token", approverToken, "--status", "awaiting_approval")
	if r.code != 0 || !strings.Contains(r.stdout, id2) || strings.Contains(r.stdout, id+" ") {
		t.Fatalf("plans list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "plans", "reject", id2, "--url", airlockProc.url(), "--token", agentToken, "--reason", "x"); r.code == 0 {
		t.Fatalf("an agent token rejected a plan: %s", r.stdout)
	}
	if r := runCLI(t, "plans", "approve", id2, "--db", dsn, "--config", config, "--as", "bob", "--reason", "looked fine"); r.code != 0 || !strings.Contains(r.stdout, "approved by bob") {
		t.Fatalf("plans approve --db: %d %s %s", r.code, r.stdout, r.stderr)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		r := runCLI(t, "plans", "show", id2, "--url", airlockProc.url(), "--token", approverToken, "--format", "json")
		if strings.Contains(r.stdout, `"status": "committed"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's queue did not commit the plan approved on the database:\n%s", r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The plan's audit trail, a page at a time, by its id; bad parameters
	// are refused naming the parameter; an agent may not read the log.
	status, page := apiCall(t, "GET", airlockProc.url()+"/v1/audit?plan_id="+id+"&limit=2", approverToken, "")
	events, _ := page["events"].([]any)
	if status != 200 || len(events) != 2 || page["next_after"] == float64(0) || events[0].(map[string]any)["kind"] != "planned" {
		t.Fatalf("GET /v1/audit: %d %v", status, page)
	}
	status, rest := apiCall(t, "GET", fmt.Sprintf("%s/v1/audit?plan_id=%s&after=%.0f", airlockProc.url(), id, page["next_after"]), approverToken, "")
	if more, _ := rest["events"].([]any); status != 200 || len(more) == 0 || more[0].(map[string]any)["id"].(float64) <= page["next_after"].(float64) {
		t.Fatalf("the next page: %d %v", status, rest)
	}
	for query, field := range map[string]string{"": "key", "plan_id=" + id + "&after=x": "after", "plan_id=" + id + "&limit=1000000000": "limit", "plan_id=" + id + "&status=z": "status"} {
		status, e := apiCall(t, "GET", airlockProc.url()+"/v1/audit?"+query, approverToken, "")
		if body, _ := e["error"].(map[string]any); status != 400 || body["field"] != field {
			t.Fatalf("GET /v1/audit?%s: %d %v, want 400 naming %s", query, status, e, field)
		}
	}
	// Plans a page at a time, newest first, following next_after.
	var listed []string
	cursor := ""
	for range 20 {
		status, page := apiCall(t, "GET", airlockProc.url()+"/v1/plans?order=newest&limit=1&after="+cursor, approverToken, "")
		plans, _ := page["plans"].([]any)
		if status != 200 {
			t.Fatalf("GET /v1/plans: %d %v", status, page)
		}
		for _, p := range plans {
			listed = append(listed, p.(map[string]any)["id"].(string))
		}
		if cursor, _ = page["next_after"].(string); cursor == "" {
			break
		}
	}
	if status, all := apiCall(t, "GET", airlockProc.url()+"/v1/plans?order=newest", approverToken, ""); status != 200 || len(all["plans"].([]any)) != len(listed) || len(listed) < 2 {
		t.Fatalf("paged %v; all at once %d %v", listed, status, all)
	}
	for query, field := range map[string]string{"status=pending": "status", "after=zz": "after", "limit=0": "limit", "order=random": "order", "since=yesterday": "since", "colour=red": "colour", "limit=1&limit=2": "limit"} {
		status, e := apiCall(t, "GET", airlockProc.url()+"/v1/plans?"+query, approverToken, "")
		if body, _ := e["error"].(map[string]any); status != 400 || body["field"] != field {
			t.Fatalf("GET /v1/plans?%s: %d %v, want 400 naming %s", query, status, e, field)
		}
	}
	// Repeated and conflicting parameters are refused, naming them.
	for query, field := range map[string]string{"key=x&plan_id=" + id: "plan_id", "plan_id=" + id + "&limit=1&limit=2": "limit"} {
		status, e := apiCall(t, "GET", airlockProc.url()+"/v1/audit?"+query, approverToken, "")
		if body, _ := e["error"].(map[string]any); status != 400 || body["field"] != field {
			t.Fatalf("GET /v1/audit?%s: %d %v, want 400 naming %s", query, status, e, field)
		}
	}
	// Records in doubt, a page at a time; no other state is listed.
	if status, page := apiCall(t, "GET", airlockProc.url()+"/v1/records?state=in_doubt&limit=10", approverToken, ""); status != 200 || page["records"] == nil {
		t.Fatalf("GET /v1/records: %d %v", status, page)
	}
	for query, field := range map[string]string{"state=succeeded": "state", "after=zz": "after", "limit=0": "limit", "limit=1000000000": "limit", "colour=red": "colour", "limit=1&limit=2": "limit", "state=in_doubt&state=failed": "state"} {
		status, e := apiCall(t, "GET", airlockProc.url()+"/v1/records?"+query, approverToken, "")
		if body, _ := e["error"].(map[string]any); status != 400 || body["field"] != field {
			t.Fatalf("GET /v1/records?%s: %d %v, want 400 naming %s", query, status, e, field)
		}
	}
	if status, _ := apiCall(t, "GET", airlockProc.url()+"/v1/records", agentToken, ""); status != 403 {
		t.Fatalf("an agent listing records: %d", status)
	}
	if status, _ := apiCall(t, "GET", airlockProc.url()+"/v1/audit?plan_id="+id, agentToken, ""); status != 403 {
		t.Fatalf("an agent reading the audit log: %d", status)
	}

	// The report: asked of the server (--url) it is the one computed from
	// the database (--db); an agent token may not read it.
	var fromServer, fromDB metrics.Report
	for _, c := range []struct {
		out  *metrics.Report
		args []string
	}{
		{&fromServer, []string{"report", "--url", airlockProc.url(), "--token", approverToken, "--format", "json", "--since", "1h"}},
		{&fromDB, []string{"report", "--db", dsn, "--config", config, "--format", "json", "--since", "1h"}},
	} {
		r := runCLI(t, c.args...)
		if err := json.Unmarshal([]byte(r.stdout), c.out); err != nil || r.stderr != "" {
			t.Fatalf("%v: %d %v\n%s%s", c.args[:3], r.code, err, r.stdout, r.stderr)
		}
	}
	if fromServer.Calls == 0 || !reflect.DeepEqual(fromServer.Tools, fromDB.Tools) || fromServer.AuditCompleteness != fromDB.AuditCompleteness {
		t.Fatalf("report --url differs from report --db:\n%+v\n%+v", fromServer, fromDB)
	}
	if r := runCLI(t, "report", "--url", airlockProc.url(), "--token", agentToken); r.code == 0 || r.stdout != "" || r.stderr == "" {
		t.Fatalf("report with an agent token: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "report", "--url", airlockProc.url()); r.code == 0 || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("report --url without a token: %d %s", r.code, r.stderr)
	}
}

func TestE2ECommitSurvivesAKilledWorker(t *testing.T) {
	t.Parallel()
	for _, db := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "a.db") }},
		{"PostgreSQL", func(t *testing.T) string { return testdb.Schema(t) }},
		// River polls (no LISTEN), statements are unprepared.
		{"PostgreSQL behind PgBouncer", func(t *testing.T) string {
			return testdb.PgBouncer(t, testdb.Schema(t), "transaction", 2) + "&pool_mode=transaction"
		}},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			commitSurvivesAKilledWorker(t, db.dsn(t))
		})
	}
}

func commitSurvivesAKilledWorker(t *testing.T, dsn string) {
	// The payments service honours idempotency keys (its own middleware),
	// and takes 3 s to approve.
	payments := startPayments(t, "--db", filepath.Join(t.TempDir(), "payments.db"), "--latency", "3s")
	config := filepath.Join(t.TempDir(), "airlock.yaml")
	src := fmt.Sprintf(`version: 1
auth:
  tokens:
    - {name: agent-1, role: agent, env: E2E_AGENT}
    - {name: alice, role: approver, env: E2E_APPROVER}
upstreams:
  payments: {http: %q, honors_idempotency_key: true}
tools:
  - name: approve_withdrawal
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /withdrawals/approve}
    answers: {undo: "No.", approver: "Automatic.", on_repeat: "The first approval."}
    approval: {rules: [{name: always, when: "true", decide: auto}]}
`, payments.url())
	if err := os.WriteFile(config, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"serve", "--config", config, "--db", dsn, "--lease", "2s", "--commit-rescue-after", "4s"}
	first := start(t, tokenEnv, bin(t, "airlock"), append(flags, "--listen", freeAddr(t))...)
	status, body := apiCall(t, "POST", first.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-9"}}`)
	if status != 200 {
		t.Fatalf("propose: %d %v", status, body)
	}
	id := body["plan"].(map[string]any)["id"].(string)
	time.Sleep(1500 * time.Millisecond) // the commit is at the payments service now
	_ = first.cmd.Process.Kill()        // SIGKILL mid-commit
	<-first.exited

	second := start(t, tokenEnv, bin(t, "airlock"), append(flags, "--listen", freeAddr(t))...)
	deadline := time.Now().Add(45 * time.Second)
	for {
		_, p := apiCall(t, "GET", second.url()+"/v1/plans/"+id, approverToken, "")
		if p["status"] == "committed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plan not committed after the worker was killed: %v", p)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st := stats(t, payments); st.Approvals["WD-9"] != 1 {
		t.Fatalf("approved %d times across the kill and the retry", st.Approvals["WD-9"])
	}
}
