package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

var _ airlock.Store = (*Store)(nil)

// insertColumns are written by a claim; recordColumns are read back (the
// MCP content of a result comes with its completion, schema 9).
const (
	insertColumns = `key, tool, run_id, window_id, state, args, args_hash, result, note, owner,
	lease_until, attempts, created_at, updated_at, expires_at`
	recordColumns = insertColumns + `, content`
)

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (*airlock.Record, error) {
	var (
		r                       airlock.Record
		args                    string
		result, content         sql.NullString
		lease, created, updated int64
		expires                 sql.NullInt64
		state                   string
	)
	err := row.Scan(&r.Key, &r.Tool, &r.RunID, &r.WindowID, &state, &args, &r.ArgsHash, &result, &r.Note, &r.Owner,
		&lease, &r.Attempts, &created, &updated, &expires, &content)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, airlock.ErrNotFound
		}
		return nil, err
	}
	r.State = airlock.State(state)
	r.Args = []byte(args)
	if result.Valid {
		r.Result = []byte(result.String)
	}
	if content.Valid {
		r.Content = []byte(content.String)
	}
	r.LeaseUntil, r.CreatedAt, r.UpdatedAt = fromMicros(lease), fromMicros(created), fromMicros(updated)
	if expires.Valid {
		r.ExpiresAt = fromMicros(expires.Int64)
	}
	return &r, nil
}

func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// The statements of every call, prepared once (see stmts.go).
const (
	claimSQL = `INSERT INTO airlock_records (` + insertColumns + `)
		VALUES (?, ?, ?, ?, 'running', ?, ?, NULL, '', ?, ?, 1, ?, ?, ?)
		ON CONFLICT (key) DO NOTHING`
	completeSQL = `UPDATE airlock_records
		SET state = ?, result = ?, content = ?, note = ?, updated_at = ?
		WHERE key = ? AND owner = ? AND state = 'running' RETURNING tool, run_id`
	heartbeatSQL = `UPDATE airlock_records SET lease_until = ?
		WHERE key = ? AND owner = ? AND state = 'running'`
)

// Claim implements airlock.Store.
func (s *Store) Claim(ctx context.Context, c *airlock.Claim) (*airlock.Record, bool, error) {
	var (
		rec     *airlock.Record
		claimed bool
	)
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, claimSQL,
			c.Key, c.Tool, c.RunID, c.WindowID, string(c.Args), c.ArgsHash, c.Owner,
			micros(c.LeaseUntil), micros(c.Now), micros(c.Now), nullMicros(c.ExpiresAt))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			claimed = true
			if err := s.audit(ctx, tx, &airlock.AuditEvent{At: c.Now, Kind: airlock.EventClaimed, RunID: c.RunID, Key: c.Key,
				Tool: c.Tool, Args: c.Args, Actor: airlock.ActorOr(c.Actor)}); err != nil {
				return err
			}
			rec = &airlock.Record{
				Key: c.Key, Tool: c.Tool, RunID: c.RunID, WindowID: c.WindowID, State: airlock.StateRunning,
				Args: c.Args, ArgsHash: c.ArgsHash, Owner: c.Owner, LeaseUntil: c.LeaseUntil, Attempts: 1,
				CreatedAt: c.Now, UpdatedAt: c.Now, ExpiresAt: c.ExpiresAt,
			}
			return nil
		}
		rec, err = scanRecord(tx.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM airlock_records WHERE key = ?`, c.Key))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return rec, claimed, nil
}

// Complete implements airlock.Store.
func (s *Store) Complete(ctx context.Context, c *airlock.Completion) error {
	lost := false
	err := s.do(ctx, c.Key, func(ctx context.Context, tx *sql.Tx) error {
		var tool, run string
		err := s.queryRow(ctx, tx, completeSQL,
			string(c.State), nullText(c.Result), nullText(c.Content), c.Note, micros(c.Now), c.Key, c.Owner).Scan(&tool, &run)
		if errors.Is(err, sql.ErrNoRows) {
			lost = true
			return nil
		}
		if err != nil {
			return err
		}
		return s.audit(ctx, tx, &airlock.AuditEvent{At: c.Now, Kind: airlock.CompletionEvent(c.State), RunID: run, Key: c.Key,
			Tool: tool, Result: c.Result, Error: c.Note, Actor: airlock.ActorOr(c.Actor),
			Outcome: airlock.CompletionOutcome(c.State), TimedOut: c.TimedOut, DurationUS: c.Took.Microseconds()})
	})
	if err == nil && lost {
		return airlock.ErrLeaseLost
	}
	return err
}

// Release implements airlock.Store.
func (s *Store) Release(ctx context.Context, p *airlock.ReleaseParams) error {
	key, owner := p.Key, p.Owner
	lost := false
	err := s.do(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		var tool, run string
		err := tx.QueryRowContext(ctx, `DELETE FROM airlock_records WHERE key = ? AND owner = ? AND state = 'running' RETURNING tool, run_id`, key, owner).Scan(&tool, &run)
		if errors.Is(err, sql.ErrNoRows) {
			lost = true
			return nil
		}
		if err != nil {
			return err
		}
		return appendAudit(ctx, tx, &airlock.AuditEvent{At: p.At, Kind: airlock.EventReleased, RunID: run, Key: key, Tool: tool,
			Error: "the request was never sent; the key is free", Actor: airlock.ActorSystem})
	})
	if err == nil && lost {
		return airlock.ErrLeaseLost
	}
	return err
}

// Heartbeat implements airlock.Store.
func (s *Store) Heartbeat(ctx context.Context, p *airlock.HeartbeatParams) error {
	key, owner, leaseUntil := p.Key, p.Owner, p.LeaseUntil
	lost := false
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, heartbeatSQL, micros(leaseUntil), key, owner)
		if err != nil {
			return err
		}
		lost = rowsAffected(res) == 0
		return nil
	})
	if err == nil && lost {
		return airlock.ErrLeaseLost
	}
	return err
}

// Get implements airlock.Store.
func (s *Store) Get(ctx context.Context, key string) (*airlock.Record, error) {
	return scanRecord(s.read.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM airlock_records WHERE key = ?`, key))
}

