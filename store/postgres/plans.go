package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

var _ airlock.PlanStore = (*Store)(nil)

const planColumns = `id, key, tool, status, rule, decision, evaluation, args, facts, facts_error, decision_hash, run_id,
	created_at, updated_at, expires_at, decided_by, decision_reason, decided_at, result, error,
	proposed_by, approvals_required, approvals`

func scanPlan(row pgx.Row) (*airlock.Plan, error) {
	var (
		p                   airlock.Plan
		status, args        string
		approvals           string
		eval, facts, result *string
		decided             *time.Time
	)
	err := row.Scan(&p.ID, &p.Key, &p.Tool, &status, &p.Rule, &p.Decision, &eval, &args, &facts, &p.FactsError,
		&p.DecisionHash, &p.RunID, &p.CreatedAt, &p.UpdatedAt, &p.ExpiresAt, &p.DecidedBy, &p.DecisionReason, &decided, &result, &p.Error,
		&p.ProposedBy, &p.ApprovalsRequired, &approvals)
	if err != nil {
		if isNoRows(err) {
			return nil, airlock.ErrNotFound
		}
		return nil, err
	}
	p.Status, p.Args = airlock.PlanStatus(status), json.RawMessage(args)
	if err := json.Unmarshal([]byte(approvals), &p.Approvals); err != nil {
		return nil, fmt.Errorf("plan %s: approvals: %w", p.ID, err)
	}
	if eval != nil {
		p.Evaluation = json.RawMessage(*eval)
	}
	if facts != nil {
		p.Facts = json.RawMessage(*facts)
	}
	if result != nil {
		p.Result = json.RawMessage(*result)
	}
	if decided != nil {
		p.DecidedAt = decided.UTC()
	}
	p.CreatedAt, p.UpdatedAt, p.ExpiresAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC(), p.ExpiresAt.UTC()
	return &p, nil
}

// CreatePlan implements airlock.PlanStore (store/rules.CreatePlan).
func (s *Store) CreatePlan(ctx context.Context, p *airlock.Plan) (*airlock.Plan, bool, error) {
	var (
		out     *airlock.Plan
		created bool
	)
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
		out, created, err = rules.CreatePlan(ctx, s.planRows(tx), p)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// GetPlan implements airlock.PlanStore.
func (s *Store) GetPlan(ctx context.Context, id string) (*airlock.Plan, error) {
	return scanPlan(s.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE id = $1`, id))
}

// placeholders are PostgreSQL's: $n and times as they are.
var placeholders = rules.Placeholders{Mark: func(n int) string { return "$" + strconv.Itoa(n) }, Time: func(t time.Time) any { return t }}

// ListPlans implements airlock.PlanStore (store/rules.PlanList).
func (s *Store) ListPlans(ctx context.Context, f airlock.PlanFilter) ([]*airlock.Plan, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	clause, args := rules.PlanList(&f, placeholders)
	q := `SELECT ` + planColumns + ` FROM airlock_plans` + clause
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanPlan)
}

// DecidePlan implements airlock.PlanStore (store/rules.DecidePlan).
func (s *Store) DecidePlan(ctx context.Context, d *airlock.PlanDecision) (*airlock.Plan, error) {
	var (
		out     *airlock.Plan
		refused error
	)
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
		out, refused, err = rules.DecidePlan(ctx, s.planRows(tx), d)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, refused
}

// ExpirePlans implements airlock.PlanStore (store/rules.ExpirePlans).
func (s *Store) ExpirePlans(ctx context.Context, now time.Time) ([]*airlock.Plan, error) {
	var expired []*airlock.Plan
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
		expired, err = rules.ExpirePlans(ctx, s.planRows(tx), now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return expired, nil
}

// SetPlanStatus implements airlock.PlanStore (store/rules.SetPlanStatus).
func (s *Store) SetPlanStatus(ctx context.Context, p *airlock.SetPlanStatusParams) (bool, error) {
	var changed bool
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
		changed, err = rules.SetPlanStatus(ctx, s.planRows(tx), p)
		return err
	})
	return changed, err
}

// GetPlanByKey implements airlock.PlanStore.
func (s *Store) GetPlanByKey(ctx context.Context, key string) (*airlock.Plan, error) {
	return scanPlan(s.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE key = $1`, key))
}

