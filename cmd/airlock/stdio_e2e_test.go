package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// airlock mcp over a real pipe: each message that is not a valid request
// gets a JSON-RPC error while a write is in flight, the process does not
// exit, the write gets its answer, and a repeat on the same pipe is served
// as a repeat (one execution at the payments service).
func TestE2EStdioSurvivesBadMessages(t *testing.T) {
	t.Parallel()
	payments := startPayments(t, "--latency", "500ms")
	config := e2eManifest(t, payments.url(), "", "", "")
	cmd := exec.Command(bin(t, "airlock"), "mcp", "--config", config, "--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	cmd.Env = append(cmd.Environ(), tokenEnv...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err := <-exited:
			t.Logf("airlock mcp exited: %v", err)
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	answers := make(chan map[string]any, 64)
	go func() {
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		for lines.Scan() {
			var m map[string]any
			if json.Unmarshal(lines.Bytes(), &m) == nil {
				answers <- m
			}
		}
		close(answers)
	}()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("%s: airlock mcp stopped answering: %v\n%s", what, <-exited, stderr.String())
			}
			return m
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer in 20 s\n%s", what, stderr.String())
			return nil
		}
	}
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write: %v\n%s", err, stderr.String())
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	next("initialize")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":"add_note","arguments":{"record_id":"WD-STDIO","text":"bad lines around"}}}`
	send(strings.Replace(call, "%q", `"first"`, 1))
	for _, tc := range []struct{ name, line, want string }{
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, "a batch"},
		{"object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, `"id" must be a string or an integer`},
		{"invalid JSON", `{"jsonrpc":"2.0","id":1,`, "parse error"},
		{"unknown method", `{"jsonrpc":"2.0","id":2,"method":"tasks/nonsense"}`, "tasks/nonsense"},
	} {
		send(tc.line)
		m := next(tc.name)
		e, _ := m["error"].(map[string]any)
		if msg, _ := e["message"].(string); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: answer %v, want an error naming %q", tc.name, m, tc.want)
		}
	}
	if m := next("the write in flight"); m["id"] != "first" || m["result"] == nil {
		t.Fatalf("the write in flight got %v", m)
	}
	send(strings.Replace(call, "%q", `"again"`, 1))
	m := next("the repeat")
	res, _ := m["result"].(map[string]any)
	if sc, _ := res["structuredContent"].(map[string]any); m["id"] != "again" || sc["repeat"] != true {
		t.Fatalf("the repeat got %v", m)
	}
	if s := stats(t, payments); len(s.Notes["WD-STDIO"]) != 1 {
		t.Errorf("payments saw %v, want one note", s.Notes)
	}
}
