package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/upstream"
)

// statelessCall posts one 2026-07-28 request: no session, the revision in
// the header and in _meta, the method (and name) in their headers.
func statelessCall(t *testing.T, url string, id any, method, name string, params map[string]any, header ...string) (int, map[string]any) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	h := append([]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}, header...)
	if name != "" {
		h = append(h, "Mcp-Name", name)
	}
	return postMCP(t, url, string(body), h...)
}

// A 2026-07-28 client is served without a session on the same /mcp:
// tools are listed, a write runs once and its repeat is marked, the run is
// _meta's, else the header's, else the principal's, and the actor is the
// token's principal.
func TestMCPStatelessRevision(t *testing.T) {
	t.Parallel()
	var executed atomic.Int64
	funcs := frontFuncs()
	funcs["note"] = upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		executed.Add(1)
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"noted":true}`)}
	})
	var store interface {
		AuditSince(context.Context, *airlock.AuditSinceParams) ([]*airlock.AuditEvent, error)
	}
	g := frontGatewayWith(t, testManifest, funcs, func(c *gateway.Config) {
		store = c.Store.(interface {
			AuditSince(context.Context, *airlock.AuditSinceParams) ([]*airlock.AuditEvent, error)
		})
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)

	status, out := statelessCall(t, srv.URL, 1, "tools/list", "", nil)
	res, _ := out["result"].(map[string]any)
	if status != 200 || res == nil {
		t.Fatalf("tools/list: HTTP %d %v", status, out)
	}
	var names []string
	for _, tool := range res["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "note") || strings.Contains(" "+got+" ", " pay ") {
		t.Errorf("tools %v", names)
	}

	call := func(id any, record string, meta map[string]any, header ...string) map[string]any {
		t.Helper()
		params := map[string]any{"name": "note", "arguments": map[string]any{"record_id": record}}
		if meta != nil {
			params["_meta"] = meta
		}
		status, out := statelessCall(t, srv.URL, id, "tools/call", "note", params, header...)
		res, _ := out["result"].(map[string]any)
		if status != 200 || res == nil || out["id"] != id {
			t.Fatalf("tools/call %s: HTTP %d %v", record, status, out)
		}
		sc, _ := res["structuredContent"].(map[string]any)
		return sc
	}
	// A client that lost its stream re-issues the call with a new id.
	if sc := call("a-1", "R-1", nil); sc["status"] != "succeeded" || sc["repeat"] == true {
		t.Fatalf("first call %v", sc)
	}
	if sc := call("a-2", "R-1", nil); sc["status"] != "succeeded" || sc["repeat"] != true {
		t.Fatalf("re-issued call %v, want a repeat", sc)
	}
	if n := executed.Load(); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
	// max_calls_per_run (3) counts the principal's sessionless calls that
	// name no run as one run; a named run has its own budget.
	call("b-1", "R-2", nil)
	call("b-2", "R-3", nil)
	if sc := call("b-3", "R-4", nil); sc["error"] == nil || !strings.Contains(fmt.Sprint(sc["error"]), "max_calls_per_run") {
		t.Errorf("a fourth call of the default run: %v, want the budget's refusal", sc)
	}
	if sc := call("c-1", "R-4", map[string]any{"io.airlock/run": "run-meta"}); sc["status"] != "succeeded" {
		t.Errorf("a call of a named run: %v", sc)
	}
	if sc := call("c-2", "R-5", nil, "X-Airlock-Run", "run-header"); sc["status"] != "succeeded" {
		t.Errorf("a call of a run named in the header: %v", sc)
	}
	runs := map[string]string{} // record → run
	events, err := store.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Time{}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Kind != airlock.EventClaimed {
			continue
		}
		var args struct {
			RecordID string `json:"record_id"`
		}
		_ = json.Unmarshal(e.Args, &args)
		runs[args.RecordID] = e.RunID
		if e.Actor != "agent" {
			t.Errorf("claimed %s by %q, want the token's principal agent", args.RecordID, e.Actor)
		}
	}
	want := map[string]string{"R-1": "stateless:agent", "R-2": "stateless:agent", "R-3": "stateless:agent", "R-4": "run-meta", "R-5": "run-header"}
	for record, run := range want {
		if runs[record] != run {
			t.Errorf("%s ran in run %q, want %q (all: %v)", record, runs[record], run, runs)
		}
	}
}

// Bad input on the stateless path gets a JSON-RPC error naming the
// problem, and nothing runs.
func TestMCPStatelessBadInput(t *testing.T) {
	t.Parallel()
	var executed atomic.Int64
	funcs := frontFuncs()
	funcs["note"] = upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		executed.Add(1)
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
	})
	srv := httptest.NewServer(frontGatewayWith(t, testManifest, funcs).Handler())
	t.Cleanup(srv.Close)
	call := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"R-9"},"_meta":%s}}`
	for _, tc := range []struct {
		name, body string
		header     []string
		code       float64
		message    string
	}{
		{"a version nobody speaks, in the header", fmt.Sprintf(call, `{}`), []string{"Mcp-Protocol-Version", "2099-01-01", "Mcp-Method", "tools/call", "Mcp-Name", "note"}, -32022, `protocol version "2099-01-01" is not one airlock speaks`},
		{"an old version nobody speaks", fmt.Sprintf(call, `{}`), []string{"Mcp-Protocol-Version", "2023-01-01"}, -32022, `"2023-01-01"`},
		{"a version nobody speaks, in _meta", fmt.Sprintf(call, `{"io.modelcontextprotocol/protocolVersion":"2026-13-01","io.modelcontextprotocol/clientCapabilities":{}}`), nil, -32022, `"2026-13-01"`},
		{"_meta not an object", fmt.Sprintf(call, `"2026-07-28"`), nil, -32602, `"_meta" must be an object`},
		{"the revision not a string", fmt.Sprintf(call, `{"io.modelcontextprotocol/protocolVersion":20260728}`), nil, -32602, `_meta["io.modelcontextprotocol/protocolVersion"] must be a string, not a number`},
		{"the run not a string", fmt.Sprintf(call, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.airlock/run":{"id":1}}`), []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "note"}, -32602, `_meta["io.airlock/run"] must be a string, not an object`},
		{"capabilities not an object", fmt.Sprintf(call, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}`), nil, -32602, `_meta["io.modelcontextprotocol/clientCapabilities"] must be an object, not an array`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out := postMCP(t, srv.URL, tc.body, tc.header...)
			e, _ := out["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if status != 400 || e == nil || e["code"] != tc.code || !strings.Contains(msg, tc.message) || out["id"] != float64(5) {
				t.Errorf("HTTP %d %v; want 400, code %v naming %q, id 5", status, out, tc.code, tc.message)
			}
		})
	}
	if n := executed.Load(); n != 0 {
		t.Errorf("executed %d times, want 0", n)
	}
}
