package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

const frontToken = "front-agent-token"

// setupFront serves a gateway with a 4 KiB request limit on loopback.
func setupFront(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(frontGateway(t).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func frontGateway(t *testing.T) *gateway.Gateway {
	t.Helper()
	return frontGatewayWith(t, testManifest, frontFuncs())
}

// frontFuncs answers every tool of testManifest with {}.
func frontFuncs() map[string]upstream.Caller {
	ok := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
	})
	return map[string]upstream.Caller{"lookup": ok, "note": ok, "pay": ok}
}

func frontGatewayWith(t testing.TB, yaml string, funcs map[string]upstream.Caller, mods ...func(*gateway.Config)) *gateway.Gateway {
	t.Helper()
	m, err := manifest.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	guard := guard.New(s, nil)
	t.Cleanup(guard.Close)
	cfg := gateway.Config{Manifest: m, Guard: guard, Store: s, MaxBody: 4096,
		Funcs:  funcs,
		Tokens: []gateway.Token{{Name: "agent", Role: airlock.RoleAgent, SHA256: gateway.HashToken(frontToken)}}}
	for _, mod := range mods {
		mod(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.CloseSessions)
	return g
}

func postMCP(t *testing.T, url, body string, header ...string) (int, map[string]any) {
	t.Helper()
	status, ct, out, _ := rawPost(t, url, body, header...)
	if out == nil {
		t.Fatalf("HTTP %d: the answer (%s) is not a JSON-RPC message", status, ct)
	}
	return status, out
}

func TestMCPEdgeAnswersJSONRPCErrors(t *testing.T) {
	t.Parallel()
	url := setupFront(t)
	for _, tc := range []struct {
		name, body string
		status     int
		code       float64
		message    string
	}{
		{"not JSON", `{"jsonrpc": "2.0", "method": `, 400, -32700, "parse error: the body is not JSON"},
		{"empty", ``, 400, -32700, "the body is empty"},
		{"not an object", `"tools/list"`, 400, -32600, "is an object"},
		{"no jsonrpc", `{"id": 1, "method": "tools/list"}`, 400, -32600, `"jsonrpc" must be "2.0"`},
		{"jsonrpc 1.0", `{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}`, 400, -32600, `"jsonrpc" must be "2.0"`},
		{"no method", `{"jsonrpc": "2.0", "id": 1}`, 400, -32600, `"method" is required`},
		{"method not a string", `{"jsonrpc": "2.0", "id": 1, "method": 7}`, 400, -32600, `"method" must be a non-empty string`},
		{"too large", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "` + strings.Repeat("a", 5000) + `"}}`, 413, -32600, "larger than 4096 bytes (the limit is limits.request_bytes"},
		{"batch", `[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]`, 400, -32600, "a batch"},
		// The SDK would answer 1.5 as 1 and this id as -9223372036854775808.
		{"fractional id", `{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}`, 400, -32600, `"id" must be a string or an integer, not the fraction`},
		{"id beyond int64", `{"jsonrpc": "2.0", "id": 99999999999999999999999, "method": "tools/list"}`, 400, -32600, "beyond a 64-bit integer; send it as a string"},
		{"object id", `{"jsonrpc": "2.0", "id": {"n": 1}, "method": "tools/list"}`, 400, -32600, `"id" must be a string or an integer, not an object`},
		{"null id", `{"jsonrpc": "2.0", "id": null, "method": "tools/list"}`, 400, -32600, `not null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, out := postMCP(t, url, tc.body)
			e, _ := out["error"].(map[string]any)
			if status != tc.status || out["jsonrpc"] != "2.0" || e == nil || e["code"] != tc.code || !strings.Contains(e["message"].(string), tc.message) {
				t.Errorf("HTTP %d %v; want %d, code %v, a message with %q", status, out, tc.status, tc.code, tc.message)
			}
			// The request's own id where it could be read, else null.
			var want any
			if id := gjsonID(tc.body); id != nil && tc.status != 413 {
				want = id
			}
			if _, ok := out["id"]; !ok || out["id"] != want {
				t.Errorf("id %v, want %v", out["id"], want)
			}
		})
	}
	// Text the decoder would rewrite (two run ids or arguments becoming
	// one) is refused before the SDK reads it, answering the request's id.
	for _, tc := range []struct{ name, body, message string }{
		{"invalid UTF-8", "{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"tools/call\", \"params\": {\"name\": \"x\", \"_meta\": {\"io.airlock/run\": \"r\xff\"}}}", "not valid UTF-8 at byte"},
		{"unpaired surrogate", `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "arguments": {"id": "\udc00"}}}`, "unpaired UTF-16 surrogate"},
		// A member named twice: the SDK reads the last, a proxy or a log
		// perhaps the first.
		{"an argument twice", `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add_note", "arguments": {"record_id": "A", "record_id": "B"}}}`, `params.arguments.record_id: the member "record_id" is given twice`},
		{"the tool's name twice", `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add_note", "name": "pay", "arguments": {}}}`, `params.name: the member "name" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, out := postMCP(t, url, tc.body)
			e, _ := out["error"].(map[string]any)
			if status != 400 || e == nil || e["code"] != float64(-32602) || !strings.Contains(e["message"].(string), tc.message) || out["id"] != float64(3) {
				t.Errorf("HTTP %d %v; want 400, -32602 naming %q, id 3", status, out, tc.message)
			}
		})
	}
}

// server/discover is answered with every revision /mcp serves, 2026-07-28
// first, and initialize still opens a session at an earlier one.
func TestMCPDiscoverNamesTheServedRevisions(t *testing.T) {
	t.Parallel()
	url := setupFront(t)
	status, out := postMCP(t, url, `{"jsonrpc":"2.0","id":"d-1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover")
	res, _ := out["result"].(map[string]any)
	if status != 200 || out["id"] != "d-1" || res == nil {
		t.Fatalf("HTTP %d %v", status, out)
	}
	var got []string
	for _, v := range res["supportedVersions"].([]any) {
		got = append(got, v.(string))
	}
	if want := []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("supportedVersions %v, want %v", got, want)
	}
	if res["capabilities"].(map[string]any)["tools"] == nil {
		t.Errorf("capabilities %v: no tools", res["capabilities"])
	}
	// initialize at a session revision works, and opens a session.
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+frontToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") == "" || !strings.Contains(string(body), `"protocolVersion":"2025-11-25"`) {
		t.Errorf("initialize: HTTP %d, session %q: %s", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body)
	}
}

