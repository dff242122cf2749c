package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/gateway"
)

// rawPost posts body to /mcp and returns the answer's JSON-RPC message
// (an event stream's first data) and its content type.
func rawPost(t *testing.T, url, body string, header ...string) (int, string, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+frontToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.HasPrefix(data, "{") {
				raw = []byte(data)
				break
			}
		}
	}
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("the answer is not JSON (%s): %v: %s", ct, err, raw)
		}
	}
	return resp.StatusCode, ct, out, resp.Header
}

// openSession initializes a 2025-11-25 session and returns its id.
func openSession(t *testing.T, url string) string {
	t.Helper()
	status, _, out, h := rawPost(t, url, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		"Mcp-Protocol-Version", "2025-11-25")
	id := h.Get("Mcp-Session-Id")
	if status != 200 || id == "" {
		t.Fatalf("initialize: HTTP %d %v", status, out)
	}
	if s, _, _, _ := rawPost(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25"); s != http.StatusAccepted {
		t.Fatalf("notifications/initialized: HTTP %d", s)
	}
	return id
}

// The fast path answers a tools/call of a guarded write exactly as the
// SDK's path does — the same JSON-RPC message, for new calls, repeats,
// refusals and errors, in a session and on 2026-07-28 — and leaves every
// request it does not serve to the SDK. Two gateways, one with the fast
// path and one without, get the same requests.
func TestMCPFastPathAnswersAsTheSDK(t *testing.T) {
	t.Parallel()
	fast := httptest.NewServer(frontGateway(t).Handler())
	t.Cleanup(fast.Close)
	slowG := frontGateway(t)
	gateway.DisableFastPath(slowG)
	slow := httptest.NewServer(slowG.Handler())
	t.Cleanup(slow.Close)
	sessions := map[string]string{fast.URL: openSession(t, fast.URL), slow.URL: openSession(t, slow.URL)}

	const v2 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`
	v2Headers := []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "note"}
	cases := []struct {
		name      string
		session   bool
		body      string
		header    []string
		wantFast  bool // answered by the fast path (JSON, not an event stream)
		wantError bool // a JSON-RPC error, not a result
	}{
		{name: "session: new call", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-1"}}}`},
		{name: "session: repeat with a new id", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":"x-2","method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-1"}}}`},
		{name: "session: named run, call id, trace context", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-2"},"_meta":{"io.airlock/run":"r1","io.airlock/call-id":"c1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}`},
		{name: "session: arguments against the schema", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"note","arguments":{"record_id":7}}}`},
		{name: "session: no arguments", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"note"}}`},
		{name: "session: a fourth call of the run is refused", session: true, wantFast: true,
			body: `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-3"}}}`},
		{name: "session: a read goes to the SDK", session: true,
			body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{"record_id":"S-1"}}}`},
		{name: "session: a progress token goes to the SDK", session: true,
			body: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-4"},"_meta":{"io.airlock/run":"r2","progressToken":"p"}}}`},
		{name: "session: a task goes to the SDK", session: true,
			body: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-5"},"task":{"ttl":60000},"_meta":{"io.airlock/run":"r3"}}}`},
		{name: "session: an unknown tool goes to the SDK", session: true, wantError: true,
			body: `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope","arguments":{}}}`},
		{name: "session: Mcp-Name of another tool goes to the SDK", session: true, header: []string{"Mcp-Name", "lookup"},
			body: `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"S-6"},"_meta":{"io.airlock/run":"r4"}}}`},
		{name: "2026-07-28: new call", wantFast: true, header: v2Headers,
			body: `{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-1"},` + v2 + `}}}`},
		{name: "2026-07-28: re-issued with a new id", wantFast: true, header: v2Headers,
			body: `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-1"},` + v2 + `}}}`},
		{name: "2026-07-28: client info", wantFast: true, header: v2Headers,
			body: `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-2"},` + v2 + `,"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}}`},
		{name: "2026-07-28: run in the header", wantFast: true, header: append([]string{"X-Airlock-Run", "hr"}, v2Headers...),
			body: `{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-3"},` + v2 + `}}}`},
		{name: "2026-07-28: no capabilities goes to the SDK", header: v2Headers, wantError: true,
			body: `{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-4"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`},
		{name: "2026-07-28: the header names another revision: to the SDK", header: []string{"Mcp-Protocol-Version", "2025-11-25"}, wantError: true,
			body: `{"jsonrpc":"2.0","id":26,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-5"},` + v2 + `}}}`},
		{name: "2026-07-28: tasks declared goes to the SDK", header: v2Headers,
			body: `{"jsonrpc":"2.0","id":27,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-6"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`},
		{name: "2026-07-28: Mcp-Param header goes to the SDK", header: append([]string{"Mcp-Param-Record", "N-7"}, v2Headers...),
			body: `{"jsonrpc":"2.0","id":28,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"N-7"},` + v2 + `}}}`},
	}
	for _, c := range cases {
		answers := map[string]map[string]any{}
		for _, url := range []string{fast.URL, slow.URL} {
			h := c.header
			if c.session {
				h = append([]string{"Mcp-Session-Id", sessions[url], "Mcp-Protocol-Version", "2025-11-25"}, h...)
			}
			status, ct, out, _ := rawPost(t, url, c.body, h...)
			if out == nil {
				t.Fatalf("%s: HTTP %d, no JSON-RPC answer", c.name, status)
			}
			if url == fast.URL && strings.HasPrefix(ct, "application/json") != c.wantFast && status == 200 {
				t.Errorf("%s: answered as %s, fast path %v", c.name, ct, c.wantFast)
			}
			if _, isErr := out["error"]; isErr != c.wantError {
				t.Errorf("%s: %v, want error %v", c.name, out, c.wantError)
			}
			answers[url] = withoutInstants(out)
		}
		if !reflect.DeepEqual(answers[fast.URL], answers[slow.URL]) {
			a, _ := json.MarshalIndent(answers[fast.URL], "", " ")
			b, _ := json.MarshalIndent(answers[slow.URL], "", " ")
			t.Errorf("%s: the fast path answered\n%s\nthe SDK\n%s", c.name, a, b)
		}
	}
}

