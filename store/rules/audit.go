package rules

import (
	"context"

	"github.com/airlockhq/airlock"
)

// SealRows are the sealer's row statements in one transaction, which the
// driver holds as the only sealer (SQLite: its one writer; PostgreSQL: an
// advisory lock and the writers' fence).
type SealRows interface {
	// SealedHead is where the chain continues: the last sealed event's
	// sequence number, hash and row id, or — when retention has purged
	// every sealed event — the anchor's sequence number and hash (id 0).
	SealedHead(ctx context.Context) (seq int64, hash string, id int64, err error)
	// Unsealed reads up to limit unsealed events written after the row id,
	// oldest first: an unsealed row older than the head was not written by
	// airlock and is never sealed.
	Unsealed(ctx context.Context, afterID int64, limit int) ([]*airlock.AuditEvent, error)
	// WriteSeals stores each event's sequence number and hashes.
	WriteSeals(ctx context.Context, events []*airlock.AuditEvent) error
	// AddRollup adds the events to the report's rollup.
	AddRollup(ctx context.Context, events []*airlock.AuditEvent) error
}

// SealAudit numbers and chains up to limit unsealed events after the head,
// and rolls them up, in the driver's one transaction; it returns how many.
func SealAudit(ctx context.Context, x SealRows, limit int) (int, error) {
	seq, hash, id, err := x.SealedHead(ctx)
	if err != nil {
		return 0, err
	}
	pending, err := x.Unsealed(ctx, id, limit)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	seal(seq, hash, pending)
	if err := x.WriteSeals(ctx, pending); err != nil {
		return 0, err
	}
	return len(pending), x.AddRollup(ctx, pending)
}
