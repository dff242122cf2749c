package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB) airlock.Store { return openStore(t, nil) }

func openStore(t testing.TB, cfg *postgres.Config) airlock.Store {
	t.Helper()
	dsn := testdb.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, newStore)
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	storetest.RunOutbox(t, func(t testing.TB, enqueue func(context.Context, *airlock.Plan) error) airlock.Store {
		return openStore(t, &postgres.Config{EnqueueCommit: func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error {
			if tx == nil {
				t.Error("the commit was enqueued without the approving transaction")
			}
			return enqueue(ctx, p)
		}})
	})
}

func TestNoticeOutbox(t *testing.T) {
	t.Parallel()
	storetest.RunNoticeOutbox(t, func(t testing.TB, enqueue func(context.Context, *airlock.Plan) error) airlock.Store {
		return openStore(t, &postgres.Config{EnqueueNotice: func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error {
			if tx == nil {
				t.Error("the notice was enqueued without the creating transaction")
			}
			return enqueue(ctx, p)
		}})
	})
}

func BenchmarkGuard(b *testing.B) { storetest.Bench(b, newStore) }

func TestAudit(t *testing.T) {
	t.Parallel()
	storetest.RunAudit(t, newStore, func(t testing.TB, s airlock.Store, q string) {
		t.Helper()
		if _, err := s.(*postgres.Store).Pool().Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	})
}
func BenchmarkReport(b *testing.B) { storetest.BenchReport(b, newStore) }

// The soak benchmark and the server's warning rely on these: the setting
// is read as the server has it, and Vacuum leaves every airlock table with
// statistics (reltuples is -1 until a table is vacuumed or analyzed).
func TestVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t).(*postgres.Store)
	var setting string
	if err := s.Pool().QueryRow(ctx, `SHOW autovacuum`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	on, err := s.AutovacuumOn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if on != (setting == "on") {
		t.Fatalf("AutovacuumOn = %v, the server says %q", on, setting)
	}
	if w := s.Warnings(ctx); len(w) != map[bool]int{true: 0, false: 1}[on] {
		t.Fatalf("autovacuum %q: warnings %q", setting, w)
	}
	if err := s.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT relname, reltuples FROM pg_class
		WHERE relkind = 'r' AND relname LIKE 'airlock\_%' AND relnamespace = current_schema()::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var name string
		var tuples float64
		if err := rows.Scan(&name, &tuples); err != nil {
			t.Fatal(err)
		}
		n++
		if tuples < 0 && name != "airlock_schema_migrations" { // airlock's bookkeeping, written once
			t.Errorf("%s has no statistics after Vacuum", name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("found %d airlock tables in the test's schema", n)
	}
}

// The sealer finds a page's rows by the primary key, not by hashing the
// whole log: joined on id alone, the planner scans the table for every
// page while the log is small enough (tens of thousands of events), a
// cost per seal that grows with the log.
func TestSealingReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newStore(t).(*postgres.Store).Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO airlock_audit (at, kind) SELECT now(), 'claimed' FROM generate_series(1, 20000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE airlock_audit`); err != nil {
		t.Fatal(err)
	}
	rows, _ := pool.Query(ctx, `SELECT id FROM airlock_audit ORDER BY id LIMIT 800`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	prevs, hashes := make([]string, len(ids)), make([]string, len(ids))
	rows, _ = pool.Query(ctx, "EXPLAIN "+postgres.WriteSealsSQL, ids, ids, prevs, hashes, ids[0], ids[len(ids)-1])
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan on airlock_audit") {
		t.Fatalf("sealing a page of %d events scans the whole log:\n%s", len(ids), plan)
	}
}
