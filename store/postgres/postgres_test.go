package postgres_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB) airlock.Store {
	t.Helper()
	dsn := testdb.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, nil)
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
