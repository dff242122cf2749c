package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

const auditColumns = `id, seq, at, kind, run_id, key, tool, args, result, error, actor, plan_id, rule, decision_hash, outcome, timed_out, duration_us, prev_hash, hash`

const insertAudit = `INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, result, error, actor, plan_id, rule, decision_hash, outcome, timed_out, duration_us)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func auditArgs(e *airlock.AuditEvent) []any {
	return []any{micros(e.At), e.Kind, e.RunID, e.Key, e.Tool, nullText(e.Args), nullText(e.Result), e.Error, e.Actor, e.PlanID, e.Rule, e.DecisionHash, e.Outcome, e.TimedOut, e.DurationUS}
}

type pendingKey struct{}

// pendingEvents are the audit events of one write batch, flushed before it
// commits.
type pendingEvents struct{ events []*airlock.AuditEvent }

// eventsPerInsert keeps a multi-row INSERT under SQLite's parameter limit.
const eventsPerInsert = 256

// auditInsertSQL inserts n events.
func auditInsertSQL(n int) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, result, error, actor, plan_id, rule, decision_hash, outcome, timed_out, duration_us) VALUES `)
	for i := range n {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
	}
	return q.String()
}

// auditInserts are the multi-row INSERTs for 1, 2, 4 … eventsPerInsert
// events; a batch's events go in chunks of those sizes, so that a few
// statements, prepared once, serve every batch.
var auditInserts = func() map[int]string {
	m := map[int]string{}
	for n := 1; n <= eventsPerInsert; n *= 2 {
		m[n] = auditInsertSQL(n)
	}
	return m
}()

func (p *pendingEvents) flush(ctx context.Context, s *Store, tx *sql.Tx) error {
	for len(p.events) > 0 {
		n := 1
		for n*2 <= min(len(p.events), eventsPerInsert) {
			n *= 2
		}
		chunk := p.events[:n]
		p.events = p.events[n:]
		args := make([]any, 0, 15*n)
		for _, e := range chunk {
			args = append(args, auditArgs(e)...)
		}
		if _, err := s.exec(ctx, tx, auditInserts[n], args...); err != nil {
			return err
		}
	}
	return nil
}

// appendAudit writes events inside a transaction; inside a write batch
// they are gathered and written when the batch commits.
func appendAudit(ctx context.Context, tx *sql.Tx, events ...*airlock.AuditEvent) error {
	if p, ok := ctx.Value(pendingKey{}).(*pendingEvents); ok {
		p.events = append(p.events, events...)
		return nil
	}
	for _, e := range events {
		if _, err := tx.ExecContext(ctx, insertAudit, auditArgs(e)...); err != nil {
			return err
		}
	}
	return nil
}

// AppendAudit implements airlock.AuditStore.
func (s *Store) AppendAudit(ctx context.Context, events []*airlock.AuditEvent) error {
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error { return appendAudit(ctx, tx, events...) })
}

func scanAudit(row scanner) (*airlock.AuditEvent, error) {
	var (
		e            airlock.AuditEvent
		seq          sql.NullInt64
		at           int64
		args, result sql.NullString
		prev, hash   sql.NullString
	)
	if err := row.Scan(&e.ID, &seq, &at, &e.Kind, &e.RunID, &e.Key, &e.Tool, &args, &result, &e.Error, &e.Actor,
		&e.PlanID, &e.Rule, &e.DecisionHash, &e.Outcome, &e.TimedOut, &e.DurationUS, &prev, &hash); err != nil {
		return nil, err
	}
	e.Seq, e.At, e.PrevHash, e.Hash = seq.Int64, fromMicros(at), prev.String, hash.String
	if args.Valid {
		e.Args = json.RawMessage(args.String)
	}
	if result.Valid {
		e.Result = json.RawMessage(result.String)
	}
	return &e, nil
}

// SealAudit implements airlock.AuditStore. The writer's transaction is
// exclusive, so sealers in several processes take turns.
func (s *Store) SealAudit(ctx context.Context, limit int) (int, error) {
	var n int
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) (err error) {
		n, err = rules.SealAudit(ctx, sealRows{tx}, limit)
		return err
	})
	return n, err
}

// sealRows are the sealer's statements in a transaction of the writer. One
// writer commits every event, so their ids rise in the order they were
// written: an unsealed row older than the head was not written by
// airlock's insert (an edited row whose seal was removed, or one inserted
// with an id of its choosing) and is never sealed.
type sealRows struct{ tx *sql.Tx }

