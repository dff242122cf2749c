package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB) airlock.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"), nil)
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
		if _, err := s.(*sqlite.Store).DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	})
}
