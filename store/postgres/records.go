package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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

func scanRecord(row pgx.Row) (*airlock.Record, error) {
	var (
		r       airlock.Record
		state   string
		args    string
		result  *string
		content *string
		expires *time.Time
	)
	err := row.Scan(&r.Key, &r.Tool, &r.RunID, &r.WindowID, &state, &args, &r.ArgsHash, &result, &r.Note, &r.Owner,
		&r.LeaseUntil, &r.Attempts, &r.CreatedAt, &r.UpdatedAt, &expires, &content)
	if err != nil {
		if isNoRows(err) {
			return nil, airlock.ErrNotFound
		}
		return nil, err
	}
	r.State = airlock.State(state)
	r.Args = []byte(args)
	if result != nil {
		r.Result = []byte(*result)
	}
	if content != nil {
		r.Content = []byte(*content)
	}
	if expires != nil {
		r.ExpiresAt = expires.UTC()
	}
	r.LeaseUntil, r.CreatedAt, r.UpdatedAt = r.LeaseUntil.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return &r, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// Claim implements airlock.Store. Concurrent claims share one INSERT
// (group commit); a claim that finds the key taken reads the record.
func (s *Store) Claim(ctx context.Context, c *airlock.Claim) (*airlock.Record, bool, error) {
	for {
		o := newOp(c, nil)
		err := s.submit(ctx, o)
		if err == nil {
			err = o.err
		}
		inserted := o.inserted
		o.free()
		if err != nil {
			return nil, false, err
		}
		if inserted {
			return &airlock.Record{
				Key: c.Key, Tool: c.Tool, RunID: c.RunID, WindowID: c.WindowID, State: airlock.StateRunning,
				Args: c.Args, ArgsHash: c.ArgsHash, Owner: c.Owner, LeaseUntil: c.LeaseUntil, Attempts: 1,
				CreatedAt: c.Now, UpdatedAt: c.Now, ExpiresAt: c.ExpiresAt,
			}, true, nil
		}
		// The conflicting row is committed (ON CONFLICT waited for it).
		rec, err := s.Get(ctx, c.Key)
		if errors.Is(err, airlock.ErrNotFound) {
			continue // released or settled as not happened meanwhile: claim again
		}
		if err != nil {
			return nil, false, err
		}
		return rec, false, nil
	}
}

// claimOne inserts one claim; false when the key is taken.
func (s *Store) claimOne(ctx context.Context, c *airlock.Claim) (bool, error) {
	var claimed bool
	err := s.audited(ctx, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		claimed = tag.RowsAffected() == 1
		return err
	}, `WITH ins AS (
			INSERT INTO airlock_records (`+insertColumns+`)
			VALUES ($1, $2, $3, $4, 'running', $5, $6, NULL, '', $7, $8, 1, $9, $9, $10)
			ON CONFLICT (key) DO NOTHING RETURNING key)
		INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, actor)
		SELECT $9, 'claimed', $3, $1, $2, $5, $11 FROM ins`,
		c.Key, c.Tool, c.RunID, c.WindowID, string(c.Args), c.ArgsHash, c.Owner, c.LeaseUntil, c.Now, nullTime(c.ExpiresAt), airlock.ActorOr(c.Actor))
	return claimed, err
}

// Complete implements airlock.Store. When a waiter has marked the record
// (Watch), the NOTIFY goes out with the commit; otherwise no NOTIFY is
// sent, because NOTIFY takes a database-wide lock at commit and would
// serialise every completion.
func (s *Store) Complete(ctx context.Context, c *airlock.Completion) error {
	o := newOp(nil, c)
	err := s.submit(ctx, o)
	if err == nil {
		err = o.err
	}
	o.free()
	return err
}

func (s *Store) completeOne(ctx context.Context, c *airlock.Completion) error {
	err := s.changeAndNotify(ctx, completeSQL, completeArgs(c)...)
	if err == nil {
		s.publish(c.Key)
	}
	return err
}

// Watch implements airlock.Store: it marks a running record so that its
// completion is announced to every process.
func (s *Store) Watch(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, `UPDATE airlock_records SET waiters = true
		WHERE key = $1 AND state = 'running' AND NOT waiters`, key)
	return err
}

// Release implements airlock.Store.
func (s *Store) Release(ctx context.Context, p *airlock.ReleaseParams) error {
	key, owner := p.Key, p.Owner
	return s.changeAndNotify(ctx, `WITH d AS (
			DELETE FROM airlock_records WHERE key = $1 AND owner = $2 AND state = 'running' RETURNING key, tool, run_id),
		a AS (INSERT INTO airlock_audit (at, kind, run_id, key, tool, error, actor)
			SELECT $3, 'released', run_id, key, tool, 'the request was never sent; the key is free', 'system' FROM d)
		SELECT pg_notify('`+channel+`', key) FROM d`, key, owner, p.At)
}

