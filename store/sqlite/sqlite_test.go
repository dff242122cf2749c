package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
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

// An unsealed row older than the sealed head was not written by airlock's
// insert (one writer gives ids in the order events are written): one
// inserted with an id of its choosing is never sealed into the chain, and
// stays counted as not sealed.
func TestSealerLeavesRowsOlderThanTheHead(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	var events []*airlock.AuditEvent
	for i := range 5 {
		events = append(events, &airlock.AuditEvent{At: time.Now(), Kind: airlock.EventCompleted, RunID: "r", Key: fmt.Sprint("k", i), Tool: "t", Actor: "a"})
	}
	if err := s.AppendAudit(ctx, events); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SealAudit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	db := s.(*sqlite.Store).DB()
	if _, err := db.Exec(`INSERT INTO airlock_audit (id, at, kind, actor) VALUES (-1, 0, 'decided', 'mallory')`); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, []*airlock.AuditEvent{{At: time.Now(), Kind: airlock.EventClaimed, RunID: "r", Key: "k9", Tool: "t", Actor: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SealAudit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	var seq sql.NullInt64
	if err := db.QueryRow(`SELECT seq FROM airlock_audit WHERE id = -1`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	r, err := audit.Verify(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if seq.Valid || !r.OK || r.Events != 6 || r.Unsealed != 1 {
		t.Fatalf("forged row sealed as %v; verify %+v", seq, r)
	}
}
