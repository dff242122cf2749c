package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/groupcommit"
)

// Group commit (internal/groupcommit): claims and completions that arrive
// while a batch is being sent wait and go together in the next one: one
// round trip and one commit (one WAL flush) for many callers, Config.Writers
// batches in flight. A batch that fails is retried op by op, so one bad op
// never fails its neighbours.

// op is one claim or one completion on its way into a batch.
type op struct {
	groupcommit.Slot
	claim    *airlock.Claim      // a claim, or
	complete *airlock.Completion // a completion

	inserted bool // claim: the row was inserted
	err      error
}

// ops are reused: a claim and a completion a call, each with its
// channel, would otherwise be four allocations.
var ops = sync.Pool{New: func() any { return new(op) }}

func newOp(claim *airlock.Claim, complete *airlock.Completion) *op {
	o := ops.Get().(*op)
	o.claim, o.complete = claim, complete
	return o
}

// free returns o to the pool; its Submit has returned, and nothing reads
// it after.
func (o *op) free() {
	*o = op{Slot: o.Slot}
	ops.Put(o)
}

func (o *op) key() string {
	if o.claim != nil {
		return o.claim.Key
	}
	return o.complete.Key
}

// finish sets the result; the batcher wakes the caller after the flush.
func (o *op) finish(inserted bool, err error) {
	o.inserted, o.err = inserted, err
}

// submit puts an op into the next batch and returns when it is done.
func (s *Store) submit(ctx context.Context, o *op) error {
	err := s.batch.Submit(ctx, o)
	if errors.Is(err, groupcommit.ErrClosed) {
		return errClosed
	}
	return err
}

