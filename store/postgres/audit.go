package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

const auditColumns = `id, seq, at, kind, run_id, key, tool, args, result, error, actor, plan_id, rule, decision_hash, outcome, timed_out, duration_us, prev_hash, hash`

// auditWriteColumns are the columns a writer fills, in auditArgs' order
// (for insertAudit and for COPY).
var auditWriteColumns = []string{"at", "kind", "run_id", "key", "tool", "args", "result", "error", "actor", "plan_id", "rule", "decision_hash", "outcome", "timed_out", "duration_us"}

var insertAudit = `INSERT INTO airlock_audit (` + strings.Join(auditWriteColumns, ", ") + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

func auditArgs(e *airlock.AuditEvent) []any {
	return []any{e.At, e.Kind, e.RunID, e.Key, e.Tool, nullText(e.Args), nullText(e.Result), e.Error, e.Actor, e.PlanID, e.Rule, e.DecisionHash, e.Outcome, e.TimedOut, e.DurationUS}
}

// The audit writers' lock. Every transaction that inserts audit events
// holds it shared from its start; the sealer takes it exclusively for a
// moment (auditFence). Ids are handed out in one order but transactions
// commit in another, so without the fence an event committed late, with an
// id below one already sealed, could not be told from a row forged or
// unsealed by hand — and the sealer would have to seal both.
//
// The lock is the schema's own (its second key is the schema's hash), so
// deployments in other schemas of the database never wait for each other.
const (
	lockAuditWriters = `SELECT pg_advisory_xact_lock_shared(7412095, hashtext(current_schema()))`
	fenceAuditWrites = `SELECT pg_advisory_xact_lock(7412095, hashtext(current_schema()))`
)

// auditTx runs fn in a transaction that holds the audit writers' lock,
// taken first, before any row lock (a writer waiting for the fence must not
// hold what another writer waits for).
func (s *Store) auditTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockAuditWriters); err != nil {
			return err
		}
		return fn(tx)
	})
}

// audited sends one statement that writes audit events, in a pipeline
// whose implicit transaction holds the audit writers' lock (one round
// trip); read reads its results.
func (s *Store) audited(ctx context.Context, read func(pgx.BatchResults) error, sql string, args ...any) error {
	var b pgx.Batch
	b.Queue(lockAuditWriters)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		err = read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// auditFence returns the highest audit id handed out so far, every one of
// them committed or rolled back: the writers' lock granted exclusively
// means no writer is inside its transaction, and a writer takes its ids
// (nextval) only while it holds the lock, so later ones get higher ids.
// (This relies on the sequence's default CACHE 1.)
func (s *Store) auditFence(ctx context.Context) (int64, error) {
	var b pgx.Batch
	b.Queue(fenceAuditWrites)
	b.Queue(`SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM airlock_audit_id_seq`)
	br := s.pool.SendBatch(ctx, &b)
	var fence int64
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&fence)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return fence, err
}

// appendAudit writes events inside a transaction begun by auditTx.
func appendAudit(ctx context.Context, tx pgx.Tx, events ...*airlock.AuditEvent) error {
	for _, e := range events {
		if _, err := tx.Exec(ctx, insertAudit, auditArgs(e)...); err != nil {
			return err
		}
	}
	return nil
}

// AppendAudit implements airlock.AuditStore. The events go in one COPY: a
// burst of thousands is one statement, not one round trip each.
func (s *Store) AppendAudit(ctx context.Context, events []*airlock.AuditEvent) error {
	if len(events) == 0 {
		return nil
	}
	return s.auditTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"airlock_audit"}, auditWriteColumns,
			pgx.CopyFromSlice(len(events), func(i int) ([]any, error) { return auditArgs(events[i]), nil }))
		return err
	})
}

// auditScanner reads audit rows into new events, one allocation each:
// the nullable columns and the list of destinations are its own, reused
// from row to row (the sealer reads every event back).
type auditScanner struct {
	seq        pgtype.Int8
	prev, hash pgtype.Text
	dest       [19]any
}

// scanAudit returns a scan function for the rows of one query.
func scanAudit() func(pgx.Row) (*airlock.AuditEvent, error) {
	sc := &auditScanner{}
	return sc.scan
}