func (r sealRows) SealedHead(ctx context.Context) (seq int64, hash string, id int64, err error) {
	err = r.tx.QueryRowContext(ctx, `SELECT seq, hash, id FROM airlock_audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash, &id)
	if errors.Is(err, sql.ErrNoRows) {
		err = r.tx.QueryRowContext(ctx, `SELECT seq, hash FROM airlock_audit_anchor WHERE id = 1`).Scan(&seq, &hash)
	}
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return seq, hash, id, err
}

func (r sealRows) Unsealed(ctx context.Context, afterID int64, limit int) ([]*airlock.AuditEvent, error) {
	rows, err := r.tx.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND id > ? ORDER BY id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit)
}

// WriteSeals prepares the update once per seal: parsing it for every event
// was most of the sealer's cost.
func (r sealRows) WriteSeals(ctx context.Context, events []*airlock.AuditEvent) error {
	update, err := r.tx.PrepareContext(ctx, `UPDATE airlock_audit SET seq = ?, prev_hash = ?, hash = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	for _, e := range events {
		if _, err := update.ExecContext(ctx, e.Seq, e.PrevHash, e.Hash, e.ID); err != nil {
			return err
		}
	}
	return nil
}

func (r sealRows) AddRollup(ctx context.Context, events []*airlock.AuditEvent) error {
	return addRollup(ctx, r.tx, events)
}

// AuditHead implements airlock.AuditStore.
func (s *Store) AuditHead(ctx context.Context) (airlock.AuditAnchor, error) {
	var h airlock.AuditAnchor
	err := s.read.QueryRowContext(ctx, `SELECT seq, hash FROM airlock_audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1`).Scan(&h.Seq, &h.Hash)
	if err == nil {
		return h, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return h, err
	}
	return s.AuditAnchor(ctx)
}

// AuditAnchor implements airlock.AuditStore.
func (s *Store) AuditAnchor(ctx context.Context) (airlock.AuditAnchor, error) {
	var a airlock.AuditAnchor
	var at int64
	err := s.read.QueryRowContext(ctx, `SELECT seq, hash, at, purged FROM airlock_audit_anchor WHERE id = 1`).Scan(&a.Seq, &a.Hash, &at, &a.Purged)
	if errors.Is(err, sql.ErrNoRows) {
		return a, nil
	}
	a.At = fromMicros(at)
	return a, err
}

// PurgeAudit implements airlock.AuditStore. The writer's transaction is
// exclusive, so the sealer never sees the chain half purged.
func (s *Store) PurgeAudit(ctx context.Context, p *airlock.PurgeAuditParams) (int, error) {
	through, limit := p.Through, p.Limit
	var n int
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		var last struct {
			seq  int64
			hash string
			at   int64
		}
		err := tx.QueryRowContext(ctx, `SELECT seq, hash, at FROM airlock_audit WHERE seq IS NOT NULL AND seq <= ? ORDER BY seq LIMIT 1 OFFSET ?`,
			through, limit-1).Scan(&last.seq, &last.hash, &last.at)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT seq, hash, at FROM airlock_audit WHERE seq IS NOT NULL AND seq <= ? ORDER BY seq DESC LIMIT 1`,
				through).Scan(&last.seq, &last.hash, &last.at)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil // nothing sealed up to through
		}
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM airlock_audit WHERE seq IS NOT NULL AND seq <= ?`, last.seq)
		if err != nil {
			return err
		}
		n = int(rowsAffected(res))
		_, err = tx.ExecContext(ctx, `INSERT INTO airlock_audit_anchor (id, seq, hash, at, purged) VALUES (1, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, at = excluded.at, purged = purged + excluded.purged`,
			last.seq, last.hash, last.at, n)
		return err
	})
	return n, err
}

