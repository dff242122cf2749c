package airlock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"time"
)

// Audit event kinds (docs/audit.md).
const (
	EventClaimed     = "claimed"
	EventCompleted   = "completed"
	EventFailed      = "failed"
	EventInDoubt     = "in_doubt"
	EventReleased    = "released"
	EventRedriven    = "redriven"
	EventSettled     = "settled"
	EventRepeat      = "repeat_served"
	EventConflict    = "conflict"
	EventInProgress  = "in_progress_answered"
	EventBudget      = "budget_refused"
	EventPlanned     = "planned"
	EventDecided     = "decided"
	EventExpired     = "expired"
	EventCommitting  = "committing"
	EventCommitted   = "committed"
	EventCommitError = "commit_failed"
	EventWithdrawn   = "withdrawn"
	// EventApproval is one approval of a plan that needs several; the plan
	// waits for the next (Result: approvals, approvals_required, reason).
	EventApproval = "approval"
	// EventDecisionRefused is a decision the tool's rule of who decides
	// forbade (separation of duties, approval.approvers); Error says which.
	EventDecisionRefused = "decision_refused"
	// EventLost counts buffered events given up (the store refused them or
	// took nothing for too long): Result {"lost": n}, DurationUS n.
	EventLost = "events_lost"
)

// ActorSystem is the actor of events airlock causes itself.
const ActorSystem = "system"

// AuditEvent is one entry of the audit log. Events are written unsealed
// (Seq 0) in the transaction of the change they describe; a sealer later
// gives them consecutive sequence numbers and chains their hashes, so the
// hot path never waits for the chain.
type AuditEvent struct {
	ID           int64           `json:"id"`
	Seq          int64           `json:"seq"`
	At           time.Time       `json:"at"`
	Kind         string          `json:"kind"`
	RunID        string          `json:"run_id"`
	Key          string          `json:"key"`
	Tool         string          `json:"tool"`
	Args         json.RawMessage `json:"args,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	Error        string          `json:"error,omitempty"`
	Actor        string          `json:"actor"`
	PlanID       string          `json:"plan_id,omitempty"`
	Rule         string          `json:"rule,omitempty"`
	DecisionHash string          `json:"decision_hash,omitempty"`
	// Outcome, TimedOut and DurationUS are the structured outcome of a
	// call's completion (OutcomeText*; whether its last attempt ran into the
	// tool's timeout; microseconds from claim to completion). A person's
	// decision carries its wait since the plan in DurationUS.
	Outcome    string `json:"outcome,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationUS int64  `json:"duration_us,omitempty"`
	PrevHash   string `json:"prev_hash,omitempty"`
	Hash       string `json:"hash,omitempty"`
}

// ChainHash is the hash of an event given the previous event's hash: the
// hex SHA-256 of the JSON array [prev, seq, at (Unix µs), kind, run, key,
// tool, args, result, error, actor, plan, rule, decision hash], followed
// by [outcome, timed out, duration µs] when any of those is set (events
// written before they existed hash as they did). The array's bytes are
// those encoding/json.Marshal writes for it (arguments and result
// compacted, invalid ones as null): chainHashJSON writes them without
// reflection, as every event sealed or verified is hashed
// (TestChainHashMatchesEncodingJSON holds it to encoding/json).
func (e *AuditEvent) ChainHash(prev string) string {
	bp := chainBufs.Get().(*[]byte)
	b := e.chainHashJSON((*bp)[:0], prev)
	sum := sha256.Sum256(b)
	if cap(b) <= 64<<10 { // a buffer grown by a large event is not kept
		*bp = b
		chainBufs.Put(bp)
	}
	return hex.EncodeToString(sum[:])
}

var chainBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// chainHashJSON appends the JSON array ChainHash hashes to b.
func (e *AuditEvent) chainHashJSON(b []byte, prev string) []byte {
	b = append(b, '[')
	b = appendHTMLSafeJSONString(b, prev)
	b = append(b, ',')
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, e.At.UnixMicro(), 10)
	for _, s := range [...]string{e.Kind, e.RunID, e.Key, e.Tool} {
		b = append(b, ',')
		b = appendHTMLSafeJSONString(b, s)
	}
	b = append(b, ',')
	b = appendRawOrNull(b, e.Args)
	b = append(b, ',')
	b = appendRawOrNull(b, e.Result)
	for _, s := range [...]string{e.Error, e.Actor, e.PlanID, e.Rule, e.DecisionHash} {
		b = append(b, ',')
		b = appendHTMLSafeJSONString(b, s)
	}
	if e.Outcome != "" || e.TimedOut || e.DurationUS != 0 {
		b = append(b, ',')
		b = appendHTMLSafeJSONString(b, e.Outcome)
		b = append(b, ',')
		b = strconv.AppendBool(b, e.TimedOut)
		b = append(b, ',')
		b = strconv.AppendInt(b, e.DurationUS, 10)
	}
	return append(b, ']')
}

// appendHTMLSafeJSONString appends s as encoding/json.Marshal writes it
// (with HTML escaping). Printable ASCII without a character to escape, the
// usual case, is copied; anything else goes through encoding/json.
func appendHTMLSafeJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendRawOrNull appends raw JSON as encoding/json writes a
// json.RawMessage (compacted, HTML-escaped), or null when it is empty or
// not valid JSON.
func appendRawOrNull(b []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 || !json.Valid(raw) {
		return append(b, "null"...)
	}
	if !bytes.ContainsAny(raw, " \t\r\n<>&\u2028\u2029") {
		return append(b, raw...) // already as encoding/json would write it
	}
	var compact, escaped bytes.Buffer
	_ = json.Compact(&compact, raw)
	json.HTMLEscape(&escaped, compact.Bytes())
	return append(b, escaped.Bytes()...)
}

// AuditWriter appends to the audit log.
type AuditWriter interface {
	// AppendAudit writes events (unsealed) in one transaction.
	AppendAudit(ctx context.Context, events []*AuditEvent) error
}

// AuditStore keeps the audit log. Drivers: store/sqlite, store/postgres.
type AuditStore interface {
	AuditWriter
	// SealAudit numbers and chains up to limit unsealed events, oldest
	// first, continuing the chain; one sealer at a time across processes.
	SealAudit(ctx context.Context, limit int) (int, error)
	// AuditLog returns sealed events with Seq > p.After, in Seq order, up
	// to p.Limit.
	AuditLog(ctx context.Context, p *AuditLogParams) ([]*AuditEvent, error)
	// UnsealedAudit counts events not sealed yet.
	UnsealedAudit(ctx context.Context) (int, error)
	// AuditSince returns events (sealed or not) at or after p.Since, in the
	// order they were written, up to p.Limit.
	AuditSince(ctx context.Context, p *AuditSinceParams) ([]*AuditEvent, error)
	// AuditTrail returns the events (sealed or not) of a key, of a plan, or
	// of either (both set: a plan's trail, its commit record's events
	// included), with id > f.After in id order, up to f.Limit. An index
	// serves each; a filter with neither is refused.
	AuditTrail(ctx context.Context, f AuditFilter) ([]*AuditEvent, error)
	// AuditAnchor returns where the kept chain begins: the zero anchor
	// until events are purged.
	AuditAnchor(ctx context.Context) (AuditAnchor, error)
	// AuditHead returns the last sealed event's sequence number and hash
	// (the anchor when every sealed event was purged; zero when none was
	// ever sealed): what an operator records outside the database, so that
	// a truncated or rewritten tail is found (audit verify --expect-head).
	AuditHead(ctx context.Context) (AuditAnchor, error)
	// PurgeAudit deletes sealed events with Seq <= p.Through, oldest first,
	// at most p.Limit of them, and moves the anchor to the last one deleted,
	// in one transaction; it returns how many it deleted. Unsealed events
	// are never deleted.
	PurgeAudit(ctx context.Context, p *PurgeAuditParams) (int, error)
}

