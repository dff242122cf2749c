// Package riverqueue runs plan commits on River (github.com/riverqueue/river):
// the commit job is inserted in the same transaction that approves the
// plan (unique per plan), and the worker calls plan.Service.Commit, which
// goes through the guarded call with the tool's key — so a retried or
// rescued job never executes the tool twice. PostgreSQL uses River's pgx
// driver; SQLite its database/sql driver on a connection of its own.
package riverqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
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

type worker struct {
	river.WorkerDefaults[CommitArgs]
	svc     *plan.Service
	timeout time.Duration
}

func (w *worker) Work(ctx context.Context, job *river.Job[CommitArgs]) error {
	err := w.svc.Commit(ctx, job.Args.PlanID)
	if errors.Is(err, plan.ErrRetry) {
		return river.JobSnooze(time.Second)
	}
	return err
}

// Timeout bounds one commit attempt (the tool's own timeout applies inside).
func (w *worker) Timeout(*river.Job[CommitArgs]) time.Duration { return w.timeout }

// Queue is a running River client.
type Queue struct {
	start   func(context.Context) error
	stop    func(context.Context) error
	enqueue airlock.Enqueue
	closeDB func() error
}

// Enqueue is the function the store calls inside the approving transaction.
func (q *Queue) Enqueue() airlock.Enqueue { return q.enqueue }

// Start starts working jobs.
func (q *Queue) Start(ctx context.Context) error { return q.start(ctx) }

// Stop stops after the jobs in hand finish (or ctx ends).
func (q *Queue) Stop(ctx context.Context) error {
	err := q.stop(ctx)
	if q.closeDB != nil {
		err = errors.Join(err, q.closeDB())
	}
	return err
}

// Config configures a queue. A nil *Config means all defaults.
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

func riverConfig(svc *plan.Service, cfg *Config) *river.Config {
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
	river.AddWorker(workers, &worker{svc: svc, timeout: timeout})
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

// Postgres builds a queue on a pgx pool, migrating River's tables.
func Postgres(ctx context.Context, pool *pgxpool.Pool, svc *plan.Service, cfg *Config) (*Queue, error) {
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("riverqueue: migrating: %w", err)
	}
	client, err := river.NewClient(driver, riverConfig(svc, cfg))
	if err != nil {
		return nil, err
	}
	return &Queue{
		start: client.Start,
		stop:  client.Stop,
		enqueue: func(ctx context.Context, tx any, p *airlock.Plan) error {
			ptx, ok := tx.(pgx.Tx)
			if !ok {
				return fmt.Errorf("riverqueue: want a pgx.Tx, got %T", tx)
			}
			_, err := client.InsertTx(ctx, ptx, CommitArgs{PlanID: p.ID}, nil)
			return err
		},
	}, nil
}

// SQLite builds a queue on the SQLite file at path: River gets a
// connection of its own (one, as its SQLite driver asks), and its jobs are
// inserted through the store's own transaction.
func SQLite(ctx context.Context, path string, svc *plan.Service, cfg *Config) (*Queue, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	driver := riversqlite.New(db)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		db.Close()
		return nil, fmt.Errorf("riverqueue: migrating: %w", err)
	}
	client, err := river.NewClient(driver, riverConfig(svc, cfg))
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Queue{
		start:   client.Start,
		stop:    client.Stop,
		closeDB: db.Close,
		enqueue: func(ctx context.Context, tx any, p *airlock.Plan) error {
			stx, ok := tx.(*sql.Tx)
			if !ok {
				return fmt.Errorf("riverqueue: want a *sql.Tx, got %T", tx)
			}
			_, err := client.InsertTx(ctx, stx, CommitArgs{PlanID: p.ID}, nil)
			return err
		},
	}, nil
}