func (sc *auditScanner) scan(row pgx.Row) (*airlock.AuditEvent, error) {
	e := &airlock.AuditEvent{}
	sc.dest = [19]any{&e.ID, &sc.seq, &e.At, &e.Kind, &e.RunID, &e.Key, &e.Tool, (*[]byte)(&e.Args), (*[]byte)(&e.Result), &e.Error, &e.Actor,
		&e.PlanID, &e.Rule, &e.DecisionHash, &e.Outcome, &e.TimedOut, &e.DurationUS, &sc.prev, &sc.hash}
	err := row.Scan(sc.dest[:]...)
	sc.dest = [19]any{} // the next event's, not this one's
	if err != nil {
		return nil, err
	}
	e.At = e.At.UTC()
	e.Seq, e.PrevHash, e.Hash = sc.seq.Int64, sc.prev.String, sc.hash.String
	return e, nil
}

// auditLock serialises sealers across replicas.
const auditLock = 7412094

// SealAudit implements airlock.AuditStore. It seals the events up to the
// fence (auditFence) that come after the sealed head: every event airlock
// writes gets a higher id than the head's, so an unsealed row older than
// the head was not written by airlock's insert — an edited row whose seal
// was removed, or one inserted with an id of its choosing. It is never
// sealed (verify counts it as not sealed, for good).
func (s *Store) SealAudit(ctx context.Context, limit int) (int, error) {
	fence, err := s.auditFence(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditLock); err != nil {
			return err
		}
		n, err = rules.SealAudit(ctx, sealRows{tx: tx, fence: fence}, limit)
		return err
	})
	return n, err
}

// sealRows are the sealer's statements in a transaction that holds the
// sealers' lock; fence is the highest row id no writer can still commit
// below.
type sealRows struct {
	tx    pgx.Tx
	fence int64
}

func (r sealRows) SealedHead(ctx context.Context) (seq int64, hash string, id int64, err error) {
	err = r.tx.QueryRow(ctx, `SELECT seq, hash, id FROM airlock_audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash, &id)
	if isNoRows(err) {
		err = r.tx.QueryRow(ctx, `SELECT seq, hash FROM airlock_audit_anchor WHERE id = 1`).Scan(&seq, &hash)
	}
	if isNoRows(err) {
		err = nil
	}
	return seq, hash, id, err
}

func (r sealRows) Unsealed(ctx context.Context, afterID int64, limit int) ([]*airlock.AuditEvent, error) {
	rows, err := r.tx.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND id > $2 AND id <= $3 ORDER BY id LIMIT $1`, limit, afterID, r.fence)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit())
}

// WriteSeals is one statement for the page: the rows are found by id (the
// primary key), each set to its sequence number and hashes. The range of
// the page's ids bounds the scan: joined on id alone, the planner hashes
// the whole table for each page while it is small enough (a sequential
// scan per seal that grows with the log).
func (r sealRows) WriteSeals(ctx context.Context, events []*airlock.AuditEvent) error {
	n := len(events)
	if n == 0 {
		return nil
	}
	ids, seqs := make([]int64, n), make([]int64, n)
	prevs, hashes := make([]string, n), make([]string, n)
	lo, hi := events[0].ID, events[0].ID
	for i, e := range events {
		ids[i], seqs[i], prevs[i], hashes[i] = e.ID, e.Seq, e.PrevHash, e.Hash
		lo, hi = min(lo, e.ID), max(hi, e.ID)
	}
	_, err := r.tx.Exec(ctx, writeSealsSQL, ids, seqs, prevs, hashes, lo, hi)
	return err
}

const writeSealsSQL = `UPDATE airlock_audit a SET seq = u.seq, prev_hash = u.prev, hash = u.hash
	FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS u(id, seq, prev, hash)
	WHERE a.id = u.id AND a.id BETWEEN $5 AND $6`

func (r sealRows) AddRollup(ctx context.Context, events []*airlock.AuditEvent) error {
	return addRollup(ctx, r.tx, events)
}