// Over stdio, bad lines get JSON-RPC errors and the session goes on.
func TestStdioEdgeAnswersAndGoesOn(t *testing.T) {
	t.Parallel()
	g := frontGateway(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.MCPServer().Run(ctx, g.StdioTransport(inR, outW)) }()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		if err := <-done; err != nil {
			t.Logf("the server ended: %v", err)
		}
	})
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no answer: %v", lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return m
	}
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, line string
		code       float64
		message    string
	}{
		{"not JSON", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"`, -32700, "parse error"},
		{"not JSON-RPC", `{"id": 1, "method": "tools/list"}`, -32600, `"jsonrpc" must be "2.0"`},
		{"too large", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"` + strings.Repeat("a", 200_000) + `"}}`, -32600, "larger than 4096 bytes"},
	} {
		send(tc.line)
		e, _ := next()["error"].(map[string]any)
		if e == nil || e["code"] != tc.code || !strings.Contains(e["message"].(string), tc.message) {
			t.Errorf("%s: error %v, want %v with %q", tc.name, e, tc.code, tc.message)
		}
	}
	// The session still works.
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if res, _ := next()["result"].(map[string]any); res["protocolVersion"] != "2025-11-25" {
		t.Fatalf("initialize after bad lines: %v", res)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if res, _ := next()["result"].(map[string]any); res["tools"] == nil {
		t.Fatalf("tools/list after bad lines: %v", res)
	}
}

// Every message over stdio that is not a request the server can serve — a
// batch, an id that is an object, a fraction or beyond int64, invalid
// JSON, an unknown method — gets a JSON-RPC error, and the server goes
// on: a call in flight still gets its answer, and a good call on the same
// pipe is served.
func TestStdioSurvivesBadMessages(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	funcs := frontFuncs()
	funcs["note"] = upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		<-release
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"noted":true}`)}
	})
	g := frontGatewayWith(t, testManifest, funcs)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var runErr error
	go func() {
		runErr = g.MCPServer().Run(ctx, g.StdioTransport(inR, outW))
		outW.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		<-exited
	})
	answers := make(chan map[string]any, 64)
	go func() {
		lines := bufio.NewScanner(outR)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		for lines.Scan() {
			var m map[string]any
			if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
				m = map[string]any{"unreadable": lines.Text()}
			}
			answers <- m
		}
		close(answers)
	}()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				<-exited
				t.Fatalf("%s: the server stopped answering (exit: %v)", what, runErr)
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer in 10 s", what)
			return nil
		}
	}
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("write %s: %v", line, err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next("initialize")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A write that waits until released: in flight through every bad line.
	send(`{"jsonrpc":"2.0","id":"in-flight","method":"tools/call","params":{"name":"note","arguments":{"record_id":"R-1"}}}`)
	for _, tc := range []struct {
		name, line string
		code       float64
		id         any
		message    string
	}{
		{"batch", `[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, -32600, nil, "batch"},
		{"empty batch", `[]`, -32600, nil, "batch"},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`, -32600, nil, `"id" must be a string or an integer`},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"tools/list"}`, -32600, nil, `"id" must be a string or an integer`},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"tools/list"}`, -32600, nil, `"id" must be a string or an integer`},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, -32600, nil, `"id" must be a string or an integer`},
		{"id beyond int64", `{"jsonrpc":"2.0","id":99999999999999999999999,"method":"tools/list"}`, -32600, nil, "64-bit"},
		{"exponent id", `{"jsonrpc":"2.0","id":1e3,"method":"tools/list"}`, -32600, nil, `"id" must be a string or an integer`},
		{"invalid JSON", `{"jsonrpc":"2.0",`, -32700, nil, "parse error"},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"no/such/method"}`, -32601, float64(7), "no/such/method"},
		{"a member's name in another case", `{"jsonrpC":"2.0","id":3,"method":"tools/list"}`, -32600, float64(3), `"jsonrpc" must be "2.0"`},
		{"nested too deep", `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}`, -32600, float64(4), "deeper than 1000"},
	} {
		send(tc.line)
		m := next(tc.name)
		e, _ := m["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e == nil || e["code"] != tc.code || !strings.Contains(msg, tc.message) || m["id"] != tc.id {
			t.Errorf("%s: answer %v; want code %v naming %q, id %v", tc.name, m, tc.code, tc.message, tc.id)
		}
	}
	close(release)
	if m := next("the call in flight"); m["id"] != "in-flight" || m["result"] == nil {
		t.Fatalf("the call in flight got %v", m)
	}
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"R-1"}}}`)
	m := next("a repeat after the bad lines")
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if m["id"] != float64(8) || sc["repeat"] != true {
		t.Fatalf("the repeat got %v", m)
	}
}

// gjsonID is a message's id when it is a string or an integer, else nil.
func gjsonID(body string) any {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal([]byte(body), &m) != nil {
		return nil
	}
	switch id := m.ID.(type) {
	case string:
		return id
	case float64:
		if id == float64(int64(id)) && id < 1<<53 {
			return id
		}
	}
	return nil
}
