package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The baseline is what a careful team writes by hand: insert a claim row
// (the primary key makes it unique), run the side effect, update the row
// with the result; a caller that loses the insert polls for the result.
// Each statement commits on its own.

const baselinePoll = 5 * time.Millisecond

// SQLBaseline is the baseline over database/sql (SQLite).
type SQLBaseline struct{ DB *sql.DB }

// Setup creates the baseline's table.
func (b *SQLBaseline) Setup(ctx context.Context) error {
	_, err := b.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_bench_baseline (
		key TEXT PRIMARY KEY, result TEXT)`)
	return err
}

// Call implements Caller.
func (b *SQLBaseline) Call(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	res, err := b.DB.ExecContext(ctx, `INSERT INTO airlock_bench_baseline (key) VALUES (?) ON CONFLICT (key) DO NOTHING`, key)
	if err != nil {
		return nil, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		out := fn()
		if _, err := b.DB.ExecContext(ctx, `UPDATE airlock_bench_baseline SET result = ? WHERE key = ?`, string(out), key); err != nil {
			return nil, true, err
		}
		return out, true, nil
	}
	for {
		var result sql.NullString
		if err := b.DB.QueryRowContext(ctx, `SELECT result FROM airlock_bench_baseline WHERE key = ?`, key).Scan(&result); err != nil {
			return nil, false, err
		}
		if result.Valid {
			return json.RawMessage(result.String), false, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(baselinePoll):
		}
	}
}

// PgBaseline is the baseline over a pgx pool (PostgreSQL).
type PgBaseline struct{ Pool *pgxpool.Pool }

// Setup creates the baseline's table.
func (b *PgBaseline) Setup(ctx context.Context) error {
	_, err := b.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS airlock_bench_baseline (key text PRIMARY KEY, result text)`)
	return err
}

// Call implements Caller.
func (b *PgBaseline) Call(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	tag, err := b.Pool.Exec(ctx, `INSERT INTO airlock_bench_baseline (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key)
	if err != nil {
		return nil, false, err
	}
	if tag.RowsAffected() == 1 {
		out := fn()
		if _, err := b.Pool.Exec(ctx, `UPDATE airlock_bench_baseline SET result = $1 WHERE key = $2`, string(out), key); err != nil {
			return nil, true, err
		}
		return out, true, nil
	}
	for {
		var result *string
		err := b.Pool.QueryRow(ctx, `SELECT result FROM airlock_bench_baseline WHERE key = $1`, key).Scan(&result)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, err
		}
		if result != nil {
			return json.RawMessage(*result), false, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(baselinePoll):
		}
	}
}
