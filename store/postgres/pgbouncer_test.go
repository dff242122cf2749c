package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/plan/riverqueue"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/storetest"
)

// TestConformanceBehindPgBouncer runs the conformance suite through a real
// PgBouncer in transaction mode, with fewer server connections than the
// store's pool, so that consecutive transactions of one client connection
// land on different server connections: with pool_mode=transaction in the
// DSN every rule holds as on a direct connection.
func TestConformanceBehindPgBouncer(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t testing.TB) airlock.Store {
		dsn := testdb.PgBouncer(t, testdb.Schema(t), "transaction", 2) + "&pool_mode=transaction"
		s, err := postgres.Open(context.Background(), dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if !s.TransactionPooling() {
			t.Fatal("pool_mode=transaction was not taken")
		}
		if err := s.MigrateWith(context.Background(), riverqueue.Postgres(s.Pool()).MigrateStep); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestTransactionPoolerIsRefusedWithoutTheFlag: behind PgBouncer in
// transaction mode, a DSN that does not say so is refused at migration
// (every start migrates) with an error that names the parameter, whether
// the pooler has one server connection (the probe's statement waits behind
// the other session's transaction) or several (it runs on another);
// nothing is written. In session mode the same start is accepted.
func TestTransactionPoolerIsRefusedWithoutTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    string
		servers int
		refused bool
	}{
		{"transaction", 1, true},
		{"transaction", 3, true},
		{"session", 3, false},
	} {
		t.Run(tc.mode+"/"+string(rune('0'+tc.servers)), func(t *testing.T) {
			t.Parallel()
			schema := testdb.Schema(t)
			s, err := postgres.Open(context.Background(), testdb.PgBouncer(t, schema, tc.mode, tc.servers), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Migrate(context.Background())
			if !tc.refused {
				if err != nil {
					t.Fatalf("session mode: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "pool_mode=transaction") {
				t.Fatalf("got %v; want a refusal naming pool_mode=transaction", err)
			}
			direct, err := pgxpool.New(context.Background(), schema)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			var tables int
			if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Fatalf("%d tables were created before the refusal; want none", tables)
			}
		})
	}
}

// TestPoolModeParameter: the DSN's pool_mode takes session or transaction;
// anything else is refused naming the parameter and what is expected.
func TestPoolModeParameter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ value, want string }{
		{"statement", "pool_mode=statement is not supported"},
		{"transactions", `pool_mode is "transactions"; want session`},
	} {
		_, err := postgres.Open(context.Background(), "postgres://u@127.0.0.1:1/db?pool_mode="+tc.value, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pool_mode=%s: %v; want an error saying %q", tc.value, err, tc.want)
		}
	}
	for _, dsn := range []string{"postgres://u@127.0.0.1:1/db?pool_mode=session", "host=127.0.0.1 port=1 user=u dbname=db pool_mode=transaction"} {
		s, err := postgres.Open(context.Background(), dsn, nil)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if got, want := s.TransactionPooling(), strings.HasSuffix(dsn, "transaction"); got != want {
			t.Errorf("%s: transaction pooling %v, want %v", dsn, got, want)
		}
		s.Close()
	}
}

// TestReplicasMigrateTogether: stores opened at once on a fresh database
// all migrate it, airlock's migrations and River's, with no error: each
// step is taken under the one lock.
func TestReplicasMigrateTogether(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), dsn, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			errs[i] = s.MigrateWith(context.Background(), riverqueue.Postgres(s.Pool()).MigrateStep)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	var river int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM river_migration`).Scan(&river); err != nil || river == 0 {
		t.Fatalf("River's migrations: %d rows, %v", river, err)
	}
}

// TestMigrateWithAPoolOfOne: the start's pooler check opens connections of
// its own, so a pool of one connection migrates (it would wait for ever for
// a second pooled one).
func TestMigrateWithAPoolOfOne(t *testing.T) {
	t.Parallel()
	dsn := strings.Replace(testdb.Schema(t), "pool_max_conns=4", "pool_max_conns=1", 1)
	if !strings.Contains(dsn, "pool_max_conns=1") {
		t.Fatalf("no pool size to change in %s", dsn)
	}
	s, err := postgres.Open(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate with one connection: %v", err)
	}
}
