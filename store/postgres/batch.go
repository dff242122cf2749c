package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

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
		if len(completes) > 0 {
			s.completeBatch(completes)
		}
		if len(claims) > 0 {
			s.claimBatch(claims)
		}
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

func (s *Store) claimBatch(ops []*claimOp) {
	ctx := context.Background()
	// One op per key in a statement; later duplicates go in another.
	slices.SortStableFunc(ops, func(a, b *claimOp) int { return strings.Compare(a.c.Key, b.c.Key) })
	var rest []*claimOp
	batch := ops[:0:0]
	for i, o := range ops {
		if i > 0 && o.c.Key == ops[i-1].c.Key {
			rest = append(rest, o)
			continue
		}
		batch = append(batch, o)
	}
	if len(batch) == 1 {
		inserted, err := s.claimOne(ctx, batch[0].c)
		batch[0].done <- claimResult{inserted, err}
	} else {
		n := len(batch)
		keys, tools, runs, windows := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		args, hashes, owners := make([]string, n), make([]string, n), make([]string, n)
		leases, nows := make([]time.Time, n), make([]time.Time, n)
		expires := make([]*time.Time, n)
		for i, o := range batch {
			c := o.c
			keys[i], tools[i], runs[i], windows[i] = c.Key, c.Tool, c.RunID, c.WindowID
			args[i], hashes[i], owners[i] = string(c.Args), c.ArgsHash, c.Owner
			leases[i], nows[i], expires[i] = c.LeaseUntil, c.Now, nullTime(c.ExpiresAt)
		}
		// ORDER BY key: batches lock keys in one order, so two batches
		// racing for the same keys cannot deadlock.
		rows, err := s.pool.Query(ctx, `INSERT INTO airlock_records (`+recordColumns+`)
			SELECT k, t, r, w, 'running', a, h, NULL, '', o, l, 1, n, n, e
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
				$8::timestamptz[], $9::timestamptz[], $10::timestamptz[]) AS i(k, t, r, w, a, h, o, l, n, e)
			ORDER BY k
			ON CONFLICT (key) DO NOTHING
			RETURNING key`, keys, tools, runs, windows, args, hashes, owners, leases, nows, expires)
		inserted := map[string]bool{}
		if err == nil {
			for rows.Next() {
				var k string
				if err = rows.Scan(&k); err != nil {
					break
				}
				inserted[k] = true
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			// Retry one by one: a failure of the whole (say, the database
			// is down) fails each; a bad op fails alone.
			for _, o := range batch {
				ins, err := s.claimOne(ctx, o.c)
				o.done <- claimResult{ins, err}
			}
		} else {
			for _, o := range batch {
				o.done <- claimResult{inserted[o.c.Key], nil}
			}
		}
	}
	if len(rest) > 0 {
		s.claimBatch(rest)
	}
}

func (s *Store) completeBatch(ops []*completeOp) {
	ctx := context.Background()
	if len(ops) == 1 {
		ops[0].done <- s.completeOne(ctx, ops[0].c)
		return
	}
	slices.SortStableFunc(ops, func(a, b *completeOp) int { return strings.Compare(a.c.Key, b.c.Key) })
	var rest []*completeOp
	batch := ops[:0:0]
	for i, o := range ops {
		if i > 0 && o.c.Key == ops[i-1].c.Key {
			rest = append(rest, o)
			continue
		}
		batch = append(batch, o)
	}
	n := len(batch)
	keys, owners, states, notes := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	results := make([]*string, n)
	nows := make([]time.Time, n)
	for i, o := range batch {
		c := o.c
		keys[i], owners[i], states[i], notes[i] = c.Key, c.Owner, string(c.State), c.Note
		results[i], nows[i] = nullText(c.Result), c.Now
	}
	rows, err := s.pool.Query(ctx, `WITH i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
				AS i(k, o, st, res, note, n)),
		u AS (
			UPDATE airlock_records r SET state = i.st, result = i.res, note = i.note, owner = '', updated_at = i.n
			FROM i WHERE r.key = i.k AND r.owner = i.o AND r.state = 'running'
			RETURNING r.key, r.waiters)
		SELECT key, CASE WHEN waiters THEN pg_notify('`+channel+`', key) END FROM u`,
		keys, owners, states, results, notes, nows)
	done := map[string]bool{}
	if err == nil {
		for rows.Next() {
			var k string
			var ignored any
			if err = rows.Scan(&k, &ignored); err != nil {
				break
			}
			done[k] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		for _, o := range batch {
			o.done <- s.completeOne(ctx, o.c)
		}
	} else {
		for _, o := range batch {
			if done[o.c.Key] {
				s.publish(o.c.Key)
				o.done <- nil
			} else {
				o.done <- airlock.ErrLeaseLost
			}
		}
	}
	if len(rest) > 0 {
		s.completeBatch(rest)
	}
}
