package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/airlockhq/airlock"
)

var _ airlock.TaskStore = (*Store)(nil)

const taskColumns = `id, principal, subject, tool, repeat, created_at, expires_at`

func scanTask(row scanner) (*airlock.Task, error) {
	var (
		t                airlock.Task
		subject          string
		created, expires int64
	)
	err := row.Scan(&t.ID, &t.Principal, &subject, &t.Tool, &t.Repeat, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, airlock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	t.CreatedAt, t.ExpiresAt = fromMicros(created), fromMicros(expires)
	t.SetSubject(subject)
	return &t, nil
}

// CreateTask implements airlock.TaskStore.
func (s *Store) CreateTask(ctx context.Context, t *airlock.Task) (*airlock.Task, bool, error) {
	if err := t.Validate(); err != nil {
		return nil, false, err
	}
	var (
		out     *airlock.Task
		created bool
	)
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO airlock_tasks (`+taskColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (principal, subject) DO NOTHING`,
			t.ID, t.Principal, t.Subject(), t.Tool, t.Repeat, micros(t.CreatedAt), micros(t.ExpiresAt))
		if err != nil {
			return err
		}
		created = rowsAffected(res) == 1
		out, err = scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM airlock_tasks WHERE principal = ? AND subject = ?`,
			t.Principal, t.Subject()))
		return err
	})
	return out, created, err
}

// GetTask implements airlock.TaskStore.
func (s *Store) GetTask(ctx context.Context, id string) (*airlock.Task, error) {
	return scanTask(s.read.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM airlock_tasks WHERE id = ?`, id))
}

// ListTasks implements airlock.TaskStore.
func (s *Store) ListTasks(ctx context.Context, p *airlock.ListTasksParams) ([]*airlock.Task, error) {
	principal, after, limit := p.Principal, p.After, p.Limit
	at, id, err := airlock.ParseTaskCursor(after)
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + taskColumns + ` FROM airlock_tasks WHERE principal = ?`
	args := []any{principal}
	if id != "" {
		q += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, micros(at), micros(at), id)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	rows, err := s.read.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanTask)
}
