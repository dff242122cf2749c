package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

const cancelManifest = `version: 1
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}}
    natural_key: [{field: record_id}]
    window: forever
    timeout: 20s
    upstream: {name: svc, path: /note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "First result."}
`

// slowNote holds each call until free is called, counting executions.
type slowNote struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
	n       atomic.Int64
}

// free lets every held call end; a test registers it as a cleanup too, so
// that a test failing before it frees its calls does not leave a server
// waiting on them (and the package hanging until its timeout).
func (s *slowNote) free() { s.once.Do(func() { close(s.release) }) }

func newSlowNote() *slowNote {
	return &slowNote{arrived: make(chan struct{}, 4), release: make(chan struct{})}
}

func (s *slowNote) funcs() map[string]upstream.Caller {
	return map[string]upstream.Caller{"note": upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		s.n.Add(1)
		s.arrived <- struct{}{}
		<-s.release
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"written":true}`)}
	})}
}

func (s *slowNote) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-s.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the call never reached the upstream")
	}
}

// A cancelled tools/call gets no response (the receiver of a cancellation
// SHOULD NOT respond); the work goes on and the next repeat gets its
// result, executed once.
func TestCancelledCallIsNotAnswered(t *testing.T) {
	t.Parallel()
	t.Run("streamable HTTP", func(t *testing.T) {
		t.Parallel()
		up := newSlowNote()
		srv := httptest.NewServer(frontGatewayWith(t, cancelManifest, up.funcs()).Handler())
		t.Cleanup(srv.Close)
		t.Cleanup(up.free) // runs first: no call is left held
		post := func(session, body string) (*http.Response, string) {
			t.Helper()
			req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+frontToken)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			if session != "" {
				req.Header.Set("Mcp-Session-Id", session)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return nil, ""
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		resp, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		session := resp.Header.Get("Mcp-Session-Id")
		if session == "" {
			t.Fatal("no session")
		}
		post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		answered := make(chan string, 1)
		go func() {
			_, body := post(session, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"C-1"}}}`)
			answered <- body
		}()
		up.waitArrived(t)
		post(session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"the user stopped"}}`)
		select {
		case body := <-answered:
			if strings.Contains(body, `"result"`) || strings.Contains(body, `"error"`) {
				t.Errorf("the cancelled request was answered: %s", body)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the cancelled request's stream never ended")
		}
		up.free()
		_, body := post(session, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"C-1"}}}`)
		if !strings.Contains(body, `"repeat":true`) || !strings.Contains(body, `"written":true`) || up.n.Load() != 1 {
			t.Errorf("the repeat after the cancellation: %s (executions %d)", body, up.n.Load())
		}
	})

	// Over stdio on both revisions: 2026-07-28 has no session and names its
	// revision in each request's _meta, but still cancels with
	// notifications/cancelled (there is no stream to close).
	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		t.Run("stdio/"+rev, func(t *testing.T) { cancelOverStdio(t, rev) })
	}
}

func cancelOverStdio(t *testing.T, rev string) {
	t.Parallel()
	up := newSlowNote()
	g := frontGatewayWith(t, cancelManifest, up.funcs())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.MCPServer().Run(ctx, g.StdioTransport(inR, outW)) }()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		defer outW.Close() // ends the reader of the answers
		select {
		case err := <-done:
			if err != nil {
				t.Logf("the server ended: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the stdio server did not end after its input closed")
		}
	})
	t.Cleanup(up.free) // runs first: no call is left held
	answers := make(chan map[string]any, 16)
	go func() {
		lines := bufio.NewScanner(outR)
		for lines.Scan() {
			var m map[string]any
			if json.Unmarshal(lines.Bytes(), &m) == nil {
				answers <- m
			}
		}
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		t.Helper()
		select {
		case m := <-answers:
			return m
		case <-time.After(15 * time.Second):
			t.Fatal("no answer")
			return nil
		}
	}
	meta := ""
	if rev == "2025-11-25" {
		send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		next()
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	} else {
		meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
		send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta[1:] + `}}`)
		if m := next(); m["result"] == nil {
			t.Fatalf("server/discover: %v", m)
		}
	}
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"C-2"}` + meta + `}}`)
	up.waitArrived(t)
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"the user stopped"}}`)
	// A ping after the cancellation is answered; the cancelled call
	// must not be, before or after it.
	send(`{"jsonrpc":"2.0","id":9,"method":"ping","params":{` + strings.TrimPrefix(meta, ",") + `}}`)
	if m := next(); m["id"] != float64(9) {
		t.Fatalf("answer %v, want only the ping's", m)
	}
	up.free()
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"note","arguments":{"record_id":"C-2"}` + meta + `}}`)
	m := next()
	b, _ := json.Marshal(m)
	if m["id"] != float64(8) || !strings.Contains(string(b), `"repeat":true`) || up.n.Load() != 1 {
		t.Errorf("after the cancellation: %s (executions %d)", b, up.n.Load())
	}
}
