// Package riverqueue runs plan commits and webhook notices on River
// (github.com/riverqueue/river):
// the commit job is inserted by the store in the same transaction that
// approves the plan (unique per plan; Inserter, typed to the
// driver's transaction), and the worker calls
// plan.Service.Commit, which goes through the guarded call with the tool's
// key — so a retried or rescued job never executes the tool twice. The
// notice job of a plan waiting for a person is inserted with the plan and
// retried with backoff until the webhook takes it (plan.Service.Announce).
// PostgreSQL uses River's pgx driver on the store's pool; SQLite its
// database/sql driver on a connection opened with the store's settings.
package riverqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/plan"
)

// CommitArgs is the commit job: one per plan (unique by args).
type CommitArgs struct {
	PlanID string `json:"plan_id"`
}

// Kind implements river.JobArgs.
func (CommitArgs) Kind() string { return "airlock_commit" }

// InsertOpts makes the job unique per plan.
func (CommitArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}, MaxAttempts: 10}
}

// Committer commits a plan and announces one that waits for a person;
// *plan.Service is one.
type Committer interface {
	Commit(ctx context.Context, planID string) error
	Announce(ctx context.Context, planID string) error
}

// NoticeArgs is the job that announces a plan waiting for a person: one per
// plan (unique by args), inserted with the plan.
type NoticeArgs struct {
	PlanID string `json:"plan_id"`
}

// Kind implements river.JobArgs.
func (NoticeArgs) Kind() string { return "airlock_notice" }

// noticeAttempts: with noticeBackoff, 1s doubling to 5m, about 90 minutes
// of trying before the notice is given up (the plan stays in the queue).
const (
	noticeAttempts   = 25
	noticeMaxBackoff = 5 * time.Minute
)

// InsertOpts makes the job unique per plan.
func (NoticeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}, MaxAttempts: noticeAttempts}
}

type noticeWorker struct {
	river.WorkerDefaults[NoticeArgs]
	notices Committer
	// asked holds the Retry-After a webhook asked for, by job, from Work
	// to the NextRetry River calls right after it.
	asked sync.Map
}

func (w *noticeWorker) Work(ctx context.Context, job *river.Job[NoticeArgs]) error {
	err := w.notices.Announce(ctx, job.Args.PlanID)
	var we *plan.WebhookError
	if errors.As(err, &we) && we.RetryAfter > 0 {
		w.asked.Store(job.ID, we.RetryAfter)
	}
	return err
}

// NextRetry backs off 1s, 2s, 4s … up to 5m, or waits what the webhook
// asked for (Retry-After, at most an hour) when that is longer.
func (w *noticeWorker) NextRetry(job *river.Job[NoticeArgs]) time.Time {
	wait := noticeMaxBackoff
	if job.Attempt < 10 {
		wait = min(noticeMaxBackoff, time.Second<<max(0, job.Attempt-1))
	}
	if v, ok := w.asked.LoadAndDelete(job.ID); ok {
		wait = max(wait, min(v.(time.Duration), time.Hour))
	}
	return time.Now().Add(wait) // River schedules on the wall clock, not the app's
}

// Timeout bounds one delivery (the request itself has 10s).
func (w *noticeWorker) Timeout(*river.Job[NoticeArgs]) time.Duration { return 30 * time.Second }

type worker struct {
	river.WorkerDefaults[CommitArgs]
	commits Committer
	timeout time.Duration
}

func (w *worker) Work(ctx context.Context, job *river.Job[CommitArgs]) error {
	err := w.commits.Commit(ctx, job.Args.PlanID)
	if errors.Is(err, plan.ErrRetry) {
		return river.JobSnooze(time.Second)
	}
	return err
}

// Timeout bounds one commit attempt (the tool's own timeout applies inside).
func (w *worker) Timeout(*river.Job[CommitArgs]) time.Duration { return w.timeout }

// Inserter inserts jobs inside a store's own transaction, typed to the
// driver's transaction (TTx: pgx.Tx or *sql.Tx). It holds no connection
// (an insert-only River client), so it is built before the store that
// calls it.
type Inserter[TTx any] struct {
	client *river.Client[TTx]
}

// PostgresInserter inserts jobs in PostgreSQL transactions.
func PostgresInserter() (*Inserter[pgx.Tx], error) { return newInserter(riverpgxv5.New(nil)) }

// SQLiteInserter inserts jobs in SQLite transactions.
func SQLiteInserter() (*Inserter[*sql.Tx], error) { return newInserter(riversqlite.New(nil)) }

