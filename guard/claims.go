package guard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// Holder is who holds a claim and what for: the principal that claimed it
// and, for an approved plan's commit, the plan. A claim is bound to its
// holder (docs/gateway.md, "The claims API"): its record's owner is the
// claim's secret sealed with a digest of the holder, so that the secret
// alone, in another principal's hands or with another plan's id, renews
// and completes nothing.
type Holder struct {
	Principal string
	PlanID    string
}

// ownerOf is the owner a claim's record has: the secret and the holder's
// digest. (The digest is not secret; it makes the owner differ for any
// other holder.)
func ownerOf(secret string, h Holder) string {
	sum := sha256.Sum256([]byte(h.Principal + "\x00" + h.PlanID))
	return secret + "-" + hex.EncodeToString(sum[:16])
}

// claimSecretPrefix starts a claim's secret; 32 hex digits follow.
const claimSecretPrefix = "claim-"

// ValidClaimSecret reports whether s has the shape of a claim's secret.
func ValidClaimSecret(s string) bool {
	hexPart, ok := strings.CutPrefix(s, claimSecretPrefix)
	if !ok || len(hexPart) != 32 {
		return false
	}
	for _, c := range []byte(hexPart) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Held is a claim its caller holds to run the work itself (the claims API,
// docs/gateway.md): the record is running under the claim's owner until
// its lease ends, unless Renew extends it.
type Held struct {
	Key string
	// Secret is 128 random bits that only the holder gets: with its
	// Holder, it renews and finishes the claim.
	Secret string
	Holder Holder
	// Lease is until when the claim holds without a renewal.
	LeaseUntil time.Time
}

// Claimed names a held claim when its holder comes back to renew or finish
// it: the key, the secret it was given, and who it is now.
type Claimed struct {
	Key    string
	Secret string
	Holder Holder
}

// Claimed is the claim as its holder names it.
func (h *Held) Claimed() Claimed { return Claimed{Key: h.Key, Secret: h.Secret, Holder: h.Holder} }

// owner is the record's owner the claim names.
func (c Claimed) owner() string { return ownerOf(c.Secret, c.Holder) }

// Claim is the first half of Do for work its caller runs: it derives the
// key and claims it for holder, with the run's budget and the window's
// grace as Do. When the caller holds the claim it gets Held: it runs the
// work, renews the lease while it runs (Renew) and records the outcome
// (Finish); a claim whose holder vanishes is reaped as a crashed call is.
// Otherwise it gets the answer Do would give (a repeat, in progress once
// the tool's repeat_wait has passed, in doubt, a conflict) or a refusal,
// and runs nothing.
func (g *Guard) Claim(ctx context.Context, c *airlock.Call, holder Holder) (*Held, *airlock.Answer, error) {
	if err := airlock.CheckRunID(c.RunID, g.maxRunID); err != nil {
		return nil, nil, err
	}
	start := g.clock.Now()
	d, err := g.Derive(c)
	if err != nil {
		return nil, nil, err
	}
	return g.claimFor(ctx, &prepared{
		tool: c.Tool, key: d.Key, previous: d.Previous, runID: c.RunID, windowID: d.Parts.WindowID,
		args: c.Args, hash: d.ArgsHash(c.Tool, c.Args),
		expiresAt: g.expiresAt(d, start), start: start,
	}, holder)
}

// ClaimKeyed is Claim for work whose key is given (an approved plan's,
// committed by a worker in its caller's process); a running claim is
// answered in progress at once, without waiting.
func (g *Guard) ClaimKeyed(ctx context.Context, kc *airlock.KeyedCall, holder Holder) (*Held, *airlock.Answer, error) {
	if kc.Tool == nil || kc.Key == "" {
		return nil, nil, airlock.Errorf(airlock.CodeInvalidArgument, "a keyed claim needs its tool and key")
	}
	now := g.clock.Now()
	return g.claimFor(ctx, &prepared{
		tool: kc.Tool, key: kc.Key, runID: kc.RunID, windowID: "keyed",
		args: kc.Args, hash: airlock.ArgsHash(kc.Args.JSON()), expiresAt: kc.ExpiresAt, start: now, deadline: now,
	}, holder)
}

// claimFor claims p's work for holder, with an owner made of a new secret
// and the holder.
func (g *Guard) claimFor(ctx context.Context, p *prepared, holder Holder) (*Held, *airlock.Answer, error) {
	var random [16]byte
	_, _ = rand.Read(random[:])
	secret := claimSecretPrefix + hex.EncodeToString(random[:])
	p.owner = ownerOf(secret, holder)
	if rw := p.tool.RespondWithinOr(); rw > 0 && p.deadline.IsZero() {
		p.deadline = p.start.Add(rw)
	}
	rec, a, err := g.begin(ctx, p)
	if rec == nil {
		if a != nil {
			a.Key = p.key
		}
		return nil, a, err
	}
	return &Held{Key: rec.Key, Secret: secret, Holder: holder, LeaseUntil: rec.LeaseUntil}, nil, nil
}

// Renew extends a held claim's lease by the guard's lease from now.
// ErrLeaseLost when the claim is no longer held as c names it: it was
// finished, the reaper put it in doubt or another took it over after its
// lease ended, or c's secret or holder are not the claim's. A lease that
// ended is renewed while nobody has acted on it, as Finish keeps the
// outcome then (docs/DECISIONS.md, 71 and 74).
func (g *Guard) Renew(ctx context.Context, c Claimed) (time.Time, error) {
	until := g.clock.Now().Add(g.lease)
	if err := g.store.Heartbeat(ctx, &airlock.HeartbeatParams{Key: c.Key, Owner: c.owner(), LeaseUntil: until}); err != nil {
		if errors.Is(err, airlock.ErrLeaseLost) {
			return time.Time{}, errNotHeld()
		}
		return time.Time{}, storeErr("renew", err)
	}
	return until, nil
}

// Finish records the outcome of a held claim's work and answers as Do
// answers the first call: succeeded or failed with its result, in doubt for
// an unknown outcome (settled as any in-doubt record), and for work that
// never started (OutcomeNotSent) the claim is released, so that the next
// call runs it, and the answer is the not_sent refusal. Finishing a claim
// already finished (a retry after a lost reply) answers with the record as
// it is (a completion saying another outcome is refused, state_conflict),
// to its own holder only. A claim reaped or taken over after its lease
// ended is refused with ErrLeaseLost, as Renew is; until then a late
// outcome is kept.
func (g *Guard) Finish(ctx context.Context, tool *airlock.Tool, c Claimed, out airlock.Outcome) (*airlock.Answer, error) {
	rec, err := g.store.Get(ctx, c.Key)
	owner := c.owner()
	switch {
	case errors.Is(err, airlock.ErrNotFound):
		return nil, errNotHeld()
	case err != nil:
		return nil, storeErr("read", err)
	case rec.Tool != tool.Name || rec.Owner != owner:
		return nil, errNotHeld()
	case rec.State == airlock.StateRunning:
	case rec.State.Final() || rec.State == airlock.StateInDoubt && out.Kind == airlock.OutcomeUnknown:
		// A completion sent again (its reply was lost): answered as the
		// first if it says the same, refused if it says otherwise.
		if want := stateOf(out.Kind); want != rec.State {
			return nil, &airlock.Error{Code: airlock.CodeConflict, Field: "outcome", Message: fmt.Sprintf(
				"this work was already completed as %s; a completion saying otherwise changes nothing", rec.State)}
		}
		a := airlock.AnswerFor(rec, tool, false)
		a.Key = c.Key
		return a, nil
	default:
		return nil, errNotHeld()
	}
	took := g.clock.Since(rec.CreatedAt)
	if g.observer != nil {
		g.observer.SideEffect(tool, out, took, false)
	}
	switch out.Kind {
	case airlock.OutcomeSucceeded, airlock.OutcomeFailed, airlock.OutcomeUnknown, airlock.OutcomeNotSent:
	default:
		out = airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: errors.New("the caller reported no outcome")}
	}
	r := g.record(ctx, tool, rec, out, false)
	if r.err != nil {
		return nil, r.err
	}
	r.answer.Key = c.Key
	return r.answer, nil
}

// stateOf is the record state an outcome leaves.
func stateOf(k airlock.OutcomeKind) airlock.State {
	switch k {
	case airlock.OutcomeSucceeded:
		return airlock.StateSucceeded
	case airlock.OutcomeFailed:
		return airlock.StateFailed
	case airlock.OutcomeUnknown:
		return airlock.StateInDoubt
	}
	return airlock.StateRunning // not started: no final state
}

func errNotHeld() error {
	return &airlock.Error{Code: airlock.CodeLeaseLost, Field: "claim",
		Message: "this handle holds no claim now: it was never this caller's, or its claim was completed, released as not started, taken over, or put in doubt after its lease ended; do not run the work again — a new call answers what became of it"}
}
