package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB) airlock.Store { return openStore(t, nil) }

func openStore(t testing.TB, cfg *sqlite.Config) airlock.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"), cfg)
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
		return openStore(t, &sqlite.Config{EnqueueCommit: func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error {
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
		return openStore(t, &sqlite.Config{EnqueueNotice: func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error {
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
		if _, err := s.(*sqlite.Store).DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	})
}
func BenchmarkReport(b *testing.B) { storetest.BenchReport(b, newStore) }
