// Package upstream defines how airlock reaches the services that do the
// work: a Caller executes one tool call and reports one of the four
// outcomes of the guarded call (succeeded, failed, unknown, not sent).
// Drivers: upstream/httpjson (HTTP JSON endpoints), upstream/mcp (MCP
// servers over stdio or streamable HTTP), and Func for Go functions.
package upstream

import (
	"context"
	"encoding/json"

	"github.com/airlockhq/airlock"
)

// Request is one call to an upstream.
type Request struct {
	Tool *airlock.Tool
	// Args are the call's arguments, a JSON object.
	Args json.RawMessage
	// Key is the derived key, to pass downstream (Idempotency-Key header,
	// MCP _meta); empty for read tools.
	Key string
	// TraceParent and TraceState are the W3C trace context of the call
	// (the traceparent and tracestate headers; MCP _meta), so that the
	// upstream's spans join the agent's trace. Empty: none.
	TraceParent, TraceState string
	// Progress, when set, takes the upstream's progress reports on this
	// call and passes them to the caller (MCP notifications/progress).
	// Nil: the caller asked for none.
	Progress func(Progress)
	// InputResponses and RequestState continue a read whose upstream asked
	// for input (MCP multi round-trip, 2026-07-28): the agent's answers to
	// the upstream's inputRequests and the opaque state it echoes, both as
	// the agent sent them. Empty: a first call.
	InputResponses json.RawMessage
	RequestState   string
}

// Progress is one progress report of a call under way.
type Progress struct {
	Progress float64 // so far; rises with every report
	Total    float64 // 0: unknown
	Message  string
}

// Caller executes tool calls. Its context carries the tool's timeout.
type Caller interface {
	Call(ctx context.Context, req *Request) airlock.Outcome
}

// Func adapts a Go function to a Caller, for programs that embed airlock.
type Func func(ctx context.Context, req *Request) airlock.Outcome

// Call implements Caller.
func (f Func) Call(ctx context.Context, req *Request) airlock.Outcome { return f(ctx, req) }

// Closer is a Caller that holds connections or processes to release.
type Closer interface {
	Caller
	Close() error
}
