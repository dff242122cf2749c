package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolModeParam is the DSN parameter that says how a connection pooler
// between airlock and PostgreSQL (PgBouncer, pgcat, Odyssey, Supavisor,
// RDS Proxy) hands out server connections: "session" (the default, also
// right for a direct connection) or "transaction". airlock reads it and
// removes it before connecting; PostgreSQL never sees it.
const PoolModeParam = "pool_mode"

// Pool modes.
const (
	PoolModeSession     = "session"
	PoolModeTransaction = "transaction"
)

// errTransactionPooling is what a start on a transaction-mode pooler
// without pool_mode=transaction in the DSN returns.
var errTransactionPooling = errors.New("postgres: PostgreSQL is reached through a connection pooler in transaction mode " +
	"(such as PgBouncer's pool_mode = transaction), which hands each transaction a different server connection; " +
	"add " + PoolModeParam + "=" + PoolModeTransaction + " to the DSN so that airlock uses no prepared statements, " +
	"LISTEN or session locks (see docs/operations.md, \"Behind PgBouncer\"), or connect directly")

// takePoolMode reads and removes the pool_mode parameter and sets the pool
// up for it: in transaction mode every statement is sent unprepared (the
// extended protocol's unnamed statement, in one round trip), since a named
// prepared statement lives on one server connection and the next
// transaction may get another.
func takePoolMode(pc *pgxpool.Config) (transaction bool, err error) {
	mode, ok := pc.ConnConfig.RuntimeParams[PoolModeParam]
	delete(pc.ConnConfig.RuntimeParams, PoolModeParam)
	switch {
	case !ok || mode == PoolModeSession:
		return false, nil
	case mode == PoolModeTransaction:
		if pc.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
		return true, nil
	case mode == "statement":
		return false, fmt.Errorf("postgres: the DSN's %s=statement is not supported: airlock writes in transactions of several statements; use %s or %s", PoolModeParam, PoolModeSession, PoolModeTransaction)
	default:
		return false, fmt.Errorf("postgres: the DSN's %s is %q; want %s (a direct connection or a session-mode pooler) or %s (a transaction-mode pooler such as PgBouncer's)", PoolModeParam, mode, PoolModeSession, PoolModeTransaction)
	}
}

// TransactionPooling reports whether the DSN said pool_mode=transaction:
// the store then listens for no notifications (waiters poll) and the commit
// queue must run poll-only.
func (s *Store) TransactionPooling() bool { return s.txPooling }

// checkSessionPooling refuses a transaction-mode pooler the DSN did not
// declare. On a direct connection (or a session-mode pooler) a session
// keeps its server process, and two sessions open at once never share one;
// behind a transaction-mode pooler a session's next statement may run in
// another server process, or wait for the one another session's open
// transaction holds. Either is seen here, with simple-protocol statements so
// that the probe itself needs no prepared statement.
func (s *Store) checkSessionPooling(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Two connections of their own, whatever the pool's size.
	first, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer first.Close(context.Background())
	second, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer second.Close(context.Background())
	const pid = `SELECT pg_backend_pid()`
	var before, other, after int32
	if err := first.QueryRow(ctx, pid, pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	tx, err := second.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a read-only probe
	if err := tx.QueryRow(ctx, pid, pgx.QueryExecModeSimpleProtocol).Scan(&other); err != nil {
		return fmt.Errorf("postgres: a transaction of two statements failed (a pooler in statement mode?): %w", err)
	}
	if other == before {
		return errTransactionPooling
	}
	wait, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	err = first.QueryRow(wait, pid, pgx.QueryExecModeSimpleProtocol).Scan(&after)
	var pgErr *pgconn.PgError
	switch {
	case wait.Err() != nil:
		// Blocked behind the other session's transaction: they share a
		// server connection. (The cancel closes the connection.)
		return errTransactionPooling
	case errors.As(err, &pgErr):
		return fmt.Errorf("postgres: %w", err)
	case err != nil:
		return fmt.Errorf("postgres: %w", err)
	case after != before:
		return errTransactionPooling
	}
	return nil
}
