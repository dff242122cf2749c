package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock"
)

// Group commit. Claims and completions that arrive while a writer is busy
// are sent together as one statement: one round trip and one commit (one
// WAL flush) for many callers. A batch that fails is retried op by op, so
// one bad op never fails its neighbours.

type claimOp struct {
	c    *airlock.Claim
	done chan claimResult
}

type claimResult struct {
	inserted bool
	err      error
}

type completeOp struct {
	c    *airlock.Completion
	done chan error
}

func (s *Store) startWriters(n, maxBatch int) {
	s.claims = make(chan *claimOp, 1024)
	s.completes = make(chan *completeOp, 1024)
	s.stopWriters = make(chan struct{})
	for range n {
		s.writers.Add(1)
		go s.writer(maxBatch)
	}
}

func (s *Store) writer(maxBatch int) {
	defer s.writers.Done()
	var claims []*claimOp
	var completes []*completeOp
	stopping := false
	for {
		claims, completes = claims[:0], completes[:0]
		if stopping {
			// Finish what was queued before Close, then stop.
			select {
			case o := <-s.claims:
				claims = append(claims, o)
			case o := <-s.completes:
				completes = append(completes, o)
			default:
				return
			}
		} else {
			select {
			case o := <-s.claims:
				claims = append(claims, o)
			case o := <-s.completes:
				completes = append(completes, o)
			case <-s.stopWriters:
				stopping = true
				continue
			}
		}
	fill:
		for len(claims)+len(completes) < maxBatch {
			select {
			case o := <-s.claims:
				claims = append(claims, o)
			case o := <-s.completes:
				completes = append(completes, o)
			default:
				break fill
			}
		}
		s.flush(claims, completes)
	}
}

// queue hands an op to the writers; once queued the caller waits for the
// outcome whatever its context says, because it must learn whether its
// write is durable.
func queue[T any](ctx context.Context, s *Store, ch chan T, op T) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return errClosed
	}
	select {
	case ch <- op:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
		INSERT INTO airlock_records (` + recordColumns + `)
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

func claimArgs(ops []*claimOp) []any {
	n := len(ops)
	keys, tools, runs, windows := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	args, hashes, owners := make([]string, n), make([]string, n), make([]string, n)
	leases, nows := make([]time.Time, n), make([]time.Time, n)
	expires := make([]*time.Time, n)
	actors := make([]string, n)
	for i, o := range ops {
		c := o.c
		actors[i] = airlock.ActorOr(c.Actor)
		keys[i], tools[i], runs[i], windows[i] = c.Key, c.Tool, c.RunID, c.WindowID
		args[i], hashes[i], owners[i] = string(c.Args), c.ArgsHash, c.Owner
		leases[i], nows[i], expires[i] = c.LeaseUntil, c.Now, nullTime(c.ExpiresAt)
	}
	return []any{keys, tools, runs, windows, args, hashes, owners, leases, nows, expires, actors}
}

// readKeys collects the first column of every row.
func readKeys(rows pgx.Rows) (map[string]bool, error) {
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		k, _ := vals[0].(string)
		out[k] = true
	}
	return out, rows.Err()
}

// flush sends a batch of completions and claims as one pipeline: one round
// trip, one implicit transaction, one commit.
func (s *Store) flush(claims []*claimOp, completes []*completeOp) {
	ctx := context.Background()
	claims, claimRest := dedupe(claims, func(o *claimOp) string { return o.c.Key })
	completes, completeRest := dedupe(completes, func(o *completeOp) string { return o.c.Key })

	// Completions go one statement each (an UPDATE by primary key; a
	// set-based UPDATE … FROM unnest is planned as a join over the whole
	// table), claims as one set-based INSERT; all in one pipeline.
	var b pgx.Batch
	for _, o := range completes {
		if s.noAudit {
			b.Queue(completeSQLNoAudit, completeArgs(o.c)[:6]...)
		} else {
			b.Queue(completeSQL, completeArgs(o.c)...)
		}
	}
	if len(claims) > 0 {
		if s.noAudit {
			b.Queue(claimBatchSQLNoAudit, claimArgs(claims)[:10]...)
		} else {
			b.Queue(claimBatchSQL, claimArgs(claims)...)
		}
	}
	completed := map[string]bool{}
	var inserted map[string]bool
	br := s.pool.SendBatch(ctx, &b)
	var err error
	for range completes {
		var rows pgx.Rows
		var got map[string]bool
		if rows, err = br.Query(); err == nil {
			got, err = readKeys(rows)
		}
		if err != nil {
			break
		}
		for k := range got {
			completed[k] = true
		}
	}
	if err == nil && len(claims) > 0 {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			inserted, err = readKeys(rows)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		// Nothing of the batch was committed. Retry op by op: if the
		// database is down each fails; a bad op fails alone.
		for _, o := range completes {
			o.done <- s.completeOne(ctx, o.c)
		}
		for _, o := range claims {
			ins, err := s.claimOne(ctx, o.c)
			o.done <- claimResult{ins, err}
		}
	} else {
		for _, o := range completes {
			if completed[o.c.Key] {
				s.publish(o.c.Key)
				o.done <- nil
			} else {
				o.done <- airlock.ErrLeaseLost
			}
		}
		for _, o := range claims {
			o.done <- claimResult{inserted[o.c.Key], nil}
		}
	}
	if len(claimRest)+len(completeRest) > 0 {
		s.flush(claimRest, completeRest)
	}
}

// The statements without audit events, for measuring the audit log's cost.
const (
	claimBatchSQLNoAudit = `INSERT INTO airlock_records (` + recordColumns + `)
	SELECT k, t, r, w, 'running', a, h, NULL, '', o, l, 1, n, n, e
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
		$8::timestamptz[], $9::timestamptz[], $10::timestamptz[]) AS i(k, t, r, w, a, h, o, l, n, e)
	ORDER BY k
	ON CONFLICT (key) DO NOTHING
	RETURNING key`
	completeSQLNoAudit = `WITH u AS (
		UPDATE airlock_records SET state = $3, result = $4, note = $5, owner = '', updated_at = $6
		WHERE key = $1 AND owner = $2 AND state = 'running' RETURNING key, waiters)
	SELECT key, CASE WHEN waiters THEN pg_notify('` + channel + `', key) END FROM u`
)
