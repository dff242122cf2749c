package promise_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/promise"
	"github.com/airlockhq/airlock/internal/testdb"
)

// The short run is CI's; scripts/check-promise.sh runs the long one before
// a release (docs/hardening.md, "The history checker").
var (
	seedFlag  = flag.Uint64("promise.seed", 0, "replay this seed (0: a new one, printed)")
	callsFlag = flag.Int("promise.calls", 300, "calls per driver")
	worksFlag = flag.Int("promise.works", 24, "pieces of work the callers share")
)

func seed(t *testing.T) uint64 {
	s := *seedFlag
	if v := os.Getenv("AIRLOCK_PROMISE_SEED"); s == 0 && v != "" {
		s, _ = strconv.ParseUint(v, 10, 64)
	}
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test ./internal/promise -run %s -promise.seed %d)", s, t.Name(), s)
	return s
}

func run(t *testing.T, cfg *promise.Config) {
	t.Helper()
	cfg.Log = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := promise.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	t.Logf("%d operations, %d effects; calls by door %v", rep.Operations, rep.Effects, rep.Calls)
	t.Logf("answers: %v", rep.Answers)
}

// The promise on embedded SQLite: every front door, faults at the
// services, lost replies, holders that vanish or stall past their lease,
// forged handles, and the replica restarted mid-run.
func TestPromiseOnSQLite(t *testing.T) {
	t.Parallel()
	run(t, &promise.Config{Seed: seed(t), DSN: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Replicas: 1,
		Works: *worksFlag, Calls: *callsFlag, Callers: 6, Faults: 0.2, Restarts: 1})
}

// The promise on PostgreSQL with two replicas, one restarted mid-run, and
// the store's connections terminated under them.
func TestPromiseOnPostgres(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	app := "airlock_promise_" + strconv.FormatUint(rand.Uint64()%1e9, 10)
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	dsn := u.String()
	run(t, &promise.Config{Seed: seed(t), DSN: dsn, Replicas: 2,
		Works: *worksFlag, Calls: *callsFlag, Callers: 6, Faults: 0.2, Restarts: 1,
		Chaos: func(ctx context.Context) error { return terminateBackends(ctx, dsn, app) }, ChaosEvery: 700 * time.Millisecond})
}

// terminateBackends ends one of the run's connections to PostgreSQL (by
// its application_name, so no other test's): the store sees it fail
// mid-statement and reconnects.
func terminateBackends(ctx context.Context, dsn, app string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1`, app)
	return err
}
