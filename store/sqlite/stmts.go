package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// stmts are the statements of every call (claim, completion, heartbeat,
// audit events), prepared once on the writer's connection. SQLite spends as
// much CPU parsing a short statement as running it, and database/sql
// prepares an unprepared statement for every execution. Only the writer
// goroutine uses them. A statement is prepared after the first batch that
// ran it commits, when the single write connection is free again; later
// batches run it through Tx.StmtContext, which reuses the statement
// prepared on that connection.
type stmts struct {
	byQuery map[string]*sql.Stmt
	wanted  map[string]bool // ran unprepared in the current batch
}

// preparable are the statements worth preparing.
var preparable = func() map[string]bool {
	m := map[string]bool{claimSQL: true, completeSQL: true, heartbeatSQL: true}
	for _, q := range auditInserts {
		m[q] = true
	}
	return m
}()

// stmt returns the prepared statement of q, or nil (and notes q, if it is
// worth preparing).
func (st *stmts) stmt(q string) *sql.Stmt {
	if p := st.byQuery[q]; p != nil {
		return p
	}
	if preparable[q] {
		if st.wanted == nil {
			st.wanted = map[string]bool{}
		}
		st.wanted[q] = true
	}
	return nil
}

// prepareWanted prepares what the last batch ran unprepared. It runs
// between batches; a statement that fails to prepare runs unprepared.
func (st *stmts) prepareWanted(ctx context.Context, db *sql.DB) {
	for q := range st.wanted {
		delete(st.wanted, q)
		p, err := db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		if st.byQuery == nil {
			st.byQuery = map[string]*sql.Stmt{}
		}
		st.byQuery[q] = p
	}
}

func (st *stmts) close() error {
	var errs []error
	for _, p := range st.byQuery {
		errs = append(errs, p.Close())
	}
	st.byQuery = nil
	return errors.Join(errs...)
}

// exec runs q in tx, prepared once it has been.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if p := s.stmts.stmt(q); p != nil {
		return tx.StmtContext(ctx, p).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// queryRow is exec for a statement that returns one row.
func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if p := s.stmts.stmt(q); p != nil {
		return tx.StmtContext(ctx, p).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}
