// Package postgres is the airlock store on PostgreSQL (pgx v5), for many
// airlock replicas sharing the work. Uniqueness is the primary key on the
// record's key; every state change is a conditional UPDATE; completions are
// announced with NOTIFY in the same statement, so waiters in every replica
// wake as soon as the result is committed.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/groupcommit"
	"github.com/airlockhq/airlock/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// channel is the NOTIFY channel that carries keys of records leaving running.
const channel = "airlock_records"

// Config configures the store. A nil *Config means all defaults.
type Config struct {
	// MaxConns is the pool size. Default: the DSN's pool_max_conns, else 16.
	MaxConns int32
	// PollInterval is how often waiters re-read a running record in case a
	// notification was missed (while the listener reconnects). Default 1s;
	// 500ms with pool_mode=transaction in the DSN, where there is no
	// listener and waiters learn of completions in other replicas only by
	// polling.
	PollInterval time.Duration
	// Writers is how many batches of claims and completions are sent at
	// once, each on its own connection. Default 2: on a small machine fewer,
	// fuller batches cost the database less CPU.
	Writers int
	// Logger says when the listener of completions (LISTEN) loses its
	// connection and when it has it again. Default: discarded.
	Logger *slog.Logger
	// MaxBatch bounds the claims and completions sent in one statement.
	// Default 128.
	MaxBatch int
	// NoAudit leaves out the audit events of claims and completions. Only
	// for measuring what the audit log costs (airlock bench --compare-audit);
	// never in service. Default false.
	NoAudit bool
	// EnqueueCommit inserts the commit job of a plan that becomes approved,
	// inside the transaction that approves it (package plan/riverqueue).
	// Default: none (plans are committed only when asked).
	EnqueueCommit func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error
	// EnqueueNotice inserts the job that announces a plan waiting for a
	// person, in the transaction that creates the plan. Default: none.
	EnqueueNotice func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error
}

// Store is the PostgreSQL store.
type Store struct {
	pool    *pgxpool.Pool
	enqueue func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error
	notice  func(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error
	poll    time.Duration

	subMu    sync.RWMutex
	subs     map[int]func(string)
	subN     int
	listenMu sync.Mutex
	listenOn bool
	stop     context.CancelFunc
	// listenFailures counts the listener's lost connections; log says so.
	listenFailures atomic.Int64
	log            *slog.Logger
	wg             sync.WaitGroup

	batch     *groupcommit.Batcher[*op]
	closeOnce sync.Once
	noAudit   bool
	txPooling bool // the DSN's pool_mode=transaction
}

var errClosed = errors.New("postgres: store closed")

// Open connects to the database at dsn (postgres://... or key=value
// pairs). The DSN may say pool_mode=transaction (PoolModeParam) when a
// transaction-mode pooler such as PgBouncer stands between airlock and
// PostgreSQL.
func Open(ctx context.Context, dsn string, cfg *Config) (*Store, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	txPooling, err := takePoolMode(pc)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case strings.Contains(dsn, "pool_max_conns"):
		// The DSN says; keep it.
	case pc.MaxConns < 16:
		pc.MaxConns = 16
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: pool, enqueue: cfg.EnqueueCommit, notice: cfg.EnqueueNotice, poll: cfg.PollInterval, subs: map[int]func(string){}, noAudit: cfg.NoAudit, txPooling: txPooling,
		log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case s.poll > 0:
	case txPooling:
		s.poll = 500 * time.Millisecond
	default:
		s.poll = time.Second
	}
	writers, batch := cfg.Writers, cfg.MaxBatch
	if writers <= 0 {
		writers = 2
	}
	if batch <= 0 {
		batch = 128
	}
	s.batch = groupcommit.New(groupcommit.Config{MaxInFlight: writers, MaxBatch: batch}, s.flush)
	return s, nil
}

// Pool is the connection pool, for tools such as the benchmark baseline.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.batch.Close()
	})
	s.listenMu.Lock()
	if s.stop != nil {
		s.stop()
	}
	s.listenMu.Unlock()
	s.wg.Wait()
	s.pool.Close()
	return nil
}

// PollInterval implements airlock.Store.
func (s *Store) PollInterval() time.Duration { return s.poll }

// Subscribe implements airlock.Store: keys come from LISTEN on one
// connection, for completions in every process sharing the database.
// Behind a transaction-mode pooler a LISTEN would stay on a server
// connection others then use, so there is none: waiters poll.
func (s *Store) Subscribe(fn func(key string)) func() {
	s.subMu.Lock()
	s.subN++
	id := s.subN
	s.subs[id] = fn
	s.subMu.Unlock()
	if !s.txPooling {
		s.startListener()
	}
	return func() {
		s.subMu.Lock()
		delete(s.subs, id)
		s.subMu.Unlock()
	}
}

func (s *Store) publish(key string) {
	s.subMu.RLock()
	defer s.subMu.RUnlock()
	for _, fn := range s.subs {
		fn(key)
	}
}