// AuditHead implements airlock.AuditStore.
func (s *Store) AuditHead(ctx context.Context) (airlock.AuditAnchor, error) {
	var h airlock.AuditAnchor
	err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM airlock_audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1`).Scan(&h.Seq, &h.Hash)
	if err == nil {
		return h, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return h, err
	}
	return s.AuditAnchor(ctx)
}

// AuditAnchor implements airlock.AuditStore.
func (s *Store) AuditAnchor(ctx context.Context) (airlock.AuditAnchor, error) {
	var a airlock.AuditAnchor
	err := s.pool.QueryRow(ctx, `SELECT seq, hash, at, purged FROM airlock_audit_anchor WHERE id = 1`).Scan(&a.Seq, &a.Hash, &a.At, &a.Purged)
	if isNoRows(err) {
		return a, nil
	}
	return a, err
}

// PurgeAudit implements airlock.AuditStore. It takes the sealers' lock, so
// a sealer never continues a chain whose end is being deleted.
func (s *Store) PurgeAudit(ctx context.Context, p *airlock.PurgeAuditParams) (int, error) {
	through, limit := p.Through, p.Limit
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditLock); err != nil {
			return err
		}
		var (
			seq  int64
			hash string
			at   time.Time
		)
		err := tx.QueryRow(ctx, `WITH d AS (
				DELETE FROM airlock_audit WHERE seq IN (
					SELECT seq FROM airlock_audit WHERE seq IS NOT NULL AND seq <= $1 ORDER BY seq LIMIT $2)
				RETURNING seq, hash, at),
			last AS (SELECT seq, hash, at FROM d ORDER BY seq DESC LIMIT 1)
			SELECT last.seq, last.hash, last.at, (SELECT COUNT(*) FROM d) FROM last`, through, limit).Scan(&seq, &hash, &at, &n)
		if isNoRows(err) {
			n = 0
			return nil
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO airlock_audit_anchor (id, seq, hash, at, purged) VALUES (1, $1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, at = excluded.at,
				purged = airlock_audit_anchor.purged + excluded.purged`, seq, hash, at, n)
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
	for _, q := range []struct {
		sql string
		arg int64
	}{
		{`DELETE FROM airlock_rollup WHERE (minute, tool, figure) IN (SELECT minute, tool, figure FROM airlock_rollup WHERE minute < $1 ORDER BY minute LIMIT $2)`, minute},
		{`DELETE FROM airlock_rollup_hour WHERE (hour, tool, figure) IN (SELECT hour, tool, figure FROM airlock_rollup_hour WHERE hour < $1 ORDER BY hour LIMIT $2)`, hour},
		{`DELETE FROM airlock_run_calls WHERE (tool, run_id) IN (SELECT tool, run_id FROM airlock_run_calls WHERE minute < $1 ORDER BY minute LIMIT $2)`, minute},
		{`DELETE FROM airlock_run_hist WHERE (hour, tool, calls) IN (SELECT hour, tool, calls FROM airlock_run_hist WHERE hour < $1 ORDER BY hour LIMIT $2)`, hour},
	} {
		if n >= limit {
			break
		}
		tag, err := s.pool.Exec(ctx, q.sql, q.arg, limit-n)
		if err != nil {
			return n, err
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// AuditLog implements airlock.AuditStore.
func (s *Store) AuditLog(ctx context.Context, p *airlock.AuditLogParams) ([]*airlock.AuditEvent, error) {
	after, limit := p.After, p.Limit
	rows, err := s.pool.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE seq > $1 ORDER BY seq LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit())
}

// UnsealedAudit implements airlock.AuditStore.
func (s *Store) UnsealedAudit(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM airlock_audit WHERE seq IS NULL`).Scan(&n)
	return n, err
}

// AuditSince implements airlock.AuditStore.
func (s *Store) AuditSince(ctx context.Context, p *airlock.AuditSinceParams) ([]*airlock.AuditEvent, error) {
	since, limit := p.Since, p.Limit
	first, err := s.firstAuditIDAt(ctx, since)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit WHERE id >= $1 AND at >= $2 ORDER BY id LIMIT $3`, first, since, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit())
}

