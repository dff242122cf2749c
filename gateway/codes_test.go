package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// Over stdio, a request before initialize is answered with a JSON-RPC
// code (-32600, saying to initialize first; the SDK alone answers code 0,
// which JSON-RPC does not have), ping is answered, and the session then
// initializes and serves as usual.
func TestStdioRequestBeforeInitializeGetsAValidCode(t *testing.T) {
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
			t.Logf("the stdio server ended: %v", err) // its input closed: any end will do
		}
	})
	lines := bufio.NewScanner(outR)
	send := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s: %v", line, lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return m
	}
	for _, method := range []string{"tools/list", "tools/call", "resources/list"} {
		out := send(`{"jsonrpc":"2.0","id":"early","method":"` + method + `","params":{"name":"lookup","arguments":{}}}`)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e == nil || e["code"] != float64(-32600) || !strings.Contains(msg, "send initialize first") || out["id"] != "early" {
			t.Errorf("%s before initialize: %v, want -32600 saying to initialize first", method, out)
		}
	}
	if out := send(`{"jsonrpc":"2.0","id":1,"method":"ping"}`); out["result"] == nil {
		t.Errorf("ping before initialize: %v", out)
	}
	out := send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if res, _ := out["result"].(map[string]any); res["protocolVersion"] != "2025-11-25" {
		t.Fatalf("initialize: %v", out)
	}
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if res, _ := send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)["result"].(map[string]any); res["tools"] == nil {
		t.Fatalf("tools/list after initialize: %v", res)
	}
}

// Over HTTP, what the SDK refuses before any handler runs has a JSON-RPC
// code too: a request without a session that is not 2026-07-28 (-32600,
// saying to initialize first) and an initialize whose params it cannot
// decode (-32602).
func TestMCPRefusalsBeforeAHandlerGetValidCodes(t *testing.T) {
	t.Parallel()
	url := setupFront(t)
	for _, tc := range []struct {
		name, body string
		code       float64
		message    string
	}{
		{"a request without a session", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, -32600, "send initialize first"},
		{"initialize's params", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5}}`, -32602, "protocolVersion"},
	} {
		_, _, out, _ := rawPost(t, url, tc.body, "Mcp-Protocol-Version", "2025-11-25")
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e == nil || e["code"] != tc.code || !strings.Contains(msg, tc.message) || out["id"] != float64(1) {
			t.Errorf("%s: %v, want code %v naming %q", tc.name, out, tc.code, tc.message)
		}
	}
}
