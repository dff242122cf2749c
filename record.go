package airlock

import (
	"context"
	"encoding/json"
	"time"
)

// State is where a record is in its life.
type State string

// Record states.
const (
	StateRunning   State = "running"   // claimed; the side effect is under way
	StateSucceeded State = "succeeded" // done; the result is stored
	StateFailed    State = "failed"    // a definitive failure; the failure is stored
	StateInDoubt   State = "in_doubt"  // it may or may not have happened; never retried blindly
	// StateReleased is never stored: Settle returns it for an in-doubt
	// record that did not happen and was removed, freeing its key.
	StateReleased State = "released"
)

// Final reports whether the record will never change again by itself.
func (s State) Final() bool { return s == StateSucceeded || s == StateFailed }

// Record remembers one side-effecting call, unique on Key.
type Record struct {
	Key      string          `json:"key"`
	Tool     string          `json:"tool"`
	RunID    string          `json:"run_id"`
	WindowID string          `json:"window_id"`
	State    State           `json:"state"`
	Args     json.RawMessage `json:"args"`      // canonical arguments of the first call
	ArgsHash string          `json:"args_hash"` // hex SHA-256 of Args
	Result   json.RawMessage `json:"result,omitempty"`
	// Content is the whole result as an MCP upstream gave it (content of
	// every type, structuredContent, isError, _meta), replayed to repeats
	// over MCP; nil for other upstreams.
	Content json.RawMessage `json:"content,omitempty"`
	Note    string          `json:"note,omitempty"` // why it is in doubt, or how it was settled
	// Owner is the secret of whoever holds (or last held) the record's
	// claim: never shown, since it is what renews and completes the claim.
	Owner      string    `json:"-"`
	LeaseUntil time.Time `json:"lease_until"`
	Attempts   int       `json:"attempts"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	ExpiresAt  time.Time `json:"expires_at"` // purged after; zero: kept
}

// Claim is the row a first call inserts.
type Claim struct {
	Key        string
	Tool       string
	RunID      string
	WindowID   string
	Args       json.RawMessage
	ArgsHash   string
	Owner      string
	Now        time.Time
	LeaseUntil time.Time
	ExpiresAt  time.Time // zero: never purged
	Actor      string    // who asked, for the audit log
}

// Completion ends a running record held by Owner.
type Completion struct {
	Key    string
	Owner  string
	State  State // succeeded, failed or in_doubt
	Result json.RawMessage
	// Content is the MCP upstream's whole result (Record.Content).
	Content json.RawMessage
	Note    string
	Now     time.Time
	Actor   string // for the audit log
	// TimedOut says the last attempt ran into the tool's timeout; Took is
	// the time from the claim to this completion. Both go in the audit
	// event, for the report.
	TimedOut bool
	Took     time.Duration
}

// Settlement decides an in_doubt record: it happened (with its result) or
// it did not (the record is removed, so the key is free again).
type Settlement struct {
	Key      string
	Happened bool
	Result   json.RawMessage
	Note     string // who decided and why
	Now      time.Time
	Actor    string // for the audit log
}

// RecordStore keeps records. Uniqueness on Key is the database's unique
// index; every state change is a conditional update, so many processes may
// share one store. Drivers: store/sqlite, store/postgres; store/storetest
// is the conformance suite both pass.
type RecordStore interface {
	// Claim inserts the record as running, durably, unless one with the key
	// exists; it returns the record and whether this call inserted it.
	// A driver that retries a write whose commit was not acknowledged may
	// find the claim it made itself and answer claimed false with that
	// record (c.Owner's); the guard takes it as its own.
	Claim(ctx context.Context, c *Claim) (rec *Record, claimed bool, err error)
	// Complete moves a running record held by c.Owner to c.State.
	// ErrLeaseLost when the record is not running under that owner (also
	// when a retried write finds this very completion already committed;
	// the guard checks the record for that).
	Complete(ctx context.Context, c *Completion) error
	// Release removes a running record held by owner (the request was never
	// sent). ErrLeaseLost when it is not held by owner.
	Release(ctx context.Context, p *ReleaseParams) error
	// Heartbeat extends the lease of a running record held by owner.
	// ErrLeaseLost when it is not held by owner.
	Heartbeat(ctx context.Context, p *HeartbeatParams) error
	// Get returns the record, or ErrNotFound.
	Get(ctx context.Context, key string) (*Record, error)
	// ExpiredLeases lists up to p.Limit running records whose lease ended
	// before p.Now.
	ExpiredLeases(ctx context.Context, p *ExpiredLeasesParams) ([]*Record, error)
	// ExpireLease moves a running record whose lease ended before now to
	// in_doubt; false when it is no longer such a record.
	ExpireLease(ctx context.Context, p *ExpireLeaseParams) (bool, error)
	// TakeOver gives a running record whose lease ended before now to a
	// new owner (to re-drive it); false when another replica was first.
	TakeOver(ctx context.Context, p *TakeOverParams) (*Record, bool, error)
	// Settle decides an in_doubt record. ErrNotFound or ErrStateConflict
	// when there is no in_doubt record with the key.
	Settle(ctx context.Context, s *Settlement) (*Record, error)
	// ListRecords lists the records of f.State, most recently changed
	// first, after f.After, up to f.LimitOr(); an index serves it.
	ListRecords(ctx context.Context, f RecordFilter) ([]*Record, error)
	// InDoubtByTool counts the records in doubt now, by tool (the gauge
	// airlock_records_in_doubt and the report read it; an index serves it).
	InDoubtByTool(ctx context.Context) (map[string]int, error)
	// CountRunCalls counts the records of a tool in a run (for
	// max_calls_per_run).
	CountRunCalls(ctx context.Context, p *CountRunCallsParams) (int, error)
	// Purge removes up to p.Limit final records whose ExpiresAt is before
	// p.Now.
	Purge(ctx context.Context, p *PurgeParams) (int, error)
	// Subscribe calls fn with the key of each record that leaves running,
	// as soon as the driver learns of it (in this process, and from other
	// processes where the database can tell). It returns the cancel func.
	Subscribe(fn func(key string)) (cancel func())
	// Watch says that a waiter wants to hear when the running record with
	// key leaves running. Drivers that announce completions to other
	// processes only for watched records (PostgreSQL) mark it; others do
	// nothing. Subscribe must already be active.
	Watch(ctx context.Context, key string) error
	// PollInterval is how often a waiter re-reads a running record, for
	// changes that Subscribe cannot report.
	PollInterval() time.Duration
}

// The record statements' parameters are named fields, so that a key and an
// owner (or two instants) cannot be passed in each other's place.
type (
	// ExpiredLeasesParams name the running records whose lease ended before Now,
	// at most Limit.
	ExpiredLeasesParams struct {
		Now   time.Time
		Limit int
	}
	// PurgeParams name the final records whose ExpiresAt is before Now, at most
	// Limit.
	PurgeParams struct {
		Now   time.Time
		Limit int
	}
	// ReleaseParams name a running record and the owner it must have; At
	// is the time of its audit event, from the caller's clock.
	ReleaseParams struct {
		Key   string
		Owner string
		At    time.Time
	}
	// HeartbeatParams extend the lease of Key, held by Owner, to LeaseUntil.
	// As a completion, it holds until the record is reaped or taken, not
	// until the lease's time (docs/DECISIONS.md, 71 and 74).
	HeartbeatParams struct {
		Key        string
		Owner      string
		LeaseUntil time.Time
	}
	// ExpireLeaseParams move Key, running with a lease that ended before
	// Now, to in_doubt with Note.
	ExpireLeaseParams struct {
		Key  string
		Now  time.Time
		Note string
	}
	// TakeOverParams give Key, running with a lease that ended before Now,
	// to Owner until LeaseUntil.
	TakeOverParams struct {
		Key        string
		Owner      string
		Now        time.Time
		LeaseUntil time.Time
	}
	// CountRunCallsParams name a run and a tool.
	CountRunCallsParams struct {
		RunID string
		Tool  string
	}
)

// GuardStore is what a Guard uses: the records, and the audit log to write
// its answer events to.
type GuardStore interface {
	RecordStore
	AuditWriter
}

// Store is a whole database as a driver opens it: records, plans, the audit
// log, and its schema. Each consumer takes the narrower interface it uses
// (the guard a GuardStore, the plan service a PlanStore, the report a
// metrics.Source); only the assembly (internal/app) holds a Store.
type Store interface {
	RecordStore
	// PlanStore keeps the plans of irreversible tools.
	PlanStore
	// AuditStore keeps the audit log.
	AuditStore
	// FigureStore reads the rollup the sealer keeps.
	FigureStore
	// SessionStore keeps the page's sessions.
	SessionStore
	// TaskStore keeps MCP tasks.
	TaskStore
	// Migrate applies the embedded migrations.
	Migrate(ctx context.Context) error
	// Ping checks the database is reachable and migrated.
	Ping(ctx context.Context) error
	// ProbeWrite commits a write of its own (one row), so that a store
	// that could not commit a claim now — a full disk, a read-only file or
	// database — says so.
	ProbeWrite(ctx context.Context) error
	Close() error
}

// RecordFilter selects a page of records in one state, most recently
// changed first. Only in_doubt is listed: it is the one list a person
// works through, and records are in doubt rarely, so its partial index
// costs the hot path nothing; every other record is read by its key.
type RecordFilter struct {
	State State  // StateInDoubt
	After string // cursor: RecordCursor of the last record of the previous page
	Limit int    // 1..MaxRecordPage; 0 means DefaultRecordPage
}

// Pages of records.
const (
	DefaultRecordPage = 100
	MaxRecordPage     = 1000
)

// Validate checks the filter; errors name the parameter.
func (f *RecordFilter) Validate() error {
	if f.State != StateInDoubt {
		return FieldErrorf(CodeInvalidArgument, "state", "%q cannot be listed: want in_doubt (read any other record by its key)", f.State)
	}
	if f.Limit < 0 || f.Limit > MaxRecordPage {
		return FieldErrorf(CodeInvalidArgument, "limit", "must be between 1 and %d, not %d", MaxRecordPage, f.Limit)
	}
	_, _, err := parsePageCursor(f.After)
	return err
}

// LimitOr is the page size: Limit, or DefaultRecordPage when it is 0.
func (f *RecordFilter) LimitOr() int {
	if f.Limit == 0 {
		return DefaultRecordPage
	}
	return f.Limit
}

// Cursor returns the position f.After names: the zero time and "" at the
// start. Call Validate first.
func (f *RecordFilter) Cursor() (time.Time, string) {
	at, key, _ := parsePageCursor(f.After)
	return at, key
}

// RecordCursor is the cursor after a record in a list: the time of its
// last change and its key, the list's order. It is opaque to clients.
func RecordCursor(r *Record) string { return pageCursor(r.UpdatedAt, r.Key) }
