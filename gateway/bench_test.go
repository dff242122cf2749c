package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/upstream"
)

const benchManifest = `version: 1
calendar: {timezone: UTC}
upstreams:
  svc: {http: "http://127.0.0.1:1"}
tools:
  - name: approve
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, amount: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /approve}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "First result."}
`

// BenchmarkMCPFastPath is a new guarded call through /mcp's fast path in
// a session, in process (no network; SQLite; an upstream that answers at
// once): what airlock itself spends on the hot request. Its allocs/op is
// the steady figure to compare (docs/BENCHMARKS.md); its time is mostly
// SQLite's commit.
func BenchmarkMCPFastPath(b *testing.B) {
	met, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ok := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"approved":true}`)}
	})
	g := frontGatewayWith(b, benchManifest, map[string]upstream.Caller{"approve": ok}, func(c *gateway.Config) { c.Metrics = met })
	h := g.Handler()
	post := func(body string, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "http://127.0.0.1/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+frontToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	session := w.Header().Get("Mcp-Session-Id")
	if w.Code != http.StatusOK || session == "" {
		b.Fatalf("initialize: HTTP %d %s", w.Code, w.Body)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", session)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		n := strconv.Itoa(i)
		w := post(`{"jsonrpc":"2.0","id":`+n+`,"method":"tools/call","params":{"name":"approve","arguments":{"record_id":"WD-`+n+`","amount":"12.50"}}}`,
			"Mcp-Session-Id", session)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `\"approved\":true`) {
			b.Fatalf("call %d: HTTP %d %s", i, w.Code, w.Body)
		}
	}
}
