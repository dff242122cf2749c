package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// Placeholders are how a driver writes its SQL arguments: Mark is the
// placeholder of the n-th argument (from 1), Time a time as its columns
// hold it.
type Placeholders struct {
	Mark func(n int) string
	Time func(time.Time) any
}

// PlanList is the WHERE, ORDER BY and LIMIT of a plan listing (a checked
// filter), with their arguments.
func PlanList(f *airlock.PlanFilter, ph Placeholders) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		marks := make([]any, len(v))
		for i := range v {
			args = append(args, v[i])
			marks[i] = ph.Mark(len(args))
		}
		where = append(where, fmt.Sprintf(cond, marks...))
	}
	if f.Status != "" {
		add("status = %s", string(f.Status))
	}
	if f.Decided {
		add("status <> 'awaiting_approval'")
	}
	if f.Tool != "" {
		add("tool = %s", f.Tool)
	}
	if f.RunID != "" {
		add("run_id = %s", f.RunID)
	}
	if f.DecidedBy != "" {
		add("decided_by = %s", f.DecidedBy)
	}
	if f.ProposedBy != "" {
		add("proposed_by = %s", f.ProposedBy)
	}
	if !f.Since.IsZero() {
		add("created_at >= %s", ph.Time(f.Since))
	}
	if !f.Until.IsZero() {
		add("created_at < %s", ph.Time(f.Until))
	}
	if f.After != "" {
		at, id, _ := airlock.ParsePlanCursor(f.After)
		if f.Newest {
			add("(created_at, id) < (%s, %s)", ph.Time(at), id)
		} else {
			add("(created_at, id) > (%s, %s)", ph.Time(at), id)
		}
	}
	order := "ORDER BY created_at, id"
	if f.Newest {
		order = "ORDER BY created_at DESC, id DESC"
	}
	q := ""
	if len(where) > 0 {
		q = " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.LimitOr())
	return q + " " + order + " LIMIT " + ph.Mark(len(args)), args
}