// PurgeFigures implements airlock.FigureStore: minute rows before
// before's minute, hour rows of hours that ended by then.
func (s *Store) PurgeFigures(ctx context.Context, p *airlock.PurgeFiguresParams) (int, error) {
	before, limit := p.Before, p.Limit
	minute := airlock.RollupMinute(before)
	hour := airlock.RollupHour(minute)
	n := 0
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		for _, q := range []struct {
			sql string
			arg int64
		}{
			{`DELETE FROM airlock_rollup WHERE (minute, tool, figure) IN (SELECT minute, tool, figure FROM airlock_rollup WHERE minute < ? ORDER BY minute LIMIT ?)`, minute},
			{`DELETE FROM airlock_rollup_hour WHERE (hour, tool, figure) IN (SELECT hour, tool, figure FROM airlock_rollup_hour WHERE hour < ? ORDER BY hour LIMIT ?)`, hour},
			{`DELETE FROM airlock_run_calls WHERE (tool, run_id) IN (SELECT tool, run_id FROM airlock_run_calls WHERE minute < ? ORDER BY minute LIMIT ?)`, minute},
			{`DELETE FROM airlock_run_hist WHERE (hour, tool, calls) IN (SELECT hour, tool, calls FROM airlock_run_hist WHERE hour < ? ORDER BY hour LIMIT ?)`, hour},
		} {
			if n >= limit {
				return nil
			}
			res, err := tx.ExecContext(ctx, q.sql, q.arg, limit-n)
			if err != nil {
				return err
			}
			n += int(rowsAffected(res))
		}
		return nil
	})
	return n, err
}

// addRollup adds the sealed events' figures to the rollup (per minute and
// per hour) and moves their runs in the histogram of calls per run, in the
// sealing transaction: each event is counted once, by the one sealer.
func addRollup(ctx context.Context, tx *sql.Tx, sealed []*airlock.AuditEvent) error {
	rows, runs := rules.RollUp(sealed)
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_rollup (minute, tool, figure, value) VALUES (?, ?, ?, ?)
			ON CONFLICT (minute, tool, figure) DO UPDATE SET value = value + excluded.value`, r.Minute, r.Tool, r.Figure, r.Value); err != nil {
			return err
		}
	}
	for _, r := range rules.ByHour(rows) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_rollup_hour (hour, tool, figure, value) VALUES (?, ?, ?, ?)
			ON CONFLICT (hour, tool, figure) DO UPDATE SET value = value + excluded.value`, r.Minute, r.Tool, r.Figure, r.Value); err != nil {
			return err
		}
	}
	changes := make([]rules.RunCallsChange, 0, len(runs))
	for _, r := range runs {
		var after, minute int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO airlock_run_calls (tool, run_id, minute, calls) VALUES (?, ?, ?, ?)
			ON CONFLICT (tool, run_id) DO UPDATE SET calls = calls + excluded.calls RETURNING calls, minute`,
			r.Tool, r.RunID, r.Minute, r.Calls).Scan(&after, &minute); err != nil {
			return err
		}
		changes = append(changes, rules.RunCallsChange{Tool: r.Tool, Minute: minute, Before: after - r.Calls, After: after})
	}
	for _, h := range rules.RunHistDelta(changes) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_run_hist (hour, tool, calls, runs) VALUES (?, ?, ?, ?)
			ON CONFLICT (hour, tool, calls) DO UPDATE SET runs = runs + excluded.runs`, h.Hour, h.Tool, h.Calls, h.Runs); err != nil {
			return err
		}
	}
	return nil
}

// Figures implements airlock.FigureStore: whole hours from the hour
// tables, the minutes at the period's edges from the minute tables.
func (s *Store) Figures(ctx context.Context, p *airlock.FiguresParams) (*airlock.Figures, error) {
	since, until := p.Since, p.Until
	sp := airlock.SpansOf(since, until)
	spans := []any{sp.Hours[0], sp.Hours[1], sp.Minutes[0][0], sp.Minutes[0][1], sp.Minutes[1][0], sp.Minutes[1][1]}
	f := &airlock.Figures{ByTool: map[string]map[string]int64{}, RunsByCalls: map[string]map[int64]int64{}}
	rows, err := s.read.QueryContext(ctx, `SELECT tool, figure, SUM(value) FROM (
			SELECT tool, figure, value FROM airlock_rollup_hour WHERE hour >= ? AND hour < ?
			UNION ALL SELECT tool, figure, value FROM airlock_rollup WHERE minute >= ? AND minute < ?
			UNION ALL SELECT tool, figure, value FROM airlock_rollup WHERE minute >= ? AND minute < ?)
		GROUP BY tool, figure`, spans...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tool, figure string
		var n int64
		if err := rows.Scan(&tool, &figure, &n); err != nil {
			return nil, err
		}
		if f.ByTool[tool] == nil {
			f.ByTool[tool] = map[string]int64{}
		}
		f.ByTool[tool][figure] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	runs, err := s.read.QueryContext(ctx, `SELECT tool, calls, SUM(runs) FROM (
			SELECT tool, calls, runs FROM airlock_run_hist WHERE hour >= ? AND hour < ?
			UNION ALL SELECT tool, calls, 1 FROM airlock_run_calls WHERE minute >= ? AND minute < ?
			UNION ALL SELECT tool, calls, 1 FROM airlock_run_calls WHERE minute >= ? AND minute < ?)
		GROUP BY tool, calls HAVING SUM(runs) > 0`, spans...)
	if err != nil {
		return nil, err
	}
	defer runs.Close()
	for runs.Next() {
		var tool string
		var calls, n int64
		if err := runs.Scan(&tool, &calls, &n); err != nil {
			return nil, err
		}
		if f.RunsByCalls[tool] == nil {
			f.RunsByCalls[tool] = map[int64]int64{}
		}
		f.RunsByCalls[tool][calls] = n
	}
	return f, runs.Err()
}

// AuditLog implements airlock.AuditStore.
func (s *Store) AuditLog(ctx context.Context, p *airlock.AuditLogParams) ([]*airlock.AuditEvent, error) {
	after, limit := p.After, p.Limit
	rows, err := s.read.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit)
}