// changeAndNotify runs a statement that returns one row per changed record;
// none means the caller no longer holds the record.
func (s *Store) changeAndNotify(ctx context.Context, sql string, args ...any) error {
	var changed bool
	err := s.audited(ctx, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err == nil {
			changed, err = readAny(rows)
		}
		return err
	}, sql, args...)
	if err != nil {
		return err
	}
	if !changed {
		return airlock.ErrLeaseLost
	}
	return nil
}

// Heartbeat implements airlock.Store.
func (s *Store) Heartbeat(ctx context.Context, p *airlock.HeartbeatParams) error {
	key, owner, leaseUntil := p.Key, p.Owner, p.LeaseUntil
	tag, err := s.pool.Exec(ctx, `UPDATE airlock_records SET lease_until = $3
		WHERE key = $1 AND owner = $2 AND state = 'running'`, key, owner, leaseUntil)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return airlock.ErrLeaseLost
	}
	return nil
}

// Get implements airlock.Store.
func (s *Store) Get(ctx context.Context, key string) (*airlock.Record, error) {
	return scanRecord(s.pool.QueryRow(ctx, `SELECT `+recordColumns+` FROM airlock_records WHERE key = $1`, key))
}

// ExpiredLeases implements airlock.Store.
func (s *Store) ExpiredLeases(ctx context.Context, p *airlock.ExpiredLeasesParams) ([]*airlock.Record, error) {
	now, limit := p.Now, p.Limit
	rows, err := s.pool.Query(ctx, `SELECT `+recordColumns+` FROM airlock_records
		WHERE state = 'running' AND lease_until < $1 ORDER BY lease_until LIMIT $2`, now, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRecord)
}

// ExpireLease implements airlock.Store.
func (s *Store) ExpireLease(ctx context.Context, p *airlock.ExpireLeaseParams) (bool, error) {
	key, now, note := p.Key, p.Now, p.Note
	err := s.changeAndNotify(ctx, `WITH u AS (
			UPDATE airlock_records SET state = 'in_doubt', note = $2, owner = '', updated_at = $3
			WHERE key = $1 AND state = 'running' AND lease_until < $3 RETURNING key, tool, run_id),
		a AS (INSERT INTO airlock_audit (at, kind, run_id, key, tool, error, actor, outcome)
			SELECT $3, 'in_doubt', run_id, key, tool, $2, 'system', 'unknown' FROM u)
		SELECT pg_notify('`+channel+`', key) FROM u`, key, note, now)
	if errors.Is(err, airlock.ErrLeaseLost) {
		return false, nil
	}
	return err == nil, err
}

