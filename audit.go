package airlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Audit event kinds (DESIGN §2.5).
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
	PrevHash     string          `json:"prev_hash,omitempty"`
	Hash         string          `json:"hash,omitempty"`
}

// ChainHash is the hash of an event given the previous event's hash: the
// hex SHA-256 of the JSON array [prev, seq, at (Unix µs), kind, run, key,
// tool, args, result, error, actor, plan, rule, decision hash].
func (e *AuditEvent) ChainHash(prev string) string {
	b, _ := json.Marshal([]any{prev, e.Seq, e.At.UnixMicro(), e.Kind, e.RunID, e.Key, e.Tool,
		rawOrNull(e.Args), rawOrNull(e.Result), e.Error, e.Actor, e.PlanID, e.Rule, e.DecisionHash})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return json.RawMessage("null")
	}
	return b
}

// AuditStore keeps the audit log. Drivers: store/sqlite, store/postgres.
type AuditStore interface {
	// AppendAudit writes events (unsealed) in one transaction.
	AppendAudit(ctx context.Context, events []*AuditEvent) error
	// SealAudit numbers and chains up to limit unsealed events, oldest
	// first, continuing the chain; one sealer at a time across processes.
	SealAudit(ctx context.Context, limit int) (int, error)
	// AuditLog returns sealed events with Seq > after, in Seq order.
	AuditLog(ctx context.Context, after int64, limit int) ([]*AuditEvent, error)
	// UnsealedAudit counts events not sealed yet.
	UnsealedAudit(ctx context.Context) (int, error)
}
