package mcp_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
	"github.com/airlockhq/airlock/upstream/mcp"
)

// serverArg makes the test binary a stdio MCP server: the upstream the
// tests start as a command, so they can kill it.
const serverArg = "airlock-test-mcp-server"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serverArg {
		runServer()
		return
	}
	goleak.VerifyTestMain(m)
}

type pidResult struct {
	PID int `json:"pid"`
}

// runServer serves two tools over stdio: pid answers with the process id
// (so a test sees whether it talks to a new process), slow waits until it
// is killed.
func runServer() {
	s := sdk.NewServer(&sdk.Implementation{Name: "test-server", Version: "v0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "pid"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, pidResult, error) {
		return nil, pidResult{PID: os.Getpid()}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "slow"}, func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, pidResult, error) {
		<-ctx.Done()
		return nil, pidResult{}, ctx.Err()
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

type bundle struct {
	client *mcp.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewCommand([]string{exe, serverArg}, nil)
	t.Cleanup(func() { _ = c.Close() })
	return &bundle{client: c}
}

func call(t *testing.T, c *mcp.Client, ctx context.Context, tool string) airlock.Outcome {
	t.Helper()
	return c.Call(ctx, &upstream.Request{
		Tool: &airlock.Tool{Name: tool},
		Args: json.RawMessage(`{}`),
		Key:  "k-" + tool,
	})
}

func pidOf(t *testing.T, out airlock.Outcome) int {
	t.Helper()
	if out.Kind != airlock.OutcomeSucceeded {
		t.Fatalf("outcome = %v (%v), want succeeded", out.Kind, out.Err)
	}
	var r pidResult
	if err := json.Unmarshal(out.Result, &r); err != nil || r.PID == 0 {
		t.Fatalf("result %s: want {\"pid\": n} (%v)", out.Result, err)
	}
	return r.PID
}

func TestCommandServer(t *testing.T) {
	t.Parallel()

	t.Run("RestartedAfterItDiesBetweenCalls", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		first := pidOf(t, call(t, b.client, ctx, "pid"))
		if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Until the client has seen the process exit, a call may still go
		// to the dead session; airlock sees the exit within moments, and
		// the call after that must reach a new process.
		deadline := time.Now().Add(10 * time.Second)
		for !b.client.SessionEnded() {
			if time.Now().After(deadline) {
				t.Fatal("the client never noticed the server's exit")
			}
			time.Sleep(10 * time.Millisecond)
		}
		second := pidOf(t, call(t, b.client, ctx, "pid"))
		if second == first {
			t.Fatalf("second call answered by pid %d, the killed process", second)
		}
	})

	t.Run("KilledMidCallIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		pid := pidOf(t, call(t, b.client, ctx, "pid"))
		go func() {
			time.Sleep(200 * time.Millisecond)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out := call(t, b.client, ctx, "slow")
		if out.Kind != airlock.OutcomeUnknown {
			t.Fatalf("outcome = %v (%v), want unknown: the request had gone out", out.Kind, out.Err)
		}
		if ctx.Err() != nil {
			t.Fatal("the call waited for its deadline instead of seeing the process die")
		}
		// And the next call reaches a new process.
		if again := pidOf(t, call(t, b.client, context.Background(), "pid")); again == pid {
			t.Fatalf("answered by the killed process %d", again)
		}
	})

	t.Run("CommandThatCannotStartIsNotSent", func(t *testing.T) {
		t.Parallel()
		c := mcp.NewCommand([]string{"/nonexistent/airlock-test-server"}, nil)
		t.Cleanup(func() { _ = c.Close() })
		out := call(t, c, context.Background(), "pid")
		if out.Kind != airlock.OutcomeNotSent {
			t.Fatalf("outcome = %v (%v), want not sent", out.Kind, out.Err)
		}
	})
}

// httpServer is an MCP server over streamable HTTP that speaks only
// 2025-11-25 and keeps its events, so a client can resume a stream; its
// tool "write" counts executions and closes the call's stream before it
// answers, as that revision allows.
type httpServer struct {
	srv        *httptest.Server
	executions atomic.Int64
}

func startHTTPServer(t *testing.T) *httpServer {
	t.Helper()
	h := &httpServer{}
	s := sdk.NewServer(&sdk.Implementation{Name: "resumable", Version: "v0"}, &sdk.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25"},
	})
	sdk.AddTool(s, &sdk.Tool{Name: "write"}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, pidResult, error) {
		n := h.executions.Add(1)
		if req.Extra != nil && req.Extra.CloseSSEStream != nil {
			req.Extra.CloseSSEStream(sdk.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
		}
		time.Sleep(100 * time.Millisecond) // the answer comes after the stream closed
		return nil, pidResult{PID: int(n)}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "pid"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, pidResult, error) {
		return nil, pidResult{PID: os.Getpid()}, nil
	})
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{
		EventStore: sdk.NewMemoryEventStore(nil),
	})
	h.srv = httptest.NewServer(handler)
	t.Cleanup(func() {
		h.srv.CloseClientConnections()
		h.srv.Close()
		for ss := range s.Sessions() { // those whose client could not say goodbye
			_ = ss.Close()
		}
	})
	return h
}

func TestHTTPServer(t *testing.T) {
	t.Parallel()

	t.Run("StreamClosedMidCallIsResumed", func(t *testing.T) {
		t.Parallel()
		h := startHTTPServer(t)
		c := mcp.NewHTTP(h.srv.URL, nil)
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out := call(t, c, ctx, "write")
		if out.Kind != airlock.OutcomeSucceeded {
			t.Fatalf("outcome = %v (%v), want succeeded: the stream can be resumed", out.Kind, out.Err)
		}
		if got := h.executions.Load(); got != 1 {
			t.Fatalf("executions = %d, want 1", got)
		}
		if len(out.Content) == 0 {
			t.Fatal("no result content to store with the record")
		}
	})

	t.Run("AnswerOverTheLimitIsNotKept", func(t *testing.T) {
		t.Parallel()
		h := startHTTPServer(t)
		c := mcp.NewHTTP(h.srv.URL, &mcp.Options{MaxAnswer: 64})
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out := call(t, c, ctx, "pid")
		var r struct {
			Omitted bool `json:"answer_omitted"`
		}
		if out.Kind != airlock.OutcomeSucceeded || json.Unmarshal(out.Result, &r) != nil || !r.Omitted || out.Content != nil {
			t.Fatalf("outcome %v, result %s, %d bytes of content: want a success whose answer was omitted", out.Kind, out.Result, len(out.Content))
		}
	})

	t.Run("ServerGoneBetweenCallsIsNotSent", func(t *testing.T) {
		t.Parallel()
		h := startHTTPServer(t)
		c := mcp.NewHTTP(h.srv.URL, nil)
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		pidOf(t, call(t, c, ctx, "pid"))
		h.srv.CloseClientConnections()
		h.srv.Close()
		out := call(t, c, ctx, "pid")
		if out.Kind != airlock.OutcomeNotSent {
			t.Fatalf("outcome = %v (%v), want not sent: nothing listens at the address", out.Kind, out.Err)
		}
	})

	t.Run("NoServerIsNotSent", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		c := mcp.NewHTTP("http://"+addr+"/mcp", nil)
		t.Cleanup(func() { _ = c.Close() })
		if out := call(t, c, context.Background(), "pid"); out.Kind != airlock.OutcomeNotSent {
			t.Fatalf("outcome = %v (%v), want not sent", out.Kind, out.Err)
		}
	})
}
