package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock"
)

var _ airlock.TaskStore = (*Store)(nil)

const taskColumns = `id, principal, subject, tool, repeat, created_at, expires_at`

func scanTask(row pgx.Row, extra ...any) (*airlock.Task, error) {
	var (
		t       airlock.Task
		subject string
		expires *time.Time
	)
	err := row.Scan(append([]any{&t.ID, &t.Principal, &subject, &t.Tool, &t.Repeat, &t.CreatedAt, &expires}, extra...)...)
	if isNoRows(err) {
		return nil, airlock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if expires != nil {
		t.ExpiresAt = expires.UTC()
	}
	t.SetSubject(subject)
	return &t, nil
}

// CreateTask implements airlock.TaskStore: one statement inserts the task
// or reads the one the principal has for the same work.
func (s *Store) CreateTask(ctx context.Context, t *airlock.Task) (*airlock.Task, bool, error) {
	if err := t.Validate(); err != nil {
		return nil, false, err
	}
	var expires *time.Time
	if !t.ExpiresAt.IsZero() {
		expires = &t.ExpiresAt
	}
	for {
		var created bool
		out, err := scanTask(s.pool.QueryRow(ctx, `WITH ins AS (
				INSERT INTO airlock_tasks (`+taskColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (principal, subject) DO NOTHING RETURNING `+taskColumns+`)
			SELECT `+taskColumns+`, true FROM ins
			UNION ALL SELECT `+taskColumns+`, false FROM airlock_tasks WHERE principal = $2 AND subject = $3 LIMIT 1`,
			t.ID, t.Principal, t.Subject(), t.Tool, t.Repeat, t.CreatedAt, expires), &created)
		// No row: another replica's insert committed after this
		// statement's snapshot was taken; the next one sees it.
		if !errors.Is(err, airlock.ErrNotFound) || ctx.Err() != nil {
			return out, created, err
		}
	}
}

// GetTask implements airlock.TaskStore.
func (s *Store) GetTask(ctx context.Context, id string) (*airlock.Task, error) {
	return scanTask(s.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM airlock_tasks WHERE id = $1`, id))
}

// ListTasks implements airlock.TaskStore.
func (s *Store) ListTasks(ctx context.Context, p *airlock.ListTasksParams) ([]*airlock.Task, error) {
	principal, after, limit := p.Principal, p.After, p.Limit
	at, id, err := airlock.ParseTaskCursor(after)
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + taskColumns + ` FROM airlock_tasks WHERE principal = $1`
	args := []any{principal, limit}
	if id != "" {
		q += ` AND (created_at, id) < ($3, $4)`
		args = append(args, at, id)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r pgx.Row) (*airlock.Task, error) { return scanTask(r) })
}
