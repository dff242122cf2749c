package airlock

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// Status is what a caller is told about its call.
type Status string

// Answer statuses.
const (
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
	StatusInProgress Status = "in_progress"
	StatusInDoubt    Status = "in_doubt"
	StatusPlanned    Status = "planned" // an irreversible tool's plan waits for approval or its commit
)

// Messages written for a model: each says plainly not to redo the work.
const (
	MessageInProgress = "This work is already under way from an earlier identical call. It must not be redone. Call again later with the same arguments to get its result."
	// MessageInProgressOther is MessageInProgress for a repeat whose
	// arguments differ from the first call's (Answer.Conflict names them).
	MessageInProgressOther = "This work is already under way from an earlier call for the same work, made with other arguments. It must not be redone. Call again later to get the first call's result."
	// MessageStillRunning answers the first call itself when it is answered
	// before its side effect ends (respond_within, or the caller gave up).
	MessageStillRunning = "This work has started and is still running; it must not be redone. Call again later with the same arguments to get its result."
	// MessageInDoubt answers for work whose outcome is unknown when the
	// tool has a reconciliation (reconcile_with) that checks the service.
	MessageInDoubt = "This work may or may not have happened; a check against the service is under way. Do not retry it and do not try another way to do it; the check, or a person, will settle it."
	// MessageInDoubtPerson is MessageInDoubt for a tool nothing checks by
	// itself: a person settles it.
	MessageInDoubtPerson = "This work may or may not have happened, and nothing checks it by itself: a person will look and settle it. Do not retry it and do not try another way to do it."
	MessageNotSent       = "Nothing was done: the service could not be reached. It is safe to retry later."
)

// Answer is what a guarded call returns. A repeat is never an error.
type Answer struct {
	Status   Status          `json:"status"`
	Repeat   bool            `json:"repeat"`
	Result   json.RawMessage `json:"result,omitempty"`
	Conflict *Conflict       `json:"conflict,omitempty"`
	Message  string          `json:"message,omitempty"`
	// Plan is the plan of an irreversible tool's proposal (plan_T).
	Plan *Plan `json:"plan,omitempty"`
	// Key is the derived key; it is for operators and logs, never for the model.
	Key string `json:"-"`
	// Content is the MCP upstream's whole result (Outcome.Content), which
	// the MCP gateway passes on with the answer; not part of the JSON.
	Content json.RawMessage `json:"-"`
}

// Conflict says that a repeat carried other arguments than the first call.
type Conflict struct {
	Fields  []string `json:"fields"`
	Message string   `json:"message"`
}

// OutcomeKind is what a side effect reports about itself.
type OutcomeKind int

// Outcome kinds.
const (
	OutcomeSucceeded OutcomeKind = iota + 1 // it happened; Result is the result
	OutcomeFailed                           // it definitively did not happen (a 4xx); Result says why
	OutcomeUnknown                          // it may have happened (timeout, reset after send, 5xx)
	OutcomeNotSent                          // the request never left (connection refused)
)

// String names the kind: succeeded, failed, unknown or not_sent.
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnknown:
		return "unknown"
	case OutcomeNotSent:
		return "not_sent"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// The outcomes a caller that ran the work itself reports to the claims
// API (POST /v1/claims/{claim}/complete, docs/openapi.yaml), by their wire
// names: one vocabulary for the gateway that reads them and the client
// that sends them. not_started is the caller's not_sent: the work never
// began.
const (
	ClaimOutcomeSucceeded  = "succeeded"
	ClaimOutcomeFailed     = "failed"
	ClaimOutcomeUnknown    = "unknown"
	ClaimOutcomeNotStarted = "not_started"
)

// Outcome is a side effect's report.
type Outcome struct {
	Kind   OutcomeKind
	Result json.RawMessage
	// Content is the whole result of an MCP upstream (its content items of
	// every type, structuredContent, isError, _meta), kept with the record
	// so that a repeat over MCP gets what the first call got. Nil for
	// other upstreams.
	Content json.RawMessage
	Err     error // for Unknown and NotSent: what went wrong, for the record's note
}

// SideEffect performs the work. It receives the derived key to pass
// downstream (an Idempotency-Key header, MCP _meta). Its context is not
// the caller's: it ends at the tool's timeout, not when the caller gives up.
type SideEffect func(ctx context.Context, key string) Outcome

// Call is one guarded call.
type Call struct {
	Tool     *Tool
	Calendar *Calendar // for business_day windows
	Args     *Args     // parsed at the edge (NewArgs); nil is {}
	RunID    string
	// WaitsToEnd: the caller's answer goes nowhere once its context ends
	// (a closed connection, a cancelled MCP request), so a tool without
	// respond_within runs its side effect on the caller's goroutine and
	// answers when it ends, rather than answering in progress when the
	// context ends; the side effect is not cancelled either way. It saves
	// a goroutine and a hand-off per call (docs/DECISIONS.md, decision 68).
	WaitsToEnd bool
	// GiveUp, when it closes, ends the caller's wait as its context ending
	// would, where the caller's context goes on (an MCP request cancelled
	// by notifications/cancelled, whose stream stays open): the call is
	// answered in progress and the side effect goes on. Nil: none.
	GiveUp <-chan struct{}
}

// MaxKeyBytes caps a key a caller brings (an Idempotency-Key).
const MaxKeyBytes = 512

// KeyedCall is a call whose key the caller already has, such as the
// Idempotency-Key a client sent to a tool server (see package idempotency).
type KeyedCall struct {
	// Tool supplies the name, on_mismatch, repeat_wait, respond_within and
	// whether the upstream honours keys.
	Tool  *Tool
	Key   string
	Args  *Args // parsed at the edge (NewArgs); nil is {}
	RunID string
	// ExpiresAt is when the record may be purged; zero keeps it.
	ExpiresAt time.Time
}

// InDoubtMessage is what a model is told of a tool's work in doubt: a
// check is under way only where the tool has one.
func InDoubtMessage(t *Tool) string {
	if t != nil && t.ReconcileWith != "" {
		return MessageInDoubt
	}
	return MessageInDoubtPerson
}

// AnswerFor is the answer a record of tool gives: its result once final, in
// progress or in doubt before (an MCP task's result is read so).
func AnswerFor(rec *Record, tool *Tool, repeat bool) *Answer {
	a := &Answer{Repeat: repeat, Key: rec.Key}
	switch rec.State {
	case StateSucceeded:
		a.Status, a.Result, a.Content = StatusSucceeded, rec.Result, rec.Content
	case StateFailed:
		a.Status, a.Result, a.Content = StatusFailed, rec.Result, rec.Content
	case StateInDoubt:
		a.Status, a.Message = StatusInDoubt, InDoubtMessage(tool)
	default:
		a.Status, a.Message = StatusInProgress, MessageInProgress
	}
	return a
}

// SettleRequest is a decision on an in_doubt record: it happened (with
// its result) or it did not (the record is removed and the key freed).
type SettleRequest struct {
	Key      string
	Happened bool
	Result   json.RawMessage // when it happened: its result, as JSON; optional
	Note     string          // how the settler knows; required
	By       string          // who settles: a person's name, or ActorReconcile
	Role     string          // By's role: RoleAdmin, or RoleSystem for reconciliation
}

// SettledBy is the record's note after a settlement: who, when and how
// they know. Every front end's settlement reads the same.
func SettledBy(by string, at time.Time, note string) string {
	return by + " at " + at.UTC().Format(time.RFC3339) + ": " + note
}
