// Package sqlite is the embedded airlock store: pure-Go SQLite
// (modernc.org/sqlite) in WAL mode with synchronous=FULL.
//
// Writes from concurrent callers are group-committed (internal/groupcommit,
// one batch in flight): the writes that arrive together — claims,
// completions, plans, audit events — are committed by one of their callers
// in one transaction on the one write connection, so they share one fsync.
// Reads use a separate pool and never wait for the writer. Several processes may share one file:
// each takes SQLite's write lock in turn (busy timeout), and uniqueness is
// the primary key on the record's key.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/groupcommit"
	"github.com/airlockhq/airlock/internal/migrations"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Config configures the store. A nil *Config means all defaults.
type Config struct {
	// BusyTimeout is how long a write waits for another process's write
	// lock. Default 10s.
	BusyTimeout time.Duration
	// MaxBatch bounds how many writes share one transaction. Default 256.
	MaxBatch int
	// ReadConns is the size of the read pool. Default 8.
	ReadConns int
	// PollInterval is how often waiters re-read a running record, for
	// completions by other processes. Default 10ms.
	PollInterval time.Duration
	// NoAudit leaves out the audit events of claims and completions. Only
	// for measuring what the audit log costs (airlock bench --compare-audit);
	// never in service. Default false.
	NoAudit bool
	// ReadOnly opens the file read-only (SQLite's mode=ro) for a command
	// that only reads: nothing is created, the journal mode is not set, a
	// write fails. Its bytes are never changed; SQLite may still make the
	// -wal and -shm files any reader of a WAL database uses. Default false.
	ReadOnly bool
	// EnqueueCommit inserts the commit job of a plan that becomes approved,
	// inside the transaction that approves it (package plan/riverqueue).
	// Default: none (plans are committed only when asked).
	EnqueueCommit func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error
	// EnqueueNotice inserts the job that announces a plan waiting for a
	// person, in the transaction that creates the plan. Default: none.
	EnqueueNotice func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error
}

// Store is the SQLite store.
type Store struct {
	path    string
	dsn     string
	enqueue func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error
	notice  func(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error
	read    *sql.DB
	write   *sql.DB
	writes  *groupcommit.Batcher[*op] // one batch in flight: SQLite has one writer
	poll    time.Duration

	closeOnce sync.Once

	noAudit bool
	stmts   stmts // used by the one batch in flight only

	subMu sync.RWMutex
	subs  map[int]func(string)
	subN  int
}

// op is one write; fn runs inside the batch's transaction. A nil error from
// fn with a logical outcome (not found, lease lost) is kept in the op.
type op struct {
	groupcommit.Slot
	fn     func(ctx context.Context, tx *sql.Tx) error
	ctx    context.Context
	notify string // a key that leaves running when this op commits
	err    error  // the result, set by the batch
}

// Open opens (creating if needed) the database file at path.
func Open(path string, cfg *Config) (*Store, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = 10 * time.Second
	}
	if path != ":memory:" && !cfg.ReadOnly {
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("sqlite: creating the directory of %s: %w", path, err)
			}
		}
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	if cfg.ReadOnly {
		q.Set("mode", "ro")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		q.Set("_txlock", "immediate")
	}
	q.Add("_pragma", "foreign_keys(ON)")
	dsn := URI(path, q)

	write, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	read, err := sql.Open("sqlite", dsn)
	if err != nil {
		write.Close()
		return nil, err
	}
	n := cfg.ReadConns
	if n <= 0 {
		n = 8
	}
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	s := &Store{
		path: path, dsn: dsn, enqueue: cfg.EnqueueCommit, notice: cfg.EnqueueNotice, read: read, write: write,
		poll: cfg.PollInterval, subs: map[int]func(string){}, noAudit: cfg.NoAudit,
	}
	if s.poll <= 0 {
		s.poll = 10 * time.Millisecond
	}
	batch := cfg.MaxBatch
	if batch <= 0 {
		batch = 256
	}
	s.writes = groupcommit.New(groupcommit.Config{MaxInFlight: 1, MaxBatch: batch}, s.commit)
	// Fail early when the file cannot be opened or is not a database.
	if err := write.PingContext(context.Background()); err != nil {
		s.read.Close()
		s.write.Close()
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	return s, nil
}

// URI is the SQLite URI of the file at path with params: the path's %, ?
// and # escaped, so that a file named a#b.db is that file (unescaped, #
// would end the path and drop the parameters, mode=ro among them).
func URI(path string, params url.Values) string {
	u := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	return u
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// DB returns the read pool, for tools such as the benchmark baseline.
func (s *Store) DB() *sql.DB { return s.read }

// OpenDB opens another pool on the store's file with the store's own
// settings (busy timeout, WAL, synchronous=FULL, immediate transactions),
// for a component that needs connections of its own: the commit queue's
// River client. The caller closes it.
func (s *Store) OpenDB(maxConns int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", s.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db, nil
}

// Close refuses new writes, waits for the queued ones to commit, and
// closes the database.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.writes.Close()
		err = errors.Join(s.stmts.close(), s.write.Close(), s.read.Close())
	})
	return err
}

var errClosed = errors.New("sqlite: store closed")

