package airlock

import "context"

// Tracer makes the spans of a call and of a plan: the gateway's
// execute_tool span, the guard's stages (claim, side effect, completion,
// repeat served) and the plan service's propose, decide and commit. Package
// tracing implements it with OpenTelemetry; nil (the default everywhere)
// makes no spans. Spans never carry a call's arguments or the natural-key
// values derived from them, which may be personal data (docs/operations.md,
// "Traces").
type Tracer interface {
	// Start begins a span as a child of ctx's span (or of the remote
	// parent Continue put there).
	Start(ctx context.Context, name string, attrs ...Attr) (context.Context, Span)
	// Continue returns ctx with the remote parent a W3C traceparent (and
	// tracestate) names; an empty or malformed traceparent leaves ctx as is.
	Continue(ctx context.Context, traceparent, tracestate string) context.Context
	// Parent returns the W3C traceparent and tracestate of ctx's current
	// span, to pass on to an upstream beside the idempotency key; "" when
	// ctx has none.
	Parent(ctx context.Context) (traceparent, tracestate string)
}

// Span is one traced operation.
type Span interface {
	// Set adds attributes.
	Set(attrs ...Attr)
	// End ends the span; a non-nil err marks it failed.
	End(err error)
}

// Attr is a span attribute; Value is a string, bool, int or int64.
type Attr struct {
	Key   string
	Value any
}

// Span names and attributes. The gen_ai.* ones follow the OpenTelemetry
// semantic conventions for generative AI (tool execution); airlock.* are
// airlock's own.
const (
	SpanExecuteTool  = "execute_tool" // + " " + the tool's name
	SpanClaim        = "airlock.claim"
	SpanSideEffect   = "airlock.side_effect"
	SpanComplete     = "airlock.complete"
	SpanRepeatServed = "airlock.repeat_served"
	SpanPlanPropose  = "airlock.plan.propose"
	SpanPlanDecide   = "airlock.plan.decide"
	SpanPlanCommit   = "airlock.plan.commit"

	AttrOperationName = "gen_ai.operation.name" // "execute_tool"
	AttrToolName      = "gen_ai.tool.name"
	AttrToolCallID    = "gen_ai.tool.call.id"
	AttrToolType      = "gen_ai.tool.type" // "function"
	AttrStatus        = "airlock.status"   // the answer's status
	AttrRepeat        = "airlock.repeat"
	AttrWindow        = "airlock.window"
	AttrRunID         = "airlock.run_id"
	AttrKey           = "airlock.key" // a hash: it reveals none of its inputs
	AttrToolKind      = "airlock.tool.kind"
	AttrTransport     = "airlock.transport" // mcp | http
	AttrClaimed       = "airlock.claimed"
	AttrOutcome       = "airlock.outcome"
	AttrTimedOut      = "airlock.timed_out"
	AttrAttempts      = "airlock.attempts"
	AttrRecordState   = "airlock.record.state"
	AttrPlanID        = "airlock.plan.id"
	AttrPlanStatus    = "airlock.plan.status"
	AttrPlanDecision  = "airlock.plan.decision" // auto | human
	AttrPlanRule      = "airlock.plan.rule"
	AttrDecidedBy     = "airlock.plan.decided_by"
)