// A session whose requests the fast path answers is not idle: it stays
// open past limits.mcp_session_idle while it is used, and closes once it
// is left alone.
func TestMCPSessionUsedThroughTheFastPathStaysOpen(t *testing.T) {
	t.Parallel()
	const idle = 600 * time.Millisecond
	g := frontGatewayWith(t, testManifest, frontFuncs(), func(c *gateway.Config) { c.MCPSessionIdle = idle })
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(g.CloseSessions)
	id := openSession(t, srv.URL)
	h := []string{"Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25"}
	deadline := time.Now().Add(3 * idle)
	for i := 0; time.Now().Before(deadline); i++ {
		status, ct, out, _ := rawPost(t, srv.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"I-1"}}}`, h...)
		if status != 200 || !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("call %d: HTTP %d %s %v", i, status, ct, out)
		}
		time.Sleep(idle / 4)
	}
	// Still open for the SDK's own methods.
	if status, _, out, _ := rawPost(t, srv.URL, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, h...); status != 200 || out["result"] == nil {
		t.Fatalf("ping after %v of fast-path calls: HTTP %d %v, want the session open", 3*idle, status, out)
	}
	time.Sleep(2 * idle)
	if status, _, _, _ := rawPost(t, srv.URL, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, h...); status != http.StatusNotFound {
		t.Fatalf("ping after %v idle: HTTP %d, want 404 (closed)", 2*idle, status)
	}
}

// withoutInstants drops what two gateways cannot agree on — a task's id
// (derived from its record's, made at random) and its instants — from a
// JSON-RPC answer.
func withoutInstants(v map[string]any) map[string]any {
	if res, ok := v["result"].(map[string]any); ok {
		if task, ok := res["task"].(map[string]any); ok {
			for _, k := range []string{"taskId", "createdAt", "lastUpdatedAt"} {
				if _, ok := task[k]; ok {
					task[k] = "…"
				}
			}
		}
	}
	return v
}
