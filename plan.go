package airlock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PlanIDPrefix begins every plan id.
const PlanIDPrefix = "pl_"

// NewPlanID is a fresh plan id: 80 random bits.
func NewPlanID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return PlanIDPrefix + hex.EncodeToString(b[:])
}

// ValidPlanID says whether id has the shape of a plan id (so that a
// malformed one is refused as such, not looked up).
func ValidPlanID(id string) bool {
	rest, ok := strings.CutPrefix(id, PlanIDPrefix)
	if !ok || len(rest) != 20 {
		return false
	}
	for _, c := range []byte(rest) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PlanStatus is where a plan is in plan → approve → commit (docs/plans.md).
type PlanStatus string

// Plan statuses: awaiting_approval → approved | rejected | expired;
// approved → committing → committed | failed | in_doubt.
const (
	PlanAwaitingApproval PlanStatus = "awaiting_approval"
	PlanApproved         PlanStatus = "approved"
	PlanRejected         PlanStatus = "rejected"
	PlanExpired          PlanStatus = "expired"
	PlanCommitting       PlanStatus = "committing"
	PlanCommitted        PlanStatus = "committed"
	PlanFailed           PlanStatus = "failed"
	PlanInDoubt          PlanStatus = "in_doubt"
	// PlanWithdrawn: its proposer withdrew it while it awaited approval
	// (an MCP client's tasks/cancel); it will not be done.
	PlanWithdrawn PlanStatus = "withdrawn"
)

// Final reports whether the plan will not change again.
func (s PlanStatus) Final() bool {
	switch s {
	case PlanRejected, PlanExpired, PlanCommitted, PlanFailed, PlanWithdrawn:
		return true
	}
	return false
}

// Plan is an agent's proposal to run an irreversible tool, unique on the
// tool's derived key.
type Plan struct {
	ID string `json:"id"`
	// ProposedBy is the principal that proposed the plan (its qualified
	// name, docs/identity.md); it may not approve it where the tool keeps
	// separation of duties. Empty for plans made before it was kept.
	ProposedBy string `json:"proposed_by"`
	Key        string `json:"-"` // the tool's key; never shown to an agent
	Tool       string `json:"tool"`
	// Status and the decision.
	Status   PlanStatus `json:"status"`
	Rule     string     `json:"rule"`
	Decision string     `json:"decision"` // auto | human
	// Evaluation is how each rule evaluated (JSON), for approvers.
	Evaluation json.RawMessage `json:"evaluation,omitempty"`
	Args       json.RawMessage `json:"args"`
	Facts      json.RawMessage `json:"facts,omitempty"`
	// FactsError says why the facts could not be looked up (the plan then
	// waits for a person).
	FactsError string `json:"facts_error,omitempty"`
	// DecisionHash binds a decision to the arguments and facts it was made on.
	DecisionHash string    `json:"decision_hash"`
	RunID        string    `json:"run_id"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// ApprovalsRequired is how many distinct people must approve the plan
	// (the deciding rule's approvals; 1 by default).
	ApprovalsRequired int `json:"approvals_required"`
	// Approvals are the approvals given so far, oldest first; the plan is
	// approved when there are ApprovalsRequired of them.
	Approvals      []PlanApproval  `json:"approvals,omitempty"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	DecidedAt      time.Time       `json:"decided_at,omitzero"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
}

// DecisionHash is the hex SHA-256 of [tool, canonical args, canonical facts].
func DecisionHash(tool string, args, facts json.RawMessage) string {
	b, _ := json.Marshal([]any{tool, orNull(args), orNull(facts)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// PlanApproval is one person's approval of a plan.
type PlanApproval struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ApprovalsRequiredOr is how many approvals the plan needs: at least 1.
func (p *Plan) ApprovalsRequiredOr() int { return max(1, p.ApprovalsRequired) }

// ApprovedBy reports whether who has approved the plan already.
func (p *Plan) ApprovedBy(who string) bool {
	for _, a := range p.Approvals {
		if a.By == who {
			return true
		}
	}
	return false
}

// PlanDecision is a person's approval or rejection.
type PlanDecision struct {
	ID           string
	Approve      bool
	By           string   // who decides: the approver's qualified name as the audit log records it
	Role         string   // By's role: RoleApprover or RoleAdmin
	Groups       []string // By's groups (OIDC groups, JWT roles), for Approvers
	Reason       string
	DecisionHash string // must equal the plan's
	Now          time.Time
	// Policy is what the plan's tool says of who may decide; the plan
	// service sets it from the manifest.
	Policy DecisionPolicy
}

// DecisionPolicy is a tool's rule of who may decide its plans
// (docs/plans.md, "Who decides").
type DecisionPolicy struct {
	// SelfApproval lets the proposer approve its own plan. Default false:
	// separation of duties.
	SelfApproval bool
	// Approvers, when not empty, are who may decide: principals' names and
	// "group:NAME" entries matched against the decider's groups.
	Approvers []string
}

// Allows reports whether a principal with these groups is one of the
// tool's approvers.
func (dp DecisionPolicy) Allows(by string, groups []string) bool {
	if len(dp.Approvers) == 0 {
		return true
	}
	for _, a := range dp.Approvers {
		if g, ok := strings.CutPrefix(a, "group:"); ok {
			if slices.Contains(groups, g) {
				return true
			}
		} else if a == by {
			return true
		}
	}
	return false
}

// PlanFilter selects plans to list; empty fields match all.
type PlanFilter struct {
	Status    PlanStatus
	Tool      string
	RunID     string
	DecidedBy string // who decided (a person's name, or "system")
	// ProposedBy: who proposed it (a commit worker is given only the
	// plans it may take; docs/gateway.md, "Commit workers")
	ProposedBy string
	Since      time.Time // created at or after; zero: no bound
	Until      time.Time // created before; zero: no bound
	Decided    bool      // leave out plans still awaiting approval
	Newest     bool      // newest first; default oldest first
	After      string    // cursor: PlanCursor of the last plan of the previous page
	Limit      int       // 1..MaxPlanPage; 0 means DefaultPlanPage
}

// Pages of plans.
const (
	DefaultPlanPage = 100
	MaxPlanPage     = 1000
)

// PlanStatuses are every status a plan can have.
var PlanStatuses = []PlanStatus{PlanAwaitingApproval, PlanApproved, PlanRejected, PlanExpired, PlanCommitting, PlanCommitted, PlanFailed, PlanInDoubt, PlanWithdrawn}

// Validate checks the filter; errors name the parameter.
func (f *PlanFilter) Validate() error {
	if f.Status != "" && !slices.Contains(PlanStatuses, f.Status) {
		return FieldErrorf(CodeInvalidArgument, "status", "%q is not a plan status: want one of %s", f.Status, joinStatuses())
	}
	if f.Limit < 0 || f.Limit > MaxPlanPage {
		return FieldErrorf(CodeInvalidArgument, "limit", "must be between 1 and %d, not %d", MaxPlanPage, f.Limit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return FieldErrorf(CodeInvalidArgument, "until", "must be after since")
	}
	if _, _, err := ParsePlanCursor(f.After); err != nil {
		return err
	}
	return nil
}

// LimitOr is the page size: Limit, or DefaultPlanPage when it is 0.
func (f *PlanFilter) LimitOr() int {
	if f.Limit == 0 {
		return DefaultPlanPage
	}
	return f.Limit
}

func joinStatuses() string {
	names := make([]string, len(PlanStatuses))
	for i, s := range PlanStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// PlanCursor is the cursor after a plan in a list: its creation time and
// id, the list's order. It is opaque to clients.
func PlanCursor(p *Plan) string { return pageCursor(p.CreatedAt, p.ID) }

// ParsePlanCursor reads a PlanCursor; "" is the start (zero time, no id).
func ParsePlanCursor(c string) (time.Time, string, error) { return parsePageCursor(c) }

// pageCursor encodes a keyset position: a time and a tie-breaking id.
func pageCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + id))
}

func parsePageCursor(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	bad := FieldErrorf(CodeInvalidArgument, "after", "%q is not a cursor: want the next_after of the previous page", c)
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	at, id, ok := strings.Cut(string(b), ".")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" || us < 0 {
		return time.Time{}, "", bad
	}
	return time.UnixMicro(us).UTC(), id, nil
}

// WaitingPlans is what waits for a person for one tool: how many plans and
// since when the oldest has waited.
type WaitingPlans struct {
	Tool   string
	Depth  int
	Oldest time.Time // the oldest waiting plan's CreatedAt
}

// TotalWaiting is how many plans wait for a person, over every tool.
func TotalWaiting(ws []WaitingPlans) int {
	n := 0
	for _, w := range ws {
		n += w.Depth
	}
	return n
}

// PlanStore keeps plans. Drivers: store/sqlite and store/postgres. A
// driver opened with a commit queue inserts the commit job of a plan that
// becomes approved in the same transaction (a transactional outbox); the
// job's insertion is typed to the driver's own transaction.
type PlanStore interface {
	// CreatePlan inserts the plan unless one with its key exists; it returns
	// the plan as stored and whether this call created it. A plan created
	// already approved (automatic decision) has its commit enqueued in the
	// same transaction.
	CreatePlan(ctx context.Context, p *Plan) (*Plan, bool, error)
	// GetPlan returns a plan, or ErrNotFound.
	GetPlan(ctx context.Context, id string) (*Plan, error)
	// GetPlanByKey returns the plan of a key, or ErrNotFound.
	GetPlanByKey(ctx context.Context, key string) (*Plan, error)
	// ListPlans lists plans, oldest first.
	ListPlans(ctx context.Context, f PlanFilter) ([]*Plan, error)
	// DecidePlan records a person's decision on an awaiting plan, checked
	// by CheckDecision inside the transaction; approving enqueues the
	// commit in the same transaction. Deciding again the same way is no
	// change; a stale DecisionHash or another decision is a conflict.
	DecidePlan(ctx context.Context, d *PlanDecision) (*Plan, error)
	// ExpirePlans moves awaiting plans past their ExpiresAt to expired and
	// returns them as they now are.
	ExpirePlans(ctx context.Context, now time.Time) ([]*Plan, error)
	// SetPlanStatus moves plan p.ID from one of p.From to p.To, with its
	// result or error; false when it was in none of them.
	SetPlanStatus(ctx context.Context, p *SetPlanStatusParams) (bool, error)
	// WithdrawPlan moves an awaiting plan to withdrawn, on its proposer's
	// word: p.By is who withdrew it (the audit event's actor), p.Reason why.
	// It returns the plan as it then is, and false (with the plan
	// unchanged) when it no longer awaited approval.
	WithdrawPlan(ctx context.Context, p *WithdrawPlanParams) (*Plan, bool, error)
	// WaitingPlans counts the plans awaiting a person, per tool, with the
	// oldest one's creation time (tools with none waiting are left out).
	WaitingPlans(ctx context.Context) ([]WaitingPlans, error)
}

// SetPlanStatusParams move plan ID from one of From to To.
type SetPlanStatusParams struct {
	ID     string
	From   []PlanStatus
	To     PlanStatus
	Result json.RawMessage // nil keeps the plan's result
	Error  string
	At     time.Time
}

// WithdrawPlanParams withdraw plan ID: By is who withdrew it, Reason why.
type WithdrawPlanParams struct {
	ID     string
	By     string
	Reason string
	At     time.Time
}

// CheckDecision says what a decision does to a plan: the status to move
// to, or "" for no change (the same decision again), or an error for a
// decision that may not be made (not awaiting, stale hash, no reason).
func CheckDecision(p *Plan, d *PlanDecision) (PlanStatus, error) {
	if d.By == "" {
		return "", FieldErrorf(CodeInvalidArgument, "by", "a decision needs the approver's name")
	}
	if d.Role != RoleApprover && d.Role != RoleAdmin {
		return "", FieldErrorf(CodeForbidden, "role", "only an approver or an admin decides plans; %s is %q", d.By, d.Role)
	}
	want := PlanRejected
	if d.Approve {
		want = PlanApproved
	}
	if p.Status != PlanAwaitingApproval {
		// Approving an approved (or committing, committed) plan again is one approval.
		sameWay := (d.Approve && (p.Status == PlanApproved || p.Status == PlanCommitting || p.Status == PlanCommitted ||
			p.Status == PlanFailed || p.Status == PlanInDoubt) && p.Decision == "human") || (!d.Approve && p.Status == PlanRejected)
		if sameWay && d.DecisionHash == p.DecisionHash {
			return "", nil
		}
		return "", Errorf(CodeConflict, "plan %s is %s; it can no longer be %s", p.ID, p.Status, map[bool]string{true: "approved", false: "rejected"}[d.Approve])
	}
	if !d.Now.IsZero() && !p.ExpiresAt.IsZero() && !d.Now.Before(p.ExpiresAt) {
		return "", Errorf(CodeConflict, "plan %s expired at %s before anyone decided it; it will not be done. Nothing was changed", p.ID, p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if d.DecisionHash == "" {
		return "", FieldErrorf(CodeInvalidArgument, "decision_hash", "required: the plan's decision_hash as you saw it")
	}
	if d.DecisionHash != p.DecisionHash {
		return "", FieldErrorf(CodeConflict, "decision_hash", "the plan's arguments or facts are not the ones this decision was made on (decision_hash differs); reload the plan and decide again")
	}
	if strings.TrimSpace(d.Reason) == "" {
		return "", FieldErrorf(CodeInvalidArgument, "reason", "a reason is required: why you decide so (it goes in the audit trail)")
	}
	if err := d.Policy.Check(p, d); err != nil {
		return "", err
	}
	if d.Approve && p.ApprovedBy(d.By) {
		return "", nil // the same approval again: still waiting for another person
	}
	return want, nil
}

// Check refuses a decision the tool's rule of who decides forbids: someone
// not among its approvers (approving or rejecting), or the proposer
// approving its own plan. The error is CodeForbidden and names the rule.
func (dp DecisionPolicy) Check(p *Plan, d *PlanDecision) error {
	if !dp.Allows(d.By, d.Groups) {
		return FieldErrorf(CodeForbidden, "by", "%s may not decide plans of %s: only %s may (approval.approvers)",
			d.By, p.Tool, strings.Join(dp.Approvers, ", "))
	}
	if d.Approve && !dp.SelfApproval && p.ProposedBy != "" && p.ProposedBy == d.By {
		return FieldErrorf(CodeForbidden, "by", "separation of duties: %s proposed plan %s and may not approve it; another approver must (approval.allow_self_approval is not set for %s)",
			d.By, p.ID, p.Tool)
	}
	return nil
}

// Forbidden is the reason a principal may not approve a plan under a
// policy, or "" when it may: for the page, which then shows no button.
func (dp DecisionPolicy) Forbidden(p *Plan, by string, groups []string) string {
	err := dp.Check(p, &PlanDecision{Approve: true, By: by, Groups: groups})
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
