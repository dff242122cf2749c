package gateway

import (
	"errors"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
)

// TestClaimHandleShapeFollowsTheToolsKind: a call's claim handle has no
// plan id and a commit's (an irreversible tool's) has one; a handle of the
// other shape is one this server never gave, and is refused as made up
// (400 naming claim) before any store or plan is read.
func TestClaimHandleShapeFollowsTheToolsKind(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(handleTestManifest), "handles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{m: m}
	call := &guard.Held{Key: "43ad43bbf14c7f9b7966092e7182fc58", Secret: "claim-1382051df9fb6b486cc28741e5830458"}
	commit := &guard.Held{Key: call.Key, Secret: call.Secret, Holder: guard.Holder{PlanID: "pl_bed1d696f9c5d0eba9f5"}}
	for _, tc := range []struct {
		name   string
		handle string
		ok     bool
	}{
		{"a call's handle", claimHandle("save.note", call), true},
		{"a commit's handle", claimHandle("pay_out", commit), true},
		{"a call's handle with a plan id", claimHandle("save.note", commit), false},
		{"a commit's handle without its plan id", claimHandle("pay_out", call), false},
	} {
		h, err := g.readHandle(tc.handle, "agent-1")
		if tc.ok {
			if err != nil || h.claim.Holder.PlanID != map[bool]string{true: commit.Holder.PlanID}[h.tool.Kind == airlock.KindIrreversible] {
				t.Fatalf("%s: %+v %v; want it read back", tc.name, h, err)
			}
			continue
		}
		var e *airlock.Error
		if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "claim" {
			t.Fatalf("%s (%s): read back as %+v, %v; want invalid_argument (400) naming claim: a handle of the wrong shape for its tool's kind is made up", tc.name, tc.handle, h, err)
		}
	}
}