// firstAuditIDAt finds (about) the first event id at or after t by a binary
// search over ids; a margin covers events committed out of time order.
func (s *Store) firstAuditIDAt(ctx context.Context, t time.Time) (int64, error) {
	var lo, hi *int64
	if err := s.pool.QueryRow(ctx, `SELECT MIN(id), MAX(id) FROM airlock_audit`).Scan(&lo, &hi); err != nil || lo == nil {
		return 0, err
	}
	a, b := *lo, *hi
	for a < b {
		mid := a + (b-a)/2
		var at time.Time
		if err := s.pool.QueryRow(ctx, `SELECT at FROM airlock_audit WHERE id >= $1 ORDER BY id LIMIT 1`, mid).Scan(&at); err != nil {
			return 0, err
		}
		if at.Before(t) {
			a = mid + 1
		} else {
			b = mid
		}
	}
	return max(*lo, a-5000), nil
}

// addRollup adds the sealed events' figures to the rollup (per minute and
// per hour) and moves their runs in the histogram of calls per run, in the
// sealing transaction: each event is counted once, by the one sealer.
func addRollup(ctx context.Context, tx pgx.Tx, sealed []*airlock.AuditEvent) error {
	rows, runs := rules.RollUp(sealed)
	for table, rs := range map[string][]airlock.RollupRow{"airlock_rollup (minute": rows, "airlock_rollup_hour (hour": rules.ByHour(rows)} {
		if len(rs) == 0 {
			continue
		}
		at, tools, figures, values := make([]int64, len(rs)), make([]string, len(rs)), make([]string, len(rs)), make([]int64, len(rs))
		for i, r := range rs {
			at[i], tools[i], figures[i], values[i] = r.Minute, r.Tool, r.Figure, r.Value
		}
		name, col, _ := strings.Cut(table, " (")
		if _, err := tx.Exec(ctx, `INSERT INTO `+name+` (`+col+`, tool, figure, value)
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[])
			ON CONFLICT (`+col+`, tool, figure) DO UPDATE SET value = `+name+`.value + excluded.value`,
			at, tools, figures, values); err != nil {
			return err
		}
	}
	if len(runs) == 0 {
		return nil
	}
	tools, ids, minutes, calls := make([]string, len(runs)), make([]string, len(runs)), make([]int64, len(runs)), make([]int64, len(runs))
	added := make(map[[2]string]int64, len(runs))
	for i, r := range runs {
		tools[i], ids[i], minutes[i], calls[i] = r.Tool, r.RunID, r.Minute, r.Calls
		added[[2]string{r.Tool, r.RunID}] = r.Calls
	}
	rs, err := tx.Query(ctx, `INSERT INTO airlock_run_calls (tool, run_id, minute, calls)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
		ON CONFLICT (tool, run_id) DO UPDATE SET calls = airlock_run_calls.calls + excluded.calls
		RETURNING tool, run_id, minute, calls`, tools, ids, minutes, calls)
	if err != nil {
		return err
	}
	changes := make([]rules.RunCallsChange, 0, len(runs))
	var tool, run string
	var minute, after int64
	if _, err := pgx.ForEachRow(rs, []any{&tool, &run, &minute, &after}, func() error {
		changes = append(changes, rules.RunCallsChange{Tool: tool, Minute: minute, Before: after - added[[2]string{tool, run}], After: after})
		return nil
	}); err != nil {
		return err
	}
	hist := rules.RunHistDelta(changes)
	if len(hist) == 0 {
		return nil
	}
	hours, htools, hcalls, hruns := make([]int64, len(hist)), make([]string, len(hist)), make([]int64, len(hist)), make([]int64, len(hist))
	for i, h := range hist {
		hours[i], htools[i], hcalls[i], hruns[i] = h.Hour, h.Tool, h.Calls, h.Runs
	}
	_, err = tx.Exec(ctx, `INSERT INTO airlock_run_hist (hour, tool, calls, runs)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[])
		ON CONFLICT (hour, tool, calls) DO UPDATE SET runs = airlock_run_hist.runs + excluded.runs`, hours, htools, hcalls, hruns)
	return err
}