func (s *Store) startListener() {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.listenOn {
		return
	}
	s.listenOn = true
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		const first = 50 * time.Millisecond
		backoff := first
		for ctx.Err() == nil {
			listening, err := s.listen(ctx)
			if ctx.Err() != nil {
				return
			}
			if listening {
				backoff = first // it was up: the next loss starts the backoff anew
			}
			// Waiters poll meanwhile (PollInterval).
			s.log.Warn("airlock: store listener lost its connection; reconnecting", "service", "listener", "err", err, "retry_in", backoff)
			s.listenFailures.Add(1)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
}

// ListenFailures is how many times the listener of completions lost its
// connection (or could not make one), for tests and figures.
func (s *Store) ListenFailures() int64 { return s.listenFailures.Load() }

// listen runs LISTEN until its connection fails; listening reports
// whether it got as far as listening.
func (s *Store) listen(ctx context.Context) (listening bool, err error) {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A LISTEN connection must not go back to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return false, err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		s.publish(n.Payload)
	}
}

// Migrate implements airlock.Store. An advisory lock lets many replicas
// start at once.
func (s *Store) Migrate(ctx context.Context) error { return s.MigrateWith(ctx) }

// MigrateWith applies airlock's migrations and then more (the commit
// queue's), one migration per transaction, each under a transaction-scoped
// advisory lock and deciding what is next only once it holds it: replicas
// started together on a fresh database take turns, and one finds done what
// another did. (River's migrations take no lock of their own.) A
// transaction-scoped lock, unlike a session's, also holds behind a
// transaction-mode pooler. Without pool_mode=transaction in the DSN, such a
// pooler found here is refused before anything is written.
//
// Each of more applies its next step, if any, in the transaction it is
// given and reports whether it applied one.
func (s *Store) MigrateWith(ctx context.Context, more ...func(context.Context, pgx.Tx) (bool, error)) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if !s.txPooling {
		if err := s.checkSessionPooling(ctx); err != nil {
			return err
		}
	}
	for {
		applied := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			applied, err = migrateStep(ctx, tx, ms, more)
			return err
		})
		if err != nil || !applied {
			return err
		}
	}
}

// migrateStep applies the next migration, airlock's first, under the lock.
func migrateStep(ctx context.Context, tx pgx.Tx, ms []migrations.Migration, more []func(context.Context, pgx.Tx) (bool, error)) (bool, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7412093)`); err != nil {
		return false, fmt.Errorf("postgres: taking the migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema_migrations (
		version integer NOT NULL PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	if have > migrations.Latest(ms) {
		return false, fmt.Errorf("postgres: the database is at schema version %d, newer than this airlock (%d); upgrade airlock", have, migrations.Latest(ms))
	}
	if have < len(ms) {
		m := ms[have]
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return false, fmt.Errorf("postgres: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO airlock_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return false, fmt.Errorf("postgres: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		return true, nil
	}
	for _, step := range more {
		if applied, err := step(ctx, tx); err != nil || applied {
			return applied, err
		}
	}
	return false, nil
}

// ProbeWrite implements airlock.Store.
func (s *Store) ProbeWrite(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO airlock_ready (id, at) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at`)
	return err
}

// Ping implements airlock.Store: the database answers and is migrated.
func (s *Store) Ping(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	var have int
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("postgres: reading the schema version (run airlock migrate): %w", err)
	}
	if have < migrations.Latest(ms) {
		return fmt.Errorf("postgres: schema version %d, want %d: run airlock migrate", have, migrations.Latest(ms))
	}
	return nil
}

func loadMigrations() ([]migrations.Migration, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return migrations.Load(sub)
}

var errNoRows = pgx.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }

// airlockTables are the tables whose dead rows and statistics autovacuum
// looks after; Vacuum names them.
var airlockTables = []string{
	"airlock_records", "airlock_plans", "airlock_audit", "airlock_audit_anchor",
	"airlock_rollup", "airlock_rollup_hour", "airlock_run_calls", "airlock_run_hist", "airlock_ready",
	"airlock_sessions", "airlock_secrets", "airlock_tasks",
}

// Warnings are what an operator should know about the database's settings:
// airlock relies on autovacuum (on by default) to keep the partial indexes
// it pages and seals with small and the planner's statistics current.
// Without it, a day of sealing leaves millions of dead index entries and
// the pages slow down by orders of magnitude.
func (s *Store) Warnings(ctx context.Context) []string {
	if on, err := s.AutovacuumOn(ctx); err != nil || on {
		return nil
	}
	return []string{"postgres: autovacuum is off; airlock's tables need it (or VACUUM (ANALYZE) run often): dead rows and stale statistics slow the pages and the sealer as the log grows"}
}

// AutovacuumOn reports whether the server's autovacuum is on.
func (s *Store) AutovacuumOn(ctx context.Context) (bool, error) {
	var on string
	err := s.pool.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&on)
	return on == "on", err
}

// Vacuum runs VACUUM (ANALYZE) on airlock's tables: what autovacuum does in
// the background. For a database where autovacuum is off (airlock bench
// --mode soak runs it there, as autovacuum would).
func (s *Store) Vacuum(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `VACUUM (ANALYZE) `+strings.Join(airlockTables, ", "))
	return err
}

// LatestSchema is the schema version this build's migrations reach.
func LatestSchema() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return migrations.Latest(ms)
}

// SchemaVersion is the database's schema version: the last migration
// applied, 0 for a database never migrated.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('airlock_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var have int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have)
	return have, err
}

// Migrations are this build's migrations, in order.
func Migrations() ([]migrations.Migration, error) { return loadMigrations() }
