package httpjson_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
	"github.com/airlockhq/airlock/upstream/httpjson"
)

func tool() *airlock.Tool {
	return &airlock.Tool{Name: "pay", Kind: airlock.KindWrite, Upstream: &airlock.ToolUpstream{Name: "svc", Path: "/pay"}}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   airlock.OutcomeKind
	}{
		{"200 succeeded", 200, `{"id":1}`, airlock.OutcomeSucceeded},
		{"201 succeeded", 201, `{"id":1}`, airlock.OutcomeSucceeded},
		{"400 failed", 400, `{"error":"bad"}`, airlock.OutcomeFailed},
		{"404 failed", 404, `nope`, airlock.OutcomeFailed},
		{"409 failed", 409, `{}`, airlock.OutcomeFailed},
		{"422 failed", 422, `{}`, airlock.OutcomeFailed},
		{"408 unknown", 408, ``, airlock.OutcomeUnknown},
		{"425 unknown", 425, ``, airlock.OutcomeUnknown},
		{"429 unknown", 429, ``, airlock.OutcomeUnknown},
		{"500 unknown", 500, ``, airlock.OutcomeUnknown},
		{"503 unknown", 503, ``, airlock.OutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var gotKey, gotBody string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotKey = r.Header.Get("Idempotency-Key")
				var b json.RawMessage
				_ = json.NewDecoder(r.Body).Decode(&b)
				gotBody = string(b)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c := httpjson.New(srv.URL, nil)
			defer c.Close()
			out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{"a":1}`), Key: "k123"})
			if out.Kind != tc.want {
				t.Fatalf("outcome %d (%v), want %d", out.Kind, out.Err, tc.want)
			}
			if gotKey != "k123" || gotBody != `{"a":1}` {
				t.Fatalf("request: key %q body %q", gotKey, gotBody)
			}
			if tc.want == airlock.OutcomeSucceeded && string(out.Result) != tc.body {
				t.Fatalf("result %s", out.Result)
			}
			if tc.want == airlock.OutcomeFailed && !json.Valid(out.Result) {
				t.Fatalf("failure result is not JSON: %s", out.Result)
			}
		})
	}
}

func TestConnectionRefusedIsNotSent(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := httpjson.New("http://"+addr, nil)
	out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k"})
	if out.Kind != airlock.OutcomeNotSent {
		t.Fatalf("outcome %d (%v), want not sent", out.Kind, out.Err)
	}
}

func TestTimeoutAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	var received atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Store(true)
		time.Sleep(500 * time.Millisecond)
	}))
	defer srv.Close()
	c := httpjson.New(srv.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	out := c.Call(ctx, &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k"})
	if out.Kind != airlock.OutcomeUnknown || !received.Load() {
		t.Fatalf("outcome %d (%v), received %v; want unknown", out.Kind, out.Err, received.Load())
	}
}

func TestResetAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close() // a reset, after the request arrived
		}
	}))
	defer srv.Close()
	c := httpjson.New(srv.URL, nil)
	out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k"})
	if out.Kind != airlock.OutcomeUnknown {
		t.Fatalf("outcome %d (%v), want unknown", out.Kind, out.Err)
	}
}

// A connection that was used before and fails after the request went out
// is one attempt: the request is not sent again behind the guard's back
// (net/http resends requests that carry an Idempotency-Key on a reused
// connection, and a service that does not honour keys runs them twice).
// Found by the history checker (internal/promise).
func TestAReusedConnectionThatFailsIsNotRetried(t *testing.T) {
	t.Parallel()
	var received atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 1 {
			_, _ = w.Write([]byte(`{"ok":true}`)) // the connection is kept for the next call
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack() // the work is applied, the answer lost
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c := httpjson.New(srv.URL, nil)
	if out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k1"}); out.Kind != airlock.OutcomeSucceeded {
		t.Fatalf("first call: %d (%v)", out.Kind, out.Err)
	}
	out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{"n":2}`), Key: "k2"})
	if out.Kind != airlock.OutcomeUnknown || received.Load() != 2 {
		t.Fatalf("second call: outcome %d (%v), the service received %d requests; want unknown after one request", out.Kind, out.Err, received.Load()-1)
	}
}