// UnsealedAudit implements airlock.AuditStore.
func (s *Store) UnsealedAudit(ctx context.Context) (int, error) {
	var n int
	err := s.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM airlock_audit WHERE seq IS NULL`).Scan(&n)
	return n, err
}

// AuditSince implements airlock.AuditStore.
func (s *Store) AuditSince(ctx context.Context, p *airlock.AuditSinceParams) ([]*airlock.AuditEvent, error) {
	since, limit := p.Since, p.Limit
	// Events are written in time order give or take a batch, so the first
	// event of the period is found by a binary search over ids.
	first, err := s.firstAuditIDAt(ctx, since)
	if err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE id >= ? AND at >= ? ORDER BY id LIMIT ?`, first, micros(since), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit)
}

// firstAuditIDAt finds (about) the first event id at or after t; a margin
// of a few thousand ids covers events written out of time order.
func (s *Store) firstAuditIDAt(ctx context.Context, t time.Time) (int64, error) {
	var lo, hi sql.NullInt64
	if err := s.read.QueryRowContext(ctx, `SELECT MIN(id), MAX(id) FROM airlock_audit`).Scan(&lo, &hi); err != nil || !lo.Valid {
		return 0, err
	}
	a, b := lo.Int64, hi.Int64
	for a < b {
		mid := a + (b-a)/2
		var at sql.NullInt64
		err := s.read.QueryRowContext(ctx, `SELECT at FROM airlock_audit WHERE id >= ? ORDER BY id LIMIT 1`, mid).Scan(&at)
		if err != nil {
			return 0, err
		}
		if at.Int64 < micros(t) {
			a = mid + 1
		} else {
			b = mid
		}
	}
	return max(lo.Int64, a-5000), nil
}

// AuditTrail implements airlock.AuditStore. Sealed events of a key are
// found by airlock_audit_key, unsealed ones by airlock_audit_unsealed.
func (s *Store) AuditTrail(ctx context.Context, f airlock.AuditFilter) ([]*airlock.AuditEvent, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var (
		rows *sql.Rows
		err  error
	)
	switch {
	case f.Key != "" && f.PlanID != "":
		rows, err = s.read.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE key = ? AND seq IS NOT NULL AND id > ?
			UNION SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND key = ? AND id > ?
			UNION SELECT `+auditColumns+` FROM airlock_audit WHERE plan_id = ? AND plan_id <> '' AND id > ?
			ORDER BY id LIMIT ?`, f.Key, f.After, f.Key, f.After, f.PlanID, f.After, f.LimitOr())
	case f.Key != "":
		rows, err = s.read.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE key = ? AND seq IS NOT NULL AND id > ?
			UNION ALL SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND key = ? AND id > ?
			ORDER BY id LIMIT ?`, f.Key, f.After, f.Key, f.After, f.LimitOr())
	default:
		rows, err = s.read.QueryContext(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE plan_id = ? AND plan_id <> '' AND id > ? ORDER BY id LIMIT ?`, f.PlanID, f.After, f.LimitOr())
	}
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit)
}
