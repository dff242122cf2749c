package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The OTEL_* variables every case starts from: none set.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}

func clearEnv(t *testing.T) {
	for _, v := range otelVars {
		t.Setenv(v, "")
	}
}

// Not parallel: the cases set the process's environment.
func TestFromEnvSwitches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{"nothing set: off", nil, false, ""},
		{"an endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, ""},
		{"a traces endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, true, ""},
		{"exporter otlp: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, ""},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"http/protobuf", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
		{"grpc is refused", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\": airlock exports traces with OTLP over HTTP only"},
		{"the traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
		{"an unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER=\"zipkin\": airlock supports otlp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, err := tracing.FromEnv(context.Background(), "test")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Shutdown(context.Background()) }()
			if s.On() != tc.on || (s.Tracer() != nil) != tc.on {
				t.Errorf("on %v, tracer %v; want on %v", s.On(), s.Tracer(), tc.on)
			}
		})
	}
}

// otlpReceiver is an OTLP/HTTP collector on loopback that keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]map[string]string // span name → resource attributes
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collector.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.Resource.Attributes {
			res[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans[s.Name] = res
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

func TestFromEnvExportsOverOTLPHTTP(t *testing.T) {
	rcv := &otlpReceiver{spans: map[string]map[string]string{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "airlock-eu-1")
	s, err := tracing.FromEnv(context.Background(), "v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := s.Tracer().Start(context.Background(), "execute_tool add_note", airlock.Attr{Key: airlock.AttrToolName, Value: "add_note"})
	_, child := s.Tracer().Start(ctx, airlock.SpanClaim)
	child.End(nil)
	span.End(nil)
	if err := s.Shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, name := range []string{"execute_tool add_note", airlock.SpanClaim} {
		res, ok := rcv.spans[name]
		if !ok {
			t.Errorf("the collector got no span %q (got %v)", name, rcv.spans)
			continue
		}
		if res["service.name"] != "airlock-eu-1" || res["service.version"] != "v9.9.9" {
			t.Errorf("span %q resource %v: want service.name from OTEL_SERVICE_NAME and the version", name, res)
		}
	}
}

func TestContinueAndParent(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tracing.New(tp, "test")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, traceparent, tracestate string
		continues                     bool
	}{
		{"a traceparent", parent, "", true},
		{"with a tracestate", parent, "vendor=abc", true},
		{"none", "", "", false},
		{"malformed", "00-not-a-trace-01", "", false},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := tr.Continue(context.Background(), tc.traceparent, tc.tracestate)
			if got, _ := tr.Parent(ctx); (tc.continues && got != tc.traceparent) || (!tc.continues && got != "") {
				t.Errorf("Parent after Continue = %q", got)
			}
			ctx, span := tr.Start(ctx, airlock.SpanSideEffect)
			defer span.End(nil)
			got, state := tr.Parent(ctx)
			if tc.continues != strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
				t.Errorf("the span's traceparent %q: continued %v, want %v", got, !tc.continues, tc.continues)
			}
			if got == tc.traceparent || len(got) != 55 {
				t.Errorf("the span's traceparent %q names the caller's span, or is malformed", got)
			}
			if state != tc.tracestate {
				t.Errorf("tracestate %q, want %q", state, tc.tracestate)
			}
		})
	}
}
