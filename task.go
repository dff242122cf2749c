package airlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
)

// Task is an MCP task (docs/gateway.md, "Tasks"): the handle a client
// polls for a guarded call that outlived respond_within or for a plan that
// waits for a person. It is stored, so that every replica and a restarted
// process answer for it; it is unique on its principal and the work it
// follows, so that a repeat of the same work by the same principal names
// the same task. Its status is never stored: it is read from the record or
// plan each time.
type Task struct {
	// ID is "tk_" and 32 hex digits from crypto/rand: a handle that cannot
	// be guessed, never derived from the key.
	ID string
	// Principal made the task; another principal's request does not find it.
	Principal string
	// Tool is the tool called: a write, or plan_T's tool T.
	Tool string
	// RecordKey is the guarded call's record, or
	RecordKey string
	// PlanID the plan it follows (exactly one of the two is set).
	PlanID string
	// Repeat says the call that made the task was a repeat of work already
	// under way: the result the task reports is marked as one.
	Repeat    bool
	CreatedAt time.Time
	// ExpiresAt is when the task is purged with the records (zero: kept).
	ExpiresAt time.Time
}

// TaskIDPrefix begins every task id.
const TaskIDPrefix = "tk_"

// NewTaskID is a fresh task id: 128 random bits.
func NewTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return TaskIDPrefix + hex.EncodeToString(b[:])
}

// ValidTaskID says whether id has the shape of a task id (so that a
// malformed one is not looked up).
func ValidTaskID(id string) bool {
	rest, ok := strings.CutPrefix(id, TaskIDPrefix)
	if !ok || len(rest) != 32 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// Subject names the work the task follows: "record:KEY" or "plan:ID".
func (t *Task) Subject() string {
	if t.PlanID != "" {
		return "plan:" + t.PlanID
	}
	return "record:" + t.RecordKey
}

// SetSubject sets RecordKey or PlanID from a Subject.
func (t *Task) SetSubject(subject string) {
	if id, ok := strings.CutPrefix(subject, "plan:"); ok {
		t.PlanID, t.RecordKey = id, ""
		return
	}
	t.RecordKey, t.PlanID = strings.TrimPrefix(subject, "record:"), ""
}

// Validate checks a task before it is stored.
func (t *Task) Validate() error {
	switch {
	case !ValidTaskID(t.ID):
		return FieldErrorf(CodeInvalidArgument, "id", "want %s and 32 hex digits", TaskIDPrefix)
	case t.Tool == "":
		return FieldErrorf(CodeInvalidArgument, "tool", "required: the tool called")
	case (t.RecordKey == "") == (t.PlanID == ""):
		return FieldErrorf(CodeInvalidArgument, "record_key", "exactly one of record_key and plan_id is required")
	case t.CreatedAt.IsZero():
		return FieldErrorf(CodeInvalidArgument, "created_at", "required")
	case !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(t.CreatedAt):
		return FieldErrorf(CodeInvalidArgument, "expires_at", "must be after created_at (or zero: kept)")
	}
	return CheckText("principal", t.Principal)
}

// TaskStore keeps tasks. Uniqueness on (principal, subject) is the
// database's unique index.
type TaskStore interface {
	// CreateTask inserts the task unless the principal has one for the same
	// work; it returns the task as stored and whether this call made it.
	CreateTask(ctx context.Context, t *Task) (*Task, bool, error)
	// GetTask returns a task by id, or ErrNotFound (also once purged).
	GetTask(ctx context.Context, id string) (*Task, error)
	// ListTasks lists a principal's tasks, newest first, after the cursor
	// (TaskCursor of the last task of the previous page; "" first).
	ListTasks(ctx context.Context, p *ListTasksParams) ([]*Task, error)
}

// TaskCursor is the position after t in a task listing.
func TaskCursor(t *Task) string { return pageCursor(t.CreatedAt, t.ID) }

// ParseTaskCursor reads a TaskCursor; an error names the cursor as wrong.
func ParseTaskCursor(c string) (time.Time, string, error) { return parsePageCursor(c) }

// ListTasksParams name whose tasks to list, the cursor (TaskCursor of the
// last task of the previous page; "" for the first) and the page's size.
type ListTasksParams struct {
	Principal string
	After     string
	Limit     int
}