// ExpiredLeases implements airlock.Store.
func (s *Store) ExpiredLeases(ctx context.Context, p *airlock.ExpiredLeasesParams) ([]*airlock.Record, error) {
	now, limit := p.Now, p.Limit
	rows, err := s.read.QueryContext(ctx, `SELECT `+recordColumns+` FROM airlock_records
		WHERE state = 'running' AND lease_until < ? ORDER BY lease_until LIMIT ?`, micros(now), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRecord)
}

// ExpireLease implements airlock.Store.
func (s *Store) ExpireLease(ctx context.Context, p *airlock.ExpireLeaseParams) (bool, error) {
	key, now, note := p.Key, p.Now, p.Note
	var ok bool
	err := s.do(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		var tool, run string
		err := tx.QueryRowContext(ctx, `UPDATE airlock_records SET state = 'in_doubt', note = ?, owner = '', updated_at = ?
			WHERE key = ? AND state = 'running' AND lease_until < ? RETURNING tool, run_id`, note, micros(now), key, micros(now)).Scan(&tool, &run)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		return appendAudit(ctx, tx, &airlock.AuditEvent{At: now, Kind: airlock.EventInDoubt, RunID: run, Key: key, Tool: tool, Error: note, Actor: airlock.ActorSystem,
			Outcome: airlock.OutcomeTextUnknown})
	})
	return ok, err
}

// TakeOver implements airlock.Store.
func (s *Store) TakeOver(ctx context.Context, p *airlock.TakeOverParams) (*airlock.Record, bool, error) {
	key, owner, now, leaseUntil := p.Key, p.Owner, p.Now, p.LeaseUntil
	var rec *airlock.Record
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		r, err := scanRecord(tx.QueryRowContext(ctx, `UPDATE airlock_records
			SET owner = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
			WHERE key = ? AND state = 'running' AND lease_until < ?
			RETURNING `+recordColumns, owner, micros(leaseUntil), micros(now), key, micros(now)))
		if errors.Is(err, airlock.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		rec = r
		return appendAudit(ctx, tx, &airlock.AuditEvent{At: now, Kind: airlock.EventRedriven, RunID: r.RunID, Key: key, Tool: r.Tool,
			Args: r.Args, Error: "the lease expired; re-driven with the same key", Actor: airlock.ActorSystem})
	})
	return rec, rec != nil, err
}