// WaitingPlans implements airlock.PlanStore.
func (s *Store) WaitingPlans(ctx context.Context) ([]airlock.WaitingPlans, error) {
	rows, err := s.pool.Query(ctx, `SELECT tool, count(*), min(created_at) FROM airlock_plans
		WHERE status = 'awaiting_approval' GROUP BY tool ORDER BY tool`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []airlock.WaitingPlans
	for rows.Next() {
		var w airlock.WaitingPlans
		if err := rows.Scan(&w.Tool, &w.Depth, &w.Oldest); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// WithdrawPlan implements airlock.PlanStore (store/rules.WithdrawPlan).
func (s *Store) WithdrawPlan(ctx context.Context, p *airlock.WithdrawPlanParams) (*airlock.Plan, bool, error) {
	var (
		out       *airlock.Plan
		withdrawn bool
	)
	err := s.auditTx(ctx, func(tx pgx.Tx) (err error) {
		out, withdrawn, err = rules.WithdrawPlan(ctx, s.planRows(tx), p)
		return err
	})
	return out, withdrawn, err
}

// planRows are the plan rules' row statements in a transaction that holds
// the audit writers' lock.
func (s *Store) planRows(tx pgx.Tx) rules.PlanRows { return &planRows{s: s, tx: tx} }

type planRows struct {
	s  *Store
	tx pgx.Tx
}

func (r *planRows) InsertPlan(ctx context.Context, p *airlock.Plan) (bool, error) {
	tag, err := r.tx.Exec(ctx, `INSERT INTO airlock_plans (`+planColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23) ON CONFLICT (key) DO NOTHING`,
		p.ID, p.Key, p.Tool, string(p.Status), p.Rule, p.Decision, nullText(p.Evaluation), string(p.Args), nullText(p.Facts), p.FactsError,
		p.DecisionHash, p.RunID, p.CreatedAt, p.UpdatedAt, p.ExpiresAt, p.DecidedBy, p.DecisionReason,
		nullTime(p.DecidedAt), nullText(p.Result), p.Error, p.ProposedBy, p.ApprovalsRequiredOr(), rules.ApprovalsJSON(p.Approvals))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// PlanByID locks the plan's row: two replicas deciding it at once take
// turns, and the second sees the first's decision.
func (r *planRows) PlanByID(ctx context.Context, id string) (*airlock.Plan, error) {
	return scanPlan(r.tx.QueryRow(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE id = $1 FOR UPDATE`, id))
}

func (r *planRows) PlanByKey(ctx context.Context, key string) (*airlock.Plan, error) {
	return scanPlan(r.tx.QueryRow(ctx, `SELECT `+planColumns+` FROM airlock_plans WHERE key = $1`, key))
}

func (r *planRows) UpdatePlanDecision(ctx context.Context, p *rules.DecisionParams) error {
	_, err := r.tx.Exec(ctx, `UPDATE airlock_plans SET status = $2, decided_by = $3, decision_reason = $4,
		decided_at = CASE WHEN $3 = '' THEN NULL ELSE $5::timestamptz END, updated_at = $5, approvals = $6
		WHERE id = $1`, p.ID, string(p.Status), p.By, p.Reason, p.At, rules.ApprovalsJSON(p.Approvals))
	return err
}

func (r *planRows) ExpireAwaitingPlans(ctx context.Context, now time.Time) ([]*airlock.Plan, error) {
	rows, err := r.tx.Query(ctx, `UPDATE airlock_plans SET status = 'expired', updated_at = $1
		WHERE status = 'awaiting_approval' AND expires_at < $1 RETURNING `+planColumns, now)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanPlan)
}

func (r *planRows) UpdatePlanStatus(ctx context.Context, p *airlock.SetPlanStatusParams) (*airlock.Plan, error) {
	from := make([]string, len(p.From))
	for i, f := range p.From {
		from[i] = string(f)
	}
	return scanPlan(r.tx.QueryRow(ctx, `UPDATE airlock_plans SET status = $2, result = COALESCE($3, result), error = $4, updated_at = $5
		WHERE id = $1 AND status = ANY($6) RETURNING `+planColumns, p.ID, string(p.To), nullText(p.Result), p.Error, p.At, from))
}

func (r *planRows) MarkPlanWithdrawn(ctx context.Context, p *airlock.WithdrawPlanParams) (*airlock.Plan, error) {
	return scanPlan(r.tx.QueryRow(ctx, `UPDATE airlock_plans SET status = 'withdrawn', decided_by = $2, decision_reason = $3,
		decided_at = $4, updated_at = $4 WHERE id = $1 AND status = 'awaiting_approval' RETURNING `+planColumns, p.ID, p.By, p.Reason, p.At))
}

func (r *planRows) AppendAudit(ctx context.Context, events ...*airlock.AuditEvent) error {
	return appendAudit(ctx, r.tx, events...)
}

func (r *planRows) EnqueueCommit(ctx context.Context, p *airlock.Plan) error {
	if r.s.enqueue == nil {
		return nil
	}
	return r.s.enqueue(ctx, r.tx, p)
}

func (r *planRows) EnqueueNotice(ctx context.Context, p *airlock.Plan) error {
	if r.s.notice == nil {
		return nil
	}
	return r.s.notice(ctx, r.tx, p)
}
