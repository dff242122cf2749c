package gateway

import (
	"errors"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
)

// handleTestManifest has a tool run by its caller (whose name holds a dot)
// and an irreversible one, for the tests of claim handles.
const handleTestManifest = `version: 1
tools:
  - name: save.note
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}}
    natural_key: [{field: id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "yes", approver: "no one", on_repeat: "the first"}
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {id: {type: string}}}
    natural_key: [{field: id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "no", approver: "a person", on_repeat: "the first"}
    approval: {rules: [{name: all, when: "true", decide: human}]}
`

// FuzzClaimHandle: a claim handle is read back only when it is one this
// server could have given (it then writes back to the same bytes); anything
// else is refused naming the claim, never a panic.
func FuzzClaimHandle(f *testing.F) {
	m, err := manifest.Parse([]byte(handleTestManifest), "fuzz.yaml")
	if err != nil {
		f.Fatal(err)
	}
	g := &Gateway{m: m}
	call := &guard.Held{Key: "43ad43bbf14c7f9b7966092e7182fc58", Secret: "claim-1382051df9fb6b486cc28741e5830458"}
	commit := &guard.Held{Key: call.Key, Secret: call.Secret, Holder: guard.Holder{PlanID: "pl_bed1d696f9c5d0eba9f5"}}
	f.Add(claimHandle("save.note", call))
	f.Add(claimHandle("pay_out", commit))
	f.Add(claimHandle("pay_out", call))
	f.Add(claimHandle("pay_out", call) + ".")
	f.Add(claimHandle("pay_out", commit) + "0")
	f.Add(claimHandle("save.note", commit))
	f.Add("c2F2ZS5ub3Rm.k.claim-x") // base64 with stray trailing bits
	f.Add("")
	f.Add("..claim-.")
	f.Add("c2F2ZV9ub3Rl.k.claim-x")
	f.Fuzz(func(t *testing.T, handle string) {
		h, err := g.readHandle(handle, "agent-1")
		if err != nil {
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "claim" {
				t.Fatalf("%q: %v; want invalid_argument naming claim", handle, err)
			}
			return
		}
		if h.claim.Holder.Principal != "agent-1" {
			t.Fatalf("%q read back for %q", handle, h.claim.Holder.Principal)
		}
		if again := claimHandle(h.tool.Name, &guard.Held{Key: h.claim.Key, Secret: h.claim.Secret, Holder: h.claim.Holder}); again != handle {
			t.Fatalf("%q read back as %+v, which writes as %q", handle, h, again)
		}
	})
}
