package airlock_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

// A plan is decided only before it expires: at its very expiry instant it
// has expired (the expiry pass takes it from then on), and a decision a
// moment before it still counts.
func TestAPlanIsDecidedOnlyBeforeItExpires(t *testing.T) {
	t.Parallel()
	expires := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	p := &airlock.Plan{ID: "pl_00000000000000000001", Status: airlock.PlanAwaitingApproval, DecisionHash: "h", ExpiresAt: expires}
	for _, c := range []struct {
		at   time.Time
		want airlock.PlanStatus
	}{
		{expires.Add(-time.Microsecond), airlock.PlanApproved},
		{expires, ""},
		{expires.Add(time.Second), ""},
	} {
		got, err := airlock.CheckDecision(p, &airlock.PlanDecision{ID: p.ID, Approve: true, By: "alice", Role: airlock.RoleApprover, Reason: "ok", DecisionHash: "h", Now: c.at})
		if got != c.want || (c.want == "") != (airlock.ErrorCode(err) == airlock.CodeConflict) {
			t.Errorf("decided at expiry %+v: %q %v; want %q", c.at.Sub(expires), got, err, c.want)
		}
	}
}
