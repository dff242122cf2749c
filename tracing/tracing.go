// Package tracing implements airlock.Tracer with OpenTelemetry: spans of
// calls, of the guard's stages and of plans, W3C trace context continued
// from callers and passed on to upstreams, and OTLP/HTTP export configured
// by the standard OTEL_* environment variables (FromEnv). Tracing is off
// unless the environment asks for it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockhq/airlock"
)

// ScopeName is the instrumentation scope of airlock's spans.
const ScopeName = "github.com/airlockhq/airlock"

// Tracer makes airlock's spans with an OpenTelemetry TracerProvider.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

var _ airlock.Tracer = (*Tracer)(nil)

// New makes spans with tp (an SDK provider with its exporter, or a test's
// provider over an in-memory recorder). version is the scope's version.
func New(tp trace.TracerProvider, version string) *Tracer {
	return &Tracer{tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version))}
}

// Start begins a span. The gateway's execute_tool span is a server span
// (it begins when a request arrives), the side effect a client span (it is
// the call to the upstream); the others are internal.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...airlock.Attr) (context.Context, airlock.Span) {
	kind := trace.SpanKindInternal
	switch {
	case strings.HasPrefix(name, airlock.SpanExecuteTool):
		kind = trace.SpanKindServer
	case name == airlock.SpanSideEffect:
		kind = trace.SpanKindClient
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(convert(attrs)...))
	return ctx, span{s}
}

// Continue puts the remote parent a W3C traceparent names into ctx.
func (t *Tracer) Continue(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Parent is the W3C trace context of ctx's span.
func (t *Tracer) Parent(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

type span struct{ s trace.Span }

func (s span) Set(attrs ...airlock.Attr) { s.s.SetAttributes(convert(attrs)...) }

func (s span) End(err error) {
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

func convert(attrs []airlock.Attr) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		switch v := a.Value.(type) {
		case string:
			if v == "" {
				continue // an empty call id or run: no attribute rather than ""
			}
			kv = append(kv, attribute.String(a.Key, v))
		case bool:
			kv = append(kv, attribute.Bool(a.Key, v))
		case int:
			kv = append(kv, attribute.Int(a.Key, v))
		case int64:
			kv = append(kv, attribute.Int64(a.Key, v))
		case float64:
			kv = append(kv, attribute.Float64(a.Key, v))
		default:
			kv = append(kv, attribute.String(a.Key, fmt.Sprint(v)))
		}
	}
	return kv
}

// Setup is tracing as the environment configured it.
type Setup struct {
	tracer   *Tracer
	shutdown func(context.Context) error
	// Endpoint describes where spans go ("" when off), for the log.
	Endpoint string
}

// Tracer is the tracer to give the guard, the plan service and the
// gateway: nil when tracing is off (they then make no spans at all).
func (s *Setup) Tracer() airlock.Tracer {
	if s == nil || s.tracer == nil {
		return nil
	}
	return s.tracer
}

// On reports whether spans are exported.
func (s *Setup) On() bool { return s != nil && s.tracer != nil }

// Shutdown flushes the spans still buffered and stops the exporter.
func (s *Setup) Shutdown(ctx context.Context) error {
	if s == nil || s.shutdown == nil {
		return nil
	}
	return s.shutdown(ctx)
}

// FromEnv sets tracing up as the OTEL_* environment variables say.
// Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set; it is off otherwise, and always when OTEL_SDK_DISABLED is "true" or
// OTEL_TRACES_EXPORTER is "none". The exporter speaks OTLP over HTTP
// (http/protobuf); it reads its endpoint, headers, timeout, compression and
// TLS settings from the environment, as the SDK does, and so do the sampler
// (OTEL_TRACES_SAMPLER), the batch processor (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, default "airlock"; OTEL_RESOURCE_ATTRIBUTES).
func FromEnv(ctx context.Context, version string) (*Setup, error) {
	on, err := enabled()
	if err != nil || !on {
		return &Setup{}, err
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		if v != "http/protobuf" {
			return nil, fmt.Errorf("%s=%q: airlock exports traces with OTLP over HTTP only; set it to http/protobuf (a collector's OTLP/HTTP port is 4318)", name, v)
		}
		break // the traces-specific setting wins
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "airlock"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	where := endpoint()
	if where == "" {
		where = "http://localhost:4318 (the OTLP default)"
	}
	return &Setup{tracer: New(tp, version), shutdown: tp.Shutdown, Endpoint: where}, nil
}

// enabled reads the switches of the environment.
func enabled() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	if v, ok := os.LookupEnv("OTEL_TRACES_EXPORTER"); ok && strings.TrimSpace(v) != "" {
		on := false
		for _, e := range strings.Split(v, ",") {
			switch strings.TrimSpace(e) {
			case "none":
				return false, nil
			case "otlp":
				on = true
			default:
				return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: airlock supports otlp (OTLP over HTTP) or none", v)
			}
		}
		return on, nil
	}
	return endpoint() != "", nil
}

func endpoint() string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}
