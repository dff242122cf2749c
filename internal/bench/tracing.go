package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/tracing"
)

// Traces is tracing as a server runs it (every span sampled, the SDK's
// batch processor, OTLP over HTTP) exporting to a collector on loopback
// that reads each request and discards it: what --compare-tracing costs.
type Traces struct {
	Tracer   airlock.Tracer
	provider *sdktrace.TracerProvider
	srv      *http.Server
	spans    atomic.Int64 // spans handed to the exporter
	requests atomic.Int64 // export requests the collector took
	bytes    atomic.Int64
}

// StartTraces starts the collector and the provider.
func StartTraces(ctx context.Context) (*Traces, error) {
	t := &Traces{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		t.requests.Add(1)
		t.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go func() { _ = t.srv.Serve(ln) }()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+ln.Addr().String()+"/v1/traces"))
	if err != nil {
		_ = t.srv.Close()
		return nil, err
	}
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(countingExporter{exp, &t.spans}))
	t.Tracer = tracing.New(t.provider, "bench")
	return t, nil
}

// Close flushes the spans and stops the collector; it returns how many
// spans were exported, in how many requests of how many bytes.
func (t *Traces) Close(ctx context.Context) (spans, requests, bytes int64, err error) {
	err = t.provider.Shutdown(ctx)
	_ = t.srv.Close()
	return t.spans.Load(), t.requests.Load(), t.bytes.Load(), err
}

type countingExporter struct {
	sdktrace.SpanExporter
	n *atomic.Int64
}

func (c countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.n.Add(int64(len(spans)))
	return c.SpanExporter.ExportSpans(ctx, spans)
}