func (s *Store) commit(batch []*op) {
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.err = err // its caller gave up before the batch began: not written
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	err := s.runBatch(live)
	if err != nil && len(live) > 1 {
		// Nothing of the batch was committed. Retry op by op, as the
		// PostgreSQL store does: one bad op (or its audit event) fails
		// alone instead of failing every caller that shared its batch.
		// Failures are rare, so the common path keeps its single fsync.
		for _, o := range live {
			s.finish([]*op{o}, s.runBatch([]*op{o}))
		}
		return
	}
	s.finish(live, err)
}

// finish answers the ops of a batch and announces their keys.
func (s *Store) finish(ops []*op, err error) {
	for _, o := range ops {
		o.err = err
	}
	if err == nil {
		for _, o := range ops {
			if o.notify != "" {
				s.publish(o.notify)
			}
		}
	}
}

func (s *Store) runBatch(batch []*op) (err error) {
	// The batch's audit events are gathered and written together at the
	// end, in the same transaction: a few multi-row INSERTs instead of one
	// statement per event.
	events := &pendingEvents{}
	ctx := context.WithValue(context.Background(), pendingKey{}, events)
	defer s.stmts.prepareWanted(ctx, s.write)
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, o := range batch {
		if err := o.fn(ctx, tx); err != nil {
			return err
		}
	}
	if err := events.flush(ctx, s, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// do queues a write and waits for its batch to commit.
func (s *Store) do(ctx context.Context, notify string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	o := &op{fn: fn, ctx: ctx, notify: notify}
	// Once queued, the caller waits for the commit whatever its context
	// says: it must learn whether its write is durable.
	if err := s.writes.Submit(ctx, o); err != nil {
		if errors.Is(err, groupcommit.ErrClosed) {
			return errClosed
		}
		return err
	}
	return o.err
}

func (s *Store) publish(key string) {
	s.subMu.RLock()
	defer s.subMu.RUnlock()
	for _, fn := range s.subs {
		fn(key)
	}
}

// Subscribe implements airlock.Store. SQLite cannot tell one process about
// another's commits, so only this process's completions are reported;
// waiters poll for the rest (PollInterval).
func (s *Store) Subscribe(fn func(key string)) func() {
	s.subMu.Lock()
	s.subN++
	id := s.subN
	s.subs[id] = fn
	s.subMu.Unlock()
	return func() {
		s.subMu.Lock()
		delete(s.subs, id)
		s.subMu.Unlock()
	}
}

// PollInterval implements airlock.Store.
func (s *Store) PollInterval() time.Duration { return s.poll }

// Watch implements airlock.Store. Completions in this process wake waiters
// directly; other processes' completions are found by polling, so there is
// nothing to mark.
func (s *Store) Watch(context.Context, string) error { return nil }

// Migrate implements airlock.Store.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations.Load(mustSub(migrationFiles, "migrations"))
	if err != nil {
		return err
	}
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema_migrations (
			version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have); err != nil {
			return err
		}
		if have > migrations.Latest(ms) {
			return fmt.Errorf("sqlite: the database is at schema version %d, newer than this airlock (%d); upgrade airlock", have, migrations.Latest(ms))
		}
		for _, m := range ms[have:] {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("sqlite: migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixMicro()); err != nil {
				return err
			}
		}
		return nil
	})
}

// ProbeWrite implements airlock.Store: through the writer, as a claim goes.
func (s *Store) ProbeWrite(ctx context.Context) error {
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO airlock_ready (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at`, time.Now().UnixMicro())
		return err
	})
}

// Ping implements airlock.Store: the database answers and is migrated.
func (s *Store) Ping(ctx context.Context) error {
	ms, err := migrations.Load(mustSub(migrationFiles, "migrations"))
	if err != nil {
		return err
	}
	var have int
	if err := s.read.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("sqlite: reading the schema version (run airlock migrate): %w", err)
	}
	if have < migrations.Latest(ms) {
		return fmt.Errorf("sqlite: schema version %d, want %d: run airlock migrate", have, migrations.Latest(ms))
	}
	return nil
}

// LatestSchema is the schema version this build's migrations reach.
func LatestSchema() int {
	ms, err := migrations.Load(mustSub(migrationFiles, "migrations"))
	if err != nil {
		return 0
	}
	return migrations.Latest(ms)
}

// SchemaVersion is the database's schema version: the last migration
// applied, 0 for a database never migrated.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return schemaVersion(ctx, s.read)
}

// SchemaVersionOf reads the schema version of the database at path without
// opening it as a store: read-only, so nothing is written to it, not even
// the journal mode a store sets on open (airlock migrate --status, version).
func SchemaVersionOf(ctx context.Context, path string) (int, error) {
	db, err := sql.Open("sqlite", URI(path, url.Values{"mode": {"ro"}}))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return schemaVersion(ctx, db)
}

func schemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'airlock_schema_migrations'`).Scan(&tables); err != nil {
		return 0, err
	}
	if tables == 0 {
		return 0, nil
	}
	var have int
	err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&have)
	return have, err
}

// Backup writes a consistent copy of the database to path (which must not
// exist) while it serves: SQLite's VACUUM INTO reads one snapshot, so the
// copy holds every transaction committed before it began and none after,
// whatever the writer does meanwhile.
func (s *Store) Backup(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("sqlite: backup: %s exists; name a new file", path)
	}
	if _, err := s.read.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("sqlite: backup to %s: %w", path, err)
	}
	return nil
}

// Migrations are this build's migrations, in order.
func Migrations() ([]migrations.Migration, error) {
	return migrations.Load(mustSub(migrationFiles, "migrations"))
}