// Figures implements airlock.FigureStore: whole hours from the hour
// tables, the minutes at the period's edges from the minute tables.
func (s *Store) Figures(ctx context.Context, p *airlock.FiguresParams) (*airlock.Figures, error) {
	since, until := p.Since, p.Until
	sp := airlock.SpansOf(since, until)
	spans := []any{sp.Hours[0], sp.Hours[1], sp.Minutes[0][0], sp.Minutes[0][1], sp.Minutes[1][0], sp.Minutes[1][1]}
	f := &airlock.Figures{ByTool: map[string]map[string]int64{}, RunsByCalls: map[string]map[int64]int64{}}
	// One snapshot for both reads, without parallel workers: the reads are
	// a few thousand rows by index, and starting workers costs more than
	// they save (a day's figures took 40 ms with them, 2 ms without, on
	// 1M events; docs/BENCHMARKS.md).
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
			return err
		}
		return figuresIn(ctx, tx, spans, f)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

func figuresIn(ctx context.Context, tx pgx.Tx, spans []any, f *airlock.Figures) error {
	rows, err := tx.Query(ctx, `SELECT tool, figure, SUM(value)::bigint FROM (
			SELECT tool, figure, value FROM airlock_rollup_hour WHERE hour >= $1 AND hour < $2
			UNION ALL SELECT tool, figure, value FROM airlock_rollup WHERE minute >= $3 AND minute < $4
			UNION ALL SELECT tool, figure, value FROM airlock_rollup WHERE minute >= $5 AND minute < $6) AS r
		GROUP BY tool, figure`, spans...)
	if err != nil {
		return err
	}
	var tool, figure string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&tool, &figure, &n}, func() error {
		if f.ByTool[tool] == nil {
			f.ByTool[tool] = map[string]int64{}
		}
		f.ByTool[tool][figure] = n
		return nil
	}); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT tool, calls, SUM(runs)::bigint FROM (
			SELECT tool, calls, runs FROM airlock_run_hist WHERE hour >= $1 AND hour < $2
			UNION ALL SELECT tool, calls, 1 FROM airlock_run_calls WHERE minute >= $3 AND minute < $4
			UNION ALL SELECT tool, calls, 1 FROM airlock_run_calls WHERE minute >= $5 AND minute < $6) AS r
		GROUP BY tool, calls HAVING SUM(runs) > 0`, spans...)
	if err != nil {
		return err
	}
	var calls int64
	_, err = pgx.ForEachRow(rows, []any{&tool, &calls, &n}, func() error {
		if f.RunsByCalls[tool] == nil {
			f.RunsByCalls[tool] = map[int64]int64{}
		}
		f.RunsByCalls[tool][calls] = n
		return nil
	})
	return err
}

// AuditTrail implements airlock.AuditStore. Sealed events of a key are
// found by airlock_audit_key, unsealed ones by airlock_audit_unsealed.
func (s *Store) AuditTrail(ctx context.Context, f airlock.AuditFilter) ([]*airlock.AuditEvent, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var (
		rows pgx.Rows
		err  error
	)
	switch {
	case f.Key != "" && f.PlanID != "":
		rows, err = s.pool.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE key = $1 AND seq IS NOT NULL AND id > $3
			UNION SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND key = $1 AND id > $3
			UNION SELECT `+auditColumns+` FROM airlock_audit WHERE plan_id = $2 AND plan_id <> '' AND id > $3
			ORDER BY id LIMIT $4`, f.Key, f.PlanID, f.After, f.LimitOr())
	case f.Key != "":
		rows, err = s.pool.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE key = $1 AND seq IS NOT NULL AND id > $2
			UNION ALL SELECT `+auditColumns+` FROM airlock_audit WHERE seq IS NULL AND key = $1 AND id > $2
			ORDER BY id LIMIT $3`, f.Key, f.After, f.LimitOr())
	default:
		rows, err = s.pool.Query(ctx, `SELECT `+auditColumns+` FROM airlock_audit
			WHERE plan_id = $1 AND plan_id <> '' AND id > $2 ORDER BY id LIMIT $3`, f.PlanID, f.After, f.LimitOr())
	}
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAudit())
}
