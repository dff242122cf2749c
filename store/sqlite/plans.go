package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

var _ airlock.PlanStore = (*Store)(nil)

const planColumns = `id, key, tool, status, rule, decision, evaluation, args, facts, facts_error, decision_hash, run_id,
	created_at, updated_at, expires_at, decided_by, decision_reason, decided_at, result, error`

func scanPlan(row scanner) (*airlock.Plan, error) {
	var (
		p                                  airlock.Plan
		status, args                       string
		eval, facts, result                sql.NullString
		created, updated, expires, decided int64
	)
	err := row.Scan(&p.ID, &p.Key, &p.Tool, &status, &p.Rule, &p.Decision, &eval, &args, &facts, &p.FactsError,
		&p.DecisionHash, &p.RunID, &created, &updated, &expires, &p.DecidedBy, &p.DecisionReason, &decided, &result, &p.Error)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, airlock.ErrNotFound
		}
		return nil, err
	}
	p.Status, p.Args = airlock.PlanStatus(status), json.RawMessage(args)
	if eval.Valid {
		p.Evaluation = json.RawMessage(eval.String)
	}
	if facts.Valid {
		p.Facts = json.RawMessage(facts.String)
	}
	if result.Valid {
		p.Result = json.RawMessage(result.String)
	}
	p.CreatedAt, p.UpdatedAt, p.ExpiresAt, p.DecidedAt = fromMicros(created), fromMicros(updated), fromMicros(expires), fromMicros(decided)
	return &p, nil
}

// CreatePlan implements airlock.PlanStore.
func (s *Store) CreatePlan(ctx context.Context, p *airlock.Plan) (*airlock.Plan, bool, error) {
	var (
		out     *airlock.Plan
		created bool
	)
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO airlock_plans (`+planColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
			p.ID, p.Key, p.Tool, string(p.Status), p.Rule, p.Decision, nullText(p.Evaluation), string(p.Args), nullText(p.Facts), p.FactsError,
			p.DecisionHash, p.RunID, micros(p.CreatedAt), micros(p.UpdatedAt), micros(p.ExpiresAt), p.DecidedBy, p.DecisionReason,
			micros(p.DecidedAt), nullText(p.Result), p.Error)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		created = n == 1
		if created {
			if err := appendAudit(ctx, tx, airlock.PlanEvents(p)...); err != nil {
				return err
			}
		}
		if created && p.Status == airlock.PlanApproved && s.enqueue != nil {
			if err := s.enqueue(ctx, tx, p); err != nil {
				return err
			}
		}
		if created && p.Status == airlock.PlanAwaitingApproval && s.notice != nil {
			if err := s.notice(ctx, tx, p); err != nil {
				return err
			}
		}
		out, err = scanPlan(tx.QueryRowContext(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE key = ?`, p.Key))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// GetPlan implements airlock.PlanStore.