// TakeOver implements airlock.Store.
func (s *Store) TakeOver(ctx context.Context, p *airlock.TakeOverParams) (*airlock.Record, bool, error) {
	key, owner, now, leaseUntil := p.Key, p.Owner, p.Now, p.LeaseUntil
	var rec *airlock.Record
	err := s.audited(ctx, func(br pgx.BatchResults) error {
		var err error
		rec, err = scanRecord(br.QueryRow())
		return err
	}, `WITH u AS (
			UPDATE airlock_records SET owner = $2, lease_until = $3, attempts = attempts + 1, updated_at = $4
			WHERE key = $1 AND state = 'running' AND lease_until < $4
			RETURNING `+recordColumns+`),
		a AS (INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, error, actor)
			SELECT $4, 'redriven', run_id, key, tool, args, 'the lease expired; re-driven with the same key', 'system' FROM u)
		SELECT `+recordColumns+` FROM u`, key, owner, leaseUntil, now)
	if errors.Is(err, airlock.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// Settle implements airlock.Store.
func (s *Store) Settle(ctx context.Context, st *airlock.Settlement) (*airlock.Record, error) {
	var (
		rec     *airlock.Record
		refused error
	)
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
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

// recordRows are the record rules' row statements in a transaction that
// holds the audit writers' lock (store/rules.RecordRows).
type recordRows struct{ tx pgx.Tx }

// RecordByKey locks the record's row: a settlement and the reaper on
// another replica take turns.
func (r *recordRows) RecordByKey(ctx context.Context, key string) (*airlock.Record, error) {
	return scanRecord(r.tx.QueryRow(ctx, `SELECT `+recordColumns+` FROM airlock_records WHERE key = $1 FOR UPDATE`, key))
}

func (r *recordRows) DeleteInDoubt(ctx context.Context, key string) error {
	_, err := r.tx.Exec(ctx, `DELETE FROM airlock_records WHERE key = $1 AND state = 'in_doubt'`, key)
	return err
}

func (r *recordRows) MarkHappened(ctx context.Context, p *rules.HappenedParams) (*airlock.Record, error) {
	return scanRecord(r.tx.QueryRow(ctx, `UPDATE airlock_records SET state = 'succeeded', result = $2, note = $3, updated_at = $4
		WHERE key = $1 AND state = 'in_doubt' RETURNING `+recordColumns, p.Key, nullText(p.Result), p.Note, p.At))
}

func (r *recordRows) AppendAudit(ctx context.Context, events ...*airlock.AuditEvent) error {
	return appendAudit(ctx, r.tx, events...)
}

// NotifyRecord sends the key on the records' channel; PostgreSQL delivers
// it to every replica when the transaction commits.
func (r *recordRows) NotifyRecord(ctx context.Context, key string) error {
	_, err := r.tx.Exec(ctx, `SELECT pg_notify('`+channel+`', $1)`, key)
	return err
}

// Purge implements airlock.Store.
func (s *Store) Purge(ctx context.Context, p *airlock.PurgeParams) (int, error) {
	now, limit := p.Now, p.Limit
	tag, err := s.pool.Exec(ctx, `DELETE FROM airlock_records WHERE key IN (
		SELECT key FROM airlock_records WHERE state IN ('succeeded', 'failed') AND expires_at < $1 LIMIT $2)`, now, limit)
	if err != nil {
		return 0, err
	}
	// Tasks go with the records they follow (their expiry is the record's).
	tasks, err := s.pool.Exec(ctx, `DELETE FROM airlock_tasks WHERE id IN (
		SELECT id FROM airlock_tasks WHERE expires_at < $1 LIMIT $2)`, now, limit)
	if err != nil {
		return int(tag.RowsAffected()), err
	}
	return int(tag.RowsAffected() + tasks.RowsAffected()), nil
}

// CountRunCalls implements airlock.Store.
func (s *Store) CountRunCalls(ctx context.Context, p *airlock.CountRunCallsParams) (int, error) {
	runID, tool := p.RunID, p.Tool
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM airlock_records WHERE run_id = $1 AND tool = $2`, runID, tool).Scan(&n)
	return n, err
}

// completeSQL completes one record by its primary key; the NOTIFY goes out
// only when a waiter marked the record.
const completeSQL = `WITH u AS (
		UPDATE airlock_records SET state = $3, result = $4, note = $5, updated_at = $6, content = $12
		WHERE key = $1 AND owner = $2 AND state = 'running' RETURNING key, waiters, tool, run_id),
	a AS (INSERT INTO airlock_audit (at, kind, run_id, key, tool, result, error, actor, outcome, timed_out, duration_us)
		SELECT $6, $7, run_id, key, tool, $4, $5, $8, $9, $10, $11 FROM u)
	SELECT key, CASE WHEN waiters THEN pg_notify('` + channel + `', key) END FROM u`

// completeArgs are completeSQL's arguments. Every completion writes them,
// so they are built with few allocations: pointers into the completion
// (a pointer in an interface costs none), the state's texts boxed once.
func completeArgs(c *airlock.Completion) []any {
	v := &completeValues{actor: airlock.ActorOr(c.Actor), took: c.Took.Microseconds()}
	l, ok := completionTexts[c.State]
	if !ok {
		l = textsOf(c.State)
	}
	// As text, not bytes: without prepared statements (PgBouncer) pgx
	// would send bytes as bytea.
	v.result = pgtype.Text{String: string(c.Result), Valid: c.Result != nil}
	v.content = pgtype.Text{String: string(c.Content), Valid: c.Content != nil}
	v.args = [...]any{&c.Key, &c.Owner, l.state, &v.result, &c.Note, &c.Now, l.event, &v.actor,
		l.outcome, &c.TimedOut, &v.took, &v.content}
	return v.args[:]
}

// completeValues holds a completion's arguments that are not fields of it.
type completeValues struct {
	args            [12]any
	actor           string
	took            int64
	result, content pgtype.Text
}

// stateTexts are the texts a completion in one state writes: the record's
// state, the audit event's kind and its outcome.
type stateTexts struct{ state, event, outcome any }

func textsOf(s airlock.State) stateTexts {
	return stateTexts{string(s), airlock.CompletionEvent(s), airlock.CompletionOutcome(s)}
}

var completionTexts = map[airlock.State]stateTexts{
	airlock.StateSucceeded: textsOf(airlock.StateSucceeded),
	airlock.StateFailed:    textsOf(airlock.StateFailed),
	airlock.StateInDoubt:   textsOf(airlock.StateInDoubt),
}

// InDoubtByTool implements airlock.RecordStore.
func (s *Store) InDoubtByTool(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT tool, count(*) FROM airlock_records WHERE state = 'in_doubt' GROUP BY tool`)
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

// ListRecords implements airlock.Store.
func (s *Store) ListRecords(ctx context.Context, f airlock.RecordFilter) ([]*airlock.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	q := `SELECT ` + recordColumns + ` FROM airlock_records WHERE state = $1`
	args := []any{string(f.State)}
	if f.After != "" {
		at, key := f.Cursor()
		q += ` AND (updated_at, key) < ($3, $4)`
		args = append(args, nil, at, key)
	} else {
		args = append(args, nil)
	}
	args[1] = f.LimitOr()
	q += ` ORDER BY updated_at DESC, key DESC LIMIT $2`
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRecord)
}
