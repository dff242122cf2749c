// Package upstream defines how airlock reaches the services that do the
// work: a Caller executes one tool call and reports one of the four
// outcomes of the guarded call (succeeded, failed, unknown, not sent).
// Drivers: upstream/httpjson (HTTP JSON endpoints), upstream/mcp (MCP
// servers over stdio or streamable HTTP), and Func for Go functions.
package upstream

import (
	"context"
	"encoding/json"
	"strconv"

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
	// Peer is the agent's MCP session a read is made for; an upstream that
	// keeps a session per agent relays to it what the server sends its
	// client (log messages, sampling and elicitation requests). Nil: the
	// call did not come through an MCP session, or it is a write.
	Peer Peer
}

// Peer is an agent's MCP session, as an upstream sees it: where messages
// from the upstream server to its client are relayed. Messages are JSON
// (MCP params and results), so that drivers need no transport of their own.
type Peer interface {
	// ID names the agent's session while it lasts.
	ID() string
	// Done is closed when the agent's session ends.
	Done() <-chan struct{}
	// Capabilities are the client capabilities the agent declared at
	// initialize, as JSON ({"sampling": {...}, "elicitation": {...}}).
	Capabilities() json.RawMessage
	// ProtocolVersion is the MCP revision the agent's session speaks.
	ProtocolVersion() string
	// Notify relays a notification (notifications/message) to the agent.
	Notify(ctx context.Context, method string, params json.RawMessage) error
	// Request relays a request (sampling/createMessage, elicitation/create)
	// to the agent and returns the agent's result.
	Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
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

// DefaultMaxAnswer is the default cap on one upstream answer airlock reads
// and keeps (manifest limits.upstream_answer_bytes).
const DefaultMaxAnswer = 4 << 20

// OmittedAnswer is the result kept in place of an answer larger than the
// cap: the work's outcome is known (the service said it succeeded or
// failed), its answer is not kept. docs/configuration.md, "limits".
func OmittedAnswer(limit, size int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"answer_omitted": true,
		"message": "The service's answer was larger than airlock keeps (limits.upstream_answer_bytes, " +
			strconv.FormatInt(limit, 10) + " bytes); the outcome is as stated, its answer was not kept.",
		"answer_bytes_at_least": size,
	})
	return b
}