func (s *Store) GetPlan(ctx context.Context, id string) (*airlock.Plan, error) {
	return scanPlan(s.read.QueryRowContext(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE id = ?`, id))
}

// ListPlans implements airlock.PlanStore.
func (s *Store) ListPlans(ctx context.Context, f airlock.PlanFilter) ([]*airlock.Plan, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	add := func(cond string, v ...any) { where, args = append(where, cond), append(args, v...) }
	if f.Status != "" {
		add("status = ?", string(f.Status))
	}
	if f.Decided {
		add("status <> 'awaiting_approval'")
	}
	if f.Tool != "" {
		add("tool = ?", f.Tool)
	}
	if f.RunID != "" {
		add("run_id = ?", f.RunID)
	}
	if f.DecidedBy != "" {
		add("decided_by = ?", f.DecidedBy)
	}
	if !f.Since.IsZero() {
		add("created_at >= ?", micros(f.Since))
	}
	if !f.Until.IsZero() {
		add("created_at < ?", micros(f.Until))
	}
	order := "ORDER BY created_at, id"
	if f.After != "" {
		at, id, _ := airlock.ParsePlanCursor(f.After)
		if f.Newest {
			add("(created_at, id) < (?, ?)", micros(at), id)
		} else {
			add("(created_at, id) > (?, ?)", micros(at), id)
		}
	}
	if f.Newest {
		order = "ORDER BY created_at DESC, id DESC"
	}
	q := `SELECT ` + planColumns + ` FROM airlock_plans`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " " + order + " LIMIT ?"
	args = append(args, f.LimitOr())
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanPlan)
}

// DecidePlan implements airlock.PlanStore.
func (s *Store) DecidePlan(ctx context.Context, d *airlock.PlanDecision) (*airlock.Plan, error) {
	var (
		out  *airlock.Plan
		fail error
	)
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := scanPlan(tx.QueryRowContext(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE id = ?`, d.ID))
		if err != nil {
			if errors.Is(err, airlock.ErrNotFound) {
				fail = airlock.FieldErrorf(airlock.CodeNotFound, "id", "no plan with id %s", d.ID)
				return nil
			}
			return err
		}
		next, problem := airlock.CheckDecision(cur, d)
		if problem != nil || next == "" {
			out, fail = cur, problem
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE airlock_plans SET status = ?, decided_by = ?, decision_reason = ?, decided_at = ?, updated_at = ?
			WHERE id = ? AND status = 'awaiting_approval'`, string(next), d.By, d.Reason, micros(d.Now), micros(d.Now), d.ID)
		if err != nil {
			return err
		}
		cur.Status, cur.DecidedBy, cur.DecisionReason, cur.DecidedAt, cur.UpdatedAt = next, d.By, d.Reason, d.Now.UTC(), d.Now.UTC()
		if err := appendAudit(ctx, tx, airlock.DecisionEvent(cur)); err != nil {
			return err
		}
		if next == airlock.PlanApproved && s.enqueue != nil {
			if err := s.enqueue(ctx, tx, cur); err != nil {
				return err
			}
		}
		out = cur
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, fail
}

// ExpirePlans implements airlock.PlanStore.
func (s *Store) ExpirePlans(ctx context.Context, now time.Time) ([]*airlock.Plan, error) {
	var expired []*airlock.Plan
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		expired = nil
		rows, err := tx.QueryContext(ctx, `UPDATE airlock_plans SET status = 'expired', updated_at = ?
			WHERE status = 'awaiting_approval' AND expires_at < ? RETURNING `+planColumns, micros(now), micros(now))
		if err != nil {
			return err
		}
		for rows.Next() {
			p, err := scanPlan(rows)
			if err != nil {
				rows.Close()
				return err
			}
			expired = append(expired, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, p := range expired {
			if err := appendAudit(ctx, tx, airlock.StatusEvent(p, now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return expired, nil
}

// SetPlanStatus implements airlock.PlanStore.
func (s *Store) SetPlanStatus(ctx context.Context, id string, from []airlock.PlanStatus, status airlock.PlanStatus, result json.RawMessage, errText string, now time.Time) (bool, error) {
	var n int64
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		q := `UPDATE airlock_plans SET status = ?, result = COALESCE(?, result), error = ?, updated_at = ? WHERE id = ? AND status IN (` +
			strings.TrimSuffix(strings.Repeat("?,", len(from)), ",") + `) RETURNING ` + planColumns
		args := []any{string(status), nullText(result), errText, micros(now), id}
		for _, f := range from {
			args = append(args, string(f))
		}
		p, err := scanPlan(tx.QueryRowContext(ctx, q, args...))
		if errors.Is(err, airlock.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		n = 1
		return appendAudit(ctx, tx, airlock.StatusEvent(p, now))
	})
	return n == 1, err
}

// GetPlanByKey implements airlock.PlanStore.
func (s *Store) GetPlanByKey(ctx context.Context, key string) (*airlock.Plan, error) {
	return scanPlan(s.read.QueryRowContext(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE key = ?`, key))
}

// WaitingPlans implements airlock.PlanStore.
func (s *Store) WaitingPlans(ctx context.Context) ([]airlock.WaitingPlans, error) {
	// INDEXED BY: without statistics SQLite prefers the status index and
	// then reads every waiting plan's row (0.27 s for 115,000 waiting
	// plans in the 10 M soak, against 0.03 s from this index alone).
	rows, err := s.read.QueryContext(ctx, `SELECT tool, count(*), min(created_at) FROM airlock_plans
		INDEXED BY airlock_plans_waiting
		WHERE status = 'awaiting_approval' GROUP BY tool ORDER BY tool`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []airlock.WaitingPlans
	for rows.Next() {
		var w airlock.WaitingPlans
		var oldest int64
		if err := rows.Scan(&w.Tool, &w.Depth, &oldest); err != nil {
			return nil, err
		}
		w.Oldest = fromMicros(oldest)
		out = append(out, w)
	}
	return out, rows.Err()
}

// WithdrawPlan implements airlock.PlanStore.
func (s *Store) WithdrawPlan(ctx context.Context, id, by, reason string, now time.Time) (*airlock.Plan, bool, error) {
	var (
		out       *airlock.Plan
		withdrawn bool
	)
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		p, err := scanPlan(tx.QueryRowContext(ctx, `UPDATE airlock_plans SET status = 'withdrawn', decided_by = ?, decision_reason = ?,
			decided_at = ?, updated_at = ? WHERE id = ? AND status = 'awaiting_approval' RETURNING `+planColumns,
			by, reason, micros(now), micros(now), id))
		if errors.Is(err, airlock.ErrNotFound) {
			out, err = scanPlan(tx.QueryRowContext(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE id = ?`, id))
			return err
		}
		if err != nil {
			return err
		}
		out, withdrawn = p, true
		return appendAudit(ctx, tx, airlock.WithdrawnEvent(p, by, reason, now))
	})
	return out, withdrawn, err
}