// TestAnswerLargerThanTheLimit: the status says what happened; an answer
// over Config.MaxResponse is not kept, and a success stays a success whose
// result says the answer was omitted (not "in doubt").
func TestAnswerLargerThanTheLimit(t *testing.T) {
	t.Parallel()
	big := `{"blob":"` + strings.Repeat("x", 4096) + `"}`
	for _, tc := range []struct {
		name   string
		status int
		max    int64
		want   airlock.OutcomeKind
		kept   bool
	}{
		{"within the limit", 200, 8192, airlock.OutcomeSucceeded, true},
		{"a success over the limit", 200, 1024, airlock.OutcomeSucceeded, false},
		{"a refusal over the limit", 422, 1024, airlock.OutcomeFailed, false},
		{"a server error over the limit", 502, 1024, airlock.OutcomeUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(big))
			}))
			defer srv.Close()
			c := httpjson.New(srv.URL, &httpjson.Config{MaxResponse: tc.max})
			defer c.Close()
			out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k"})
			if out.Kind != tc.want {
				t.Fatalf("outcome %d (%v), want %d", out.Kind, out.Err, tc.want)
			}
			switch {
			case tc.kept && string(out.Result) != big:
				t.Fatalf("the answer was not kept whole: %d bytes", len(out.Result))
			case !tc.kept && int64(len(out.Result)) > tc.max+512:
				t.Fatalf("%d bytes kept, over the limit %d", len(out.Result), tc.max)
			}
			if tc.status == 200 && !tc.kept {
				var r struct {
					Omitted bool   `json:"answer_omitted"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(out.Result, &r); err != nil || !r.Omitted || !strings.Contains(r.Message, "limits.upstream_answer_bytes") {
					t.Fatalf("result %s: want answer_omitted naming the limit", out.Result)
				}
			}
		})
	}
}

// TestAnswerReadWithAndWithoutItsLength: an answer is read whole whether
// it says its length or is chunked, up to the limit either way; one that
// ends before its stated length broke off (unknown); and the request
// carries the configured header, the key and the trace context.
func TestAnswerReadWithAndWithoutItsLength(t *testing.T) {
	t.Parallel()
	body := `{"ok":true,"n":"` + strings.Repeat("x", 100) + `"}`
	for _, tc := range []struct {
		name    string
		length  string // Content-Length sent; "" chunked
		write   string
		broken  bool // close the connection after writing
		max     int64
		want    airlock.OutcomeKind
		wantRaw string
	}{
		{"with its length", "", body, false, 1024, airlock.OutcomeSucceeded, body},
		{"chunked", "-", body, false, 1024, airlock.OutcomeSucceeded, body},
		{"exactly the limit", "", body, false, int64(len(body)), airlock.OutcomeSucceeded, body},
		{"empty", "0", "", false, 1024, airlock.OutcomeSucceeded, "null"},
		{"one byte over the limit", "", body, false, int64(len(body)) - 1, airlock.OutcomeSucceeded, ""},
		{"chunked over the limit", "-", body, false, 10, airlock.OutcomeSucceeded, ""},
		{"shorter than it said", "500", body, true, 1024, airlock.OutcomeUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = r.Header.Clone()
				switch tc.length {
				case "":
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.write)))
				case "-":
					w.(http.Flusher).Flush() // chunked: the length is not known
				default:
					w.Header().Set("Content-Length", tc.length)
				}
				_, _ = w.Write([]byte(tc.write))
				if tc.broken {
					w.(http.Flusher).Flush()
					conn, _, _ := w.(http.Hijacker).Hijack()
					conn.Close()
				}
			}))
			defer srv.Close()
			c := httpjson.New(srv.URL, &httpjson.Config{MaxResponse: tc.max, Header: http.Header{"x-api-key": {"secret"}}})
			defer c.Close()
			out := c.Call(context.Background(), &upstream.Request{Tool: tool(), Args: json.RawMessage(`{}`), Key: "k1",
				TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "a=b"})
			if out.Kind != tc.want {
				t.Fatalf("outcome %d (%v), want %d", out.Kind, out.Err, tc.want)
			}
			if tc.wantRaw != "" && string(out.Result) != tc.wantRaw {
				t.Fatalf("result %s, want %s", out.Result, tc.wantRaw)
			}
			if tc.want == airlock.OutcomeSucceeded && tc.wantRaw == "" && !strings.Contains(string(out.Result), "answer_omitted") {
				t.Fatalf("result %s: want the answer omitted", out.Result)
			}
			for k, v := range map[string]string{"X-Api-Key": "secret", "Idempotency-Key": "k1", "Content-Type": "application/json",
				"Accept": "application/json", "Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Tracestate": "a=b"} {
				if got := seen.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("header %s: %q, want %q", k, got, v)
				}
			}
		})
	}
}
