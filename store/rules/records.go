package rules

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock"
)

// RecordRows are one transaction's row statements on records for the rules
// that are not on the guarded call's hot path (there each driver keeps the
// statement it makes fastest: a batch, or one statement with its audit).
type RecordRows interface {
	// RecordByKey reads a record, locking its row for the transaction where
	// the driver locks rows; ErrNotFound when there is none.
	RecordByKey(ctx context.Context, key string) (*airlock.Record, error)
	// DeleteInDoubt removes an in-doubt record: its key is free again.
	DeleteInDoubt(ctx context.Context, key string) error
	// MarkHappened moves an in-doubt record to succeeded with a result and
	// returns it as it now is.
	MarkHappened(ctx context.Context, p *HappenedParams) (*airlock.Record, error)
	// AppendAudit adds events to the audit log.
	AppendAudit(ctx context.Context, events ...*airlock.AuditEvent) error
	// NotifyRecord wakes the callers waiting on a key, once the transaction
	// commits (in this process, or across processes where the database
	// can).
	NotifyRecord(ctx context.Context, key string) error
}

// HappenedParams settle an in-doubt record as having happened.
type HappenedParams struct {
	Key    string
	Result json.RawMessage
	Note   string
	At     time.Time
}

// Settle decides an in-doubt record: it happened (succeeded, with the
// result) or it did not (removed; the key is free, and the record comes
// back as StateReleased). Audited with who decided; waiters are woken.
// refused is the answer for a record that is missing or not in doubt
// (nothing changed); err a failure that rolls the transaction back.
func Settle(ctx context.Context, x RecordRows, st *airlock.Settlement) (rec *airlock.Record, refused, err error) {
	cur, err := x.RecordByKey(ctx, st.Key)
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, airlock.FieldErrorf(airlock.CodeNotFound, "key", "no record with key %s", st.Key), nil
	}
	if err != nil {
		return nil, nil, err
	}
	if cur.State != airlock.StateInDoubt {
		return nil, airlock.Errorf(airlock.CodeConflict, "record %s is %s, not in_doubt; only in-doubt records are settled", st.Key, cur.State), nil
	}
	if st.Happened {
		if rec, err = x.MarkHappened(ctx, &HappenedParams{Key: st.Key, Result: st.Result, Note: st.Note, At: st.Now}); err != nil {
			return nil, nil, err
		}
	} else {
		if err := x.DeleteInDoubt(ctx, st.Key); err != nil {
			return nil, nil, err
		}
		cur.State, cur.Note = airlock.StateReleased, st.Note
		rec = cur
	}
	if err := x.AppendAudit(ctx, &airlock.AuditEvent{At: st.Now, Kind: airlock.EventSettled, RunID: cur.RunID, Key: st.Key,
		Tool: cur.Tool, Result: st.Result, Error: settleNote(st), Actor: airlock.ActorOr(st.Actor)}); err != nil {
		return nil, nil, err
	}
	return rec, nil, x.NotifyRecord(ctx, st.Key)
}