func newInserter[TTx any](driver riverdriver.Driver[TTx]) (*Inserter[TTx], error) {
	c, err := river.NewClient(driver, &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	return &Inserter[TTx]{client: c}, nil
}

// Commit inserts p's commit job in tx.
func (i *Inserter[TTx]) Commit(ctx context.Context, tx TTx, p *airlock.Plan) error {
	_, err := i.client.InsertTx(ctx, tx, CommitArgs{PlanID: p.ID}, nil)
	return err
}

// Notice inserts p's notice job in tx.
func (i *Inserter[TTx]) Notice(ctx context.Context, tx TTx, p *airlock.Plan) error {
	_, err := i.client.InsertTx(ctx, tx, NoticeArgs{PlanID: p.ID}, nil)
	return err
}

// Worker works commit jobs until stopped.
type Worker struct {
	stop    func(context.Context) error
	closeDB func() error
}

// Stop stops after the jobs in hand finish (or ctx ends).
func (w *Worker) Stop(ctx context.Context) error {
	err := w.stop(ctx)
	if w.closeDB != nil {
		err = errors.Join(err, w.closeDB())
	}
	return err
}

// Config configures a worker. A nil *Config means all defaults.
type Config struct {
	// Workers is how many commits run at once. Default 8.
	Workers int
	// Logger. Default: a logger that drops River's debug chatter.
	Logger *slog.Logger
	// FetchPollInterval: how often idle workers look for jobs. Default 200ms
	// (on PostgreSQL River also wakes on LISTEN/NOTIFY).
	FetchPollInterval time.Duration
	// PollOnly: find jobs by polling alone, without LISTEN, as behind a
	// transaction-mode pooler (PgBouncer) it must. Default false.
	PollOnly bool
	// CommitTimeout bounds one commit attempt. Default 5m.
	CommitTimeout time.Duration
	// RescueAfter: a commit still running this long (its process died) is
	// retried; the guarded call makes that safe. Default 10m; at least
	// twice CommitTimeout.
	RescueAfter time.Duration
}

func riverConfig(commits Committer, cfg *Config) *river.Config {
	if cfg == nil {
		cfg = &Config{}
	}
	timeout, rescue := cfg.CommitTimeout, cfg.RescueAfter
	if rescue <= 0 {
		rescue = 10 * time.Minute
	}
	if timeout <= 0 {
		timeout = min(5*time.Minute, rescue/2)
	}
	if rescue < 2*timeout {
		rescue = 2 * timeout
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{commits: commits, timeout: timeout})
	river.AddWorker(workers, &noticeWorker{notices: commits})
	n := cfg.Workers
	if n <= 0 {
		n = 8
	}
	poll := cfg.FetchPollInterval
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: n}},
		Workers:           workers,
		Logger:            log,
		FetchPollInterval: poll,
		FetchCooldown:     min(poll, 100*time.Millisecond),
		PollOnly:          cfg.PollOnly,
		// A commit killed mid-way is rescued and retried; the guarded call
		// makes the retry safe.
		RescueStuckJobsAfter: rescue,
		JobTimeout:           timeout,
	}
}

// Queue is River on one store's database: PostgreSQL (River's pgx driver
// on the store's pool) or SQLite (its database/sql driver on a pool of one
// connection opened with the store's own settings, sqlite.Store.OpenDB(1),
// which Stop closes).
type Queue[TTx any] struct {
	driver  riverdriver.Driver[TTx]
	closeDB func() error
}

// Postgres is the queue on the store's pgx pool.
func Postgres(pool *pgxpool.Pool) *Queue[pgx.Tx] {
	return &Queue[pgx.Tx]{driver: riverpgxv5.New(pool)}
}

// SQLite is the queue on db; the worker's Stop closes db.
func SQLite(db *sql.DB) *Queue[*sql.Tx] {
	return &Queue[*sql.Tx]{driver: riversqlite.New(db), closeDB: db.Close}
}

// Migrate applies River's migrations.
func (q *Queue[TTx]) Migrate(ctx context.Context) error {
	m, err := rivermigrate.New(q.driver, nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverqueue: migrating: %w", err)
	}
	return nil
}

// MigrateStep applies River's next migration, if any, in tx (one of the
// store's migration transactions, under its lock) and reports whether it
// applied one. One at a time: a River migration may use an enum value the
// previous one added, which PostgreSQL allows only once that is committed.
func (q *Queue[TTx]) MigrateStep(ctx context.Context, tx TTx) (bool, error) {
	m, err := rivermigrate.New(q.driver, nil)
	if err != nil {
		return false, err
	}
	// MigrateTx is deprecated for batching several migrations in one
	// transaction; one step is what it asks for, and Migrate would run
	// outside the store's lock.
	res, err := m.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1}) //nolint:staticcheck // one step per transaction (above)
	if err != nil {
		return false, fmt.Errorf("riverqueue: migrating: %w", err)
	}
	return len(res.Versions) > 0, nil
}

// Start works commit and notice jobs until the worker is stopped.
func (q *Queue[TTx]) Start(ctx context.Context, commits Committer, cfg *Config) (*Worker, error) {
	client, err := river.NewClient(q.driver, riverConfig(commits, cfg))
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &Worker{stop: client.Stop, closeDB: q.closeDB}, nil
}
