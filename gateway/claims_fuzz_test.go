package gateway

import (
	"errors"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
)

// FuzzClaimHandle: a claim handle is read back only when it is one this
// server could have given (it then writes back to the same bytes); anything
// else is refused naming the claim, never a panic.
func FuzzClaimHandle(f *testing.F) {
	m, err := manifest.Parse([]byte(`version: 1
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
`), "fuzz.yaml")
	if err != nil {
		f.Fatal(err)
	}
	g := &Gateway{m: m}
	held := &guard.Held{Key: "43ad43bbf14c7f9b7966092e7182fc58", Owner: "claim-1382051df9fb6b486cc28741e5830458"}
	f.Add(claimHandle("save.note", held, ""))
	f.Add(claimHandle("pay_out", held, "pl_bed1d696f9c5d0eba9f5"))
	f.Add(claimHandle("pay_out", held, ""))
	f.Add(claimHandle("pay_out", held, "") + ".")
	f.Add("c2F2ZS5ub3Rm.k.claim-x") // base64 with stray trailing bits
	f.Add("")
	f.Add("..claim-.")
	f.Add("c2F2ZV9ub3Rl.k.claim-x")
	f.Fuzz(func(t *testing.T, handle string) {
		h, err := g.heldClaim(handle)
		if err != nil {
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "claim" {
				t.Fatalf("%q: %v; want invalid_argument naming claim", handle, err)
			}
			return
		}
		if again := claimHandle(h.tool.Name, &guard.Held{Key: h.key, Owner: h.owner}, h.planID); again != handle {
			t.Fatalf("%q read back as %+v, which writes as %q", handle, h, again)
		}
	})
}
