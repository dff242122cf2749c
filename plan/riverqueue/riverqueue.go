// Package riverqueue runs plan commits and webhook notices on River
// (github.com/riverqueue/river):
// the commit job is inserted by the store in the same transaction that
// approves the plan (unique per plan; Inserter), and the worker calls
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
	return time.Now().Add(wait)
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

// Inserter inserts commit jobs inside a store's own transaction, typed to
// each driver's transaction. It holds no connection (River's insert-only
// clients), so it is built before the store that calls it.
type Inserter struct {
	pg   *river.Client[pgx.Tx]
	lite *river.Client[*sql.Tx]
}

// NewInserter builds the inserter.
func NewInserter() (*Inserter, error) {
	quiet := slog.New(slog.DiscardHandler)
	pg, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	lite, err := river.NewClient(riversqlite.New(nil), &river.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	return &Inserter{pg: pg, lite: lite}, nil
}

// Postgres inserts p's commit job in a PostgreSQL transaction.
func (i *Inserter) Postgres(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error {
	_, err := i.pg.InsertTx(ctx, tx, CommitArgs{PlanID: p.ID}, nil)
	return err
}

// PostgresNotice inserts p's notice job in a PostgreSQL transaction.
func (i *Inserter) PostgresNotice(ctx context.Context, tx pgx.Tx, p *airlock.Plan) error {
	_, err := i.pg.InsertTx(ctx, tx, NoticeArgs{PlanID: p.ID}, nil)
	return err
}

// SQLiteNotice inserts p's notice job in a SQLite transaction.
func (i *Inserter) SQLiteNotice(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error {
	_, err := i.lite.InsertTx(ctx, tx, NoticeArgs{PlanID: p.ID}, nil)
	return err
}

// SQLite inserts p's commit job in a SQLite transaction.
func (i *Inserter) SQLite(ctx context.Context, tx *sql.Tx, p *airlock.Plan) error {
	_, err := i.lite.InsertTx(ctx, tx, CommitArgs{PlanID: p.ID}, nil)
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
		// A commit killed mid-way is rescued and retried; the guarded call
		// makes the retry safe.
		RescueStuckJobsAfter: rescue,
		JobTimeout:           timeout,
	}
}

// MigratePostgres applies River's migrations on the store's pool.
func MigratePostgres(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverqueue: migrating: %w", err)
	}
	return nil
}

// MigrateSQLite applies River's migrations on a SQLite pool (see
// sqlite.Store.OpenDB).
func MigrateSQLite(ctx context.Context, db *sql.DB) error {
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverqueue: migrating: %w", err)
	}
	return nil
}

// StartPostgres works commit jobs on the store's pgx pool.
func StartPostgres(ctx context.Context, pool *pgxpool.Pool, commits Committer, cfg *Config) (*Worker, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(commits, cfg))
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &Worker{stop: client.Stop}, nil
}

// StartSQLite works commit jobs on db, a pool of one connection opened with
// the store's own settings (sqlite.Store.OpenDB(1), as River's SQLite
// driver asks); Stop closes it.
func StartSQLite(ctx context.Context, db *sql.DB, commits Committer, cfg *Config) (*Worker, error) {
	client, err := river.NewClient(riversqlite.New(db), riverConfig(commits, cfg))
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &Worker{stop: client.Stop, closeDB: db.Close}, nil
}