// dedupe sorts ops by key and splits off later ops on a key already in the
// batch: one statement must not touch a row twice.
func dedupe[T any](ops []T, key func(T) string) (batch, rest []T) {
	slices.SortStableFunc(ops, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	batch = ops[:0:0]
	for i, o := range ops {
		if i > 0 && key(o) == key(ops[i-1]) {
			rest = append(rest, o)
			continue
		}
		batch = append(batch, o)
	}
	return batch, rest
}

// ORDER BY key: batches lock keys in one order, so two batches racing for
// the same keys cannot deadlock.
// The claimed event goes into the audit log in the same statement.
const claimBatchSQL = `WITH ins AS (
		INSERT INTO airlock_records (` + insertColumns + `)
		SELECT k, t, r, w, 'running', a, h, NULL, '', o, l, 1, n, n, e
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::timestamptz[], $9::timestamptz[], $10::timestamptz[]) AS i(k, t, r, w, a, h, o, l, n, e)
		ORDER BY k
		ON CONFLICT (key) DO NOTHING
		RETURNING key, tool, run_id, args, created_at),
	aud AS (
		INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, actor)
		SELECT ins.created_at, 'claimed', ins.run_id, ins.key, ins.tool, ins.args, x.actor
		FROM ins JOIN unnest($1::text[], $11::text[]) AS x(k, actor) ON x.k = ins.key)
	SELECT key FROM ins`

func claimArgs(ops []*op) []any {
	n := len(ops)
	// Three allocations for the columns (their text, their times, and the
	// arguments pointing at them: a pointer in an interface costs none).
	c := &claimColumns{}
	text := make([]string, 8*n)
	col := func(i int) []string { return text[i*n : (i+1)*n : (i+1)*n] }
	c.keys, c.tools, c.runs, c.windows = col(0), col(1), col(2), col(3)
	c.args, c.hashes, c.owners, c.actors = col(4), col(5), col(6), col(7)
	times := make([]time.Time, 2*n)
	c.leases, c.nows = times[:n:n], times[n:]
	c.expires = make([]pgtype.Timestamptz, n)
	for i, o := range ops {
		cl := o.claim
		c.actors[i] = airlock.ActorOr(cl.Actor)
		c.keys[i], c.tools[i], c.runs[i], c.windows[i] = cl.Key, cl.Tool, cl.RunID, cl.WindowID
		c.args[i], c.hashes[i], c.owners[i] = string(cl.Args), cl.ArgsHash, cl.Owner
		c.leases[i], c.nows[i] = cl.LeaseUntil, cl.Now
		c.expires[i] = pgtype.Timestamptz{Time: cl.ExpiresAt, Valid: !cl.ExpiresAt.IsZero()}
	}
	c.all = [...]any{&c.keys, &c.tools, &c.runs, &c.windows, &c.args, &c.hashes, &c.owners, &c.leases, &c.nows, &c.expires, &c.actors}
	return c.all[:]
}

// claimColumns are a batch of claims as the columns claimBatchSQL unnests.
type claimColumns struct {
	keys, tools, runs, windows []string
	args, hashes, owners       []string
	leases, nows               []time.Time
	expires                    []pgtype.Timestamptz
	actors                     []string
	all                        [11]any
}

// markInserted sets inserted on each claim whose key a row of the claim
// statement names (the rows it inserted); claims are sorted by key
// (dedupe), so each row finds its claim without a copy of its key.
func markInserted(rows pgx.Rows, claims []*op) error {
	defer rows.Close()
	for rows.Next() {
		key := rows.RawValues()[0]
		if i, ok := slices.BinarySearchFunc(claims, key, func(o *op, key []byte) int {
			return compareKey(o.claim.Key, key)
		}); ok {
			claims[i].inserted = true
		}
	}
	return rows.Err()
}

// compareKey is strings.Compare(s, string(b)), without the copy.
func compareKey(s string, b []byte) int {
	for i := range min(len(s), len(b)) {
		if s[i] != b[i] {
			if s[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return cmp.Compare(len(s), len(b))
}

// flush sends a batch of completions and claims as one pipeline: one round
// trip, one implicit transaction, one commit.
func (s *Store) flush(ops []*op) {
	ctx := context.Background()
	batch, rest := dedupe(ops, (*op).key)
	var claims, completes []*op
	for _, o := range batch {
		if o.claim != nil {
			claims = append(claims, o)
		} else {
			completes = append(completes, o)
		}
	}

	// Completions go one statement each (an UPDATE by primary key; a
	// set-based UPDATE … FROM unnest costs the database more), claims as
	// one set-based INSERT; all in one pipeline.
	// The audit writers' lock first: held by the pipeline's implicit
	// transaction until its commit.
	var b pgx.Batch
	if !s.noAudit {
		b.Queue(lockAuditWriters)
	}
	for _, o := range completes {
		if s.noAudit {
			args := completeArgs(o.complete)
			b.Queue(completeSQLNoAudit, append(args[:6:6], args[11])...)
		} else {
			b.Queue(completeSQL, completeArgs(o.complete)...)
		}
	}
	if len(claims) > 0 {
		if s.noAudit {
			b.Queue(claimBatchSQLNoAudit, claimArgs(claims)[:10]...)
		} else {
			b.Queue(claimBatchSQL, claimArgs(claims)...)
		}
	}
	completed := make([]bool, len(completes))
	br := s.pool.SendBatch(ctx, &b)
	var err error
	if !s.noAudit {
		_, err = br.Exec()
	}
	for i := range completes {
		if err != nil {
			break
		}
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			completed[i], err = readAny(rows)
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(claims) > 0 {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = markInserted(rows, claims)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		// Nothing of the batch was committed. Retry op by op: if the
		// database is down each fails; a bad op fails alone.
		for _, o := range completes {
			o.finish(false, s.completeOne(ctx, o.complete))
		}
		for _, o := range claims {
			o.finish(s.claimOne(ctx, o.claim))
		}
	} else {
		for i, o := range completes {
			if completed[i] {
				s.publish(o.complete.Key)
				o.finish(false, nil)
			} else {
				o.finish(false, airlock.ErrLeaseLost)
			}
		}
		for _, o := range claims {
			o.finish(o.inserted, nil)
		}
	}
	if len(rest) > 0 {
		s.flush(rest)
	}
}

// readAny reports whether a statement returned a row.
func readAny(rows pgx.Rows) (bool, error) {
	defer rows.Close()
	found := false
	for rows.Next() {
		found = true
	}
	return found, rows.Err()
}

// The statements without audit events, for measuring the audit log's cost.
const (
	claimBatchSQLNoAudit = `INSERT INTO airlock_records (` + insertColumns + `)
	SELECT k, t, r, w, 'running', a, h, NULL, '', o, l, 1, n, n, e
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
		$8::timestamptz[], $9::timestamptz[], $10::timestamptz[]) AS i(k, t, r, w, a, h, o, l, n, e)
	ORDER BY k
	ON CONFLICT (key) DO NOTHING
	RETURNING key`
	completeSQLNoAudit = `WITH u AS (
		UPDATE airlock_records SET state = $3, result = $4, note = $5, updated_at = $6, content = $7
		WHERE key = $1 AND owner = $2 AND state = 'running' RETURNING key, waiters)
	SELECT key, CASE WHEN waiters THEN pg_notify('` + channel + `', key) END FROM u`
)