// AuditLogParams name the sealed events after the sequence number After, at most
// Limit.
type AuditLogParams struct {
	After int64
	Limit int
}

// AuditSinceParams name the events at or after Since, at most Limit.
type AuditSinceParams struct {
	Since time.Time
	Limit int
}

// PurgeAuditParams name the sealed events through the sequence number Through, at
// most Limit.
type PurgeAuditParams struct {
	Through int64
	Limit   int
}

// AuditAnchor records the end of the purged prefix of the chain: the
// sequence number and hash of the last event deleted, so that the chain
// stays verifiable from the first event kept (its PrevHash must be Hash).
type AuditAnchor struct {
	Seq    int64     `json:"seq"`              // last purged event's seq; 0: nothing purged
	Hash   string    `json:"hash,omitempty"`   // its hash
	At     time.Time `json:"at,omitzero"`      // its time
	Purged int64     `json:"purged,omitempty"` // events purged in all
}

// AuditFilter selects audit events by key and/or plan, after a cursor (the
// last id seen), up to a limit.
type AuditFilter struct {
	Key    string
	PlanID string
	After  int64
	Limit  int // 1..MaxAuditPage; 0 means DefaultAuditPage
}

// Pages of audit events.
const (
	DefaultAuditPage = 100
	MaxAuditPage     = 1000
)

// Validate checks the filter; errors name the parameter.
func (f *AuditFilter) Validate() error {
	switch {
	case f.Key == "" && f.PlanID == "":
		return FieldErrorf(CodeInvalidArgument, "key", "give a key or a plan id: the audit log is read by one of them")
	case f.After < 0:
		return FieldErrorf(CodeInvalidArgument, "after", "must be an event id (0 or more), not %d", f.After)
	case f.Limit < 0 || f.Limit > MaxAuditPage:
		return FieldErrorf(CodeInvalidArgument, "limit", "must be between 1 and %d, not %d", MaxAuditPage, f.Limit)
	}
	return nil
}

// LimitOr is the page size: Limit, or DefaultAuditPage when it is 0.
func (f *AuditFilter) LimitOr() int {
	if f.Limit == 0 {
		return DefaultAuditPage
	}
	return f.Limit
}

type actorKey struct{}

// WithActor names who acts (a token's name) for the audit log.
func WithActor(ctx context.Context, actor string) context.Context {
	return &actorCtx{Context: ctx, actor: actor}
}

// actorCtx carries the actor: one allocation per request (a
// context.WithValue of a string costs two, and one more each time it is
// read).
type actorCtx struct {
	context.Context
	actor string
}

func (c *actorCtx) Value(key any) any {
	if key == (actorKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// ActorFrom returns the actor of ctx, or ActorSystem.
func ActorFrom(ctx context.Context) string {
	if c, ok := ctx.Value(actorKey{}).(*actorCtx); ok && c.actor != "" {
		return c.actor
	}
	return ActorSystem
}

// ActorOr is a, or ActorSystem when a is empty.
func ActorOr(a string) string {
	if a == "" {
		return ActorSystem
	}
	return a
}

// CompletionEvent is the event kind of a completion in a state.
func CompletionEvent(st State) string {
	switch st {
	case StateSucceeded:
		return EventCompleted
	case StateFailed:
		return EventFailed
	}
	return EventInDoubt
}

// Principals from outside the manifest are named with where they come from,
// so that none can act as, or be recorded as, a static token of the same
// name (docs/identity.md, "One namespace per kind of identity"): a static
// token is its name (which may not contain ':'); a person signed in through
// OpenID Connect is "oidc:" and the name the provider gives; a program
// with a JWT is "jwt:" ISSUER "#" and the token's name claim.
const (
	PrincipalOIDC = "oidc:"
	PrincipalJWT  = "jwt:"
)

// OIDCPrincipal is the qualified name of a person signed in through OIDC.
func OIDCPrincipal(name string) string { return PrincipalOIDC + name }

// JWTPrincipal is the qualified name of a JWT's caller.
func JWTPrincipal(issuer, name string) string { return PrincipalJWT + issuer + "#" + name }