// Settle implements airlock.Store.
func (s *Store) Settle(ctx context.Context, st *airlock.Settlement) (*airlock.Record, error) {
	var (
		rec     *airlock.Record
		refused error
	)
	// The key given to the writer wakes this process's waiters on commit.
	err := s.do(ctx, st.Key, func(ctx context.Context, tx *sql.Tx) (err error) {
		rec, refused, err = rules.Settle(ctx, &recordRows{tx: tx}, st)
		return err
	})
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return rec, nil
}

// recordRows are the record rules' row statements in a transaction of the
// writer (store/rules.RecordRows).
type recordRows struct{ tx *sql.Tx }

func (r *recordRows) RecordByKey(ctx context.Context, key string) (*airlock.Record, error) {
	return scanRecord(r.tx.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM airlock_records WHERE key = ?`, key))
}

func (r *recordRows) DeleteInDoubt(ctx context.Context, key string) error {
	_, err := r.tx.ExecContext(ctx, `DELETE FROM airlock_records WHERE key = ? AND state = 'in_doubt'`, key)
	return err
}

func (r *recordRows) MarkHappened(ctx context.Context, p *rules.HappenedParams) (*airlock.Record, error) {
	return scanRecord(r.tx.QueryRowContext(ctx, `UPDATE airlock_records SET state = 'succeeded', result = ?, note = ?, updated_at = ?
		WHERE key = ? AND state = 'in_doubt' RETURNING `+recordColumns, nullText(p.Result), p.Note, micros(p.At), p.Key))
}

func (r *recordRows) AppendAudit(ctx context.Context, events ...*airlock.AuditEvent) error {
	return appendAudit(ctx, r.tx, events...)
}

// NotifyRecord is the writer's: it publishes the key it was given after
// the commit. SQLite cannot tell other processes; they poll.
func (r *recordRows) NotifyRecord(context.Context, string) error { return nil }

// Purge implements airlock.Store.
func (s *Store) Purge(ctx context.Context, p *airlock.PurgeParams) (int, error) {
	now, limit := p.Now, p.Limit
	var n int
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM airlock_records WHERE key IN (
			SELECT key FROM airlock_records WHERE state IN ('succeeded', 'failed') AND expires_at IS NOT NULL AND expires_at < ? LIMIT ?)`,
			micros(now), limit)
		if err != nil {
			return err
		}
		n = int(rowsAffected(res))
		// Tasks go with the records they follow (their expiry is the record's).
		res, err = tx.ExecContext(ctx, `DELETE FROM airlock_tasks WHERE id IN (
			SELECT id FROM airlock_tasks WHERE expires_at > 0 AND expires_at < ? LIMIT ?)`, micros(now), limit)
		if err != nil {
			return err
		}
		n += int(rowsAffected(res))
		return nil
	})
	return n, err
}

func rowsAffected(res sql.Result) int64 {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return n
}

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}

// CountRunCalls implements airlock.Store.
func (s *Store) CountRunCalls(ctx context.Context, p *airlock.CountRunCallsParams) (int, error) {
	runID, tool := p.RunID, p.Tool
	var n int
	err := s.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM airlock_records WHERE run_id = ? AND tool = ?`, runID, tool).Scan(&n)
	return n, err
}

// ListRecords implements airlock.Store.
func (s *Store) ListRecords(ctx context.Context, f airlock.RecordFilter) ([]*airlock.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	q := `SELECT ` + recordColumns + ` FROM airlock_records WHERE state = ?`
	args := []any{string(f.State)}
	if f.After != "" {
		at, key := f.Cursor()
		q += ` AND (updated_at, key) < (?, ?)`
		args = append(args, micros(at), key)
	}
	q += ` ORDER BY updated_at DESC, key DESC LIMIT ?`
	rows, err := s.read.QueryContext(ctx, q, append(args, f.LimitOr())...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRecord)
}

// InDoubtByTool implements airlock.RecordStore.
func (s *Store) InDoubtByTool(ctx context.Context) (map[string]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT tool, count(*) FROM airlock_records WHERE state = 'in_doubt' GROUP BY tool`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var tool string
		var n int
		if err := rows.Scan(&tool, &n); err != nil {
			return nil, err
		}
		out[tool] = n
	}
	return out, rows.Err()
}

// audit writes the events of a claim or completion, unless the store was
// opened without them (to measure their cost).
func (s *Store) audit(ctx context.Context, tx *sql.Tx, events ...*airlock.AuditEvent) error {
	if s.noAudit {
		return nil
	}
	return appendAudit(ctx, tx, events...)
}
