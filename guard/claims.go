package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/airlockhq/airlock"
)

// Held is a claim its caller holds to run the work itself (the claims API,
// docs/gateway.md): the record is running under Owner until its lease ends,
// unless Renew extends it. Owner is 128 random bits: whoever has it may
// renew and finish the claim, nobody else.
type Held struct {
	Key   string
	Owner string
	// Lease is until when the claim holds without a renewal.
	LeaseUntil time.Time
}

// Claim is the first half of Do for work its caller runs: it derives the
// key and claims it, with the run's budget and the window's grace as Do.
// When the caller holds the claim it gets Held: it runs the work, renews
// the lease while it runs (Renew) and records the outcome (Finish); a
// claim whose holder vanishes is reaped as a crashed call is. Otherwise it
// gets the answer Do would give (a repeat, in progress once the tool's
// repeat_wait has passed, in doubt, a conflict) or a refusal, and runs
// nothing.
func (g *Guard) Claim(ctx context.Context, c *airlock.Call) (*Held, *airlock.Answer, error) {
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
	})
}

// ClaimKeyed is Claim for work whose key is given (an approved plan's,
// committed by a worker in its caller's process); a running claim is
// answered in progress at once, without waiting.
func (g *Guard) ClaimKeyed(ctx context.Context, kc *airlock.KeyedCall) (*Held, *airlock.Answer, error) {
	if kc.Tool == nil || kc.Key == "" {
		return nil, nil, airlock.Errorf(airlock.CodeInvalidArgument, "a keyed claim needs its tool and key")
	}
	now := g.clock.Now()
	return g.claimFor(ctx, &prepared{
		tool: kc.Tool, key: kc.Key, runID: kc.RunID, windowID: "keyed",
		args: kc.Args, hash: airlock.ArgsHash(kc.Args.JSON()), expiresAt: kc.ExpiresAt, start: now, deadline: now,
	})
}

// claimFor claims p's work for a caller, with an owner that is its secret.
func (g *Guard) claimFor(ctx context.Context, p *prepared) (*Held, *airlock.Answer, error) {
	var secret [16]byte
	_, _ = rand.Read(secret[:])
	p.owner = "claim-" + hex.EncodeToString(secret[:])
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
	return &Held{Key: rec.Key, Owner: rec.Owner, LeaseUntil: rec.LeaseUntil}, nil, nil
}

// Renew extends a held claim's lease by the guard's lease from now.
// ErrLeaseLost when the claim is no longer held by owner (its lease ended
// and the reaper took it, or it was finished).
func (g *Guard) Renew(ctx context.Context, key, owner string) (time.Time, error) {
	until := g.clock.Now().Add(g.lease)
	if err := g.store.Heartbeat(ctx, &airlock.HeartbeatParams{Key: key, Owner: owner, LeaseUntil: until}); err != nil {
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
// it is (a completion saying another outcome is refused, state_conflict); a
// claim whose lease ended first is refused with ErrLeaseLost: its record is
// in doubt.
func (g *Guard) Finish(ctx context.Context, tool *airlock.Tool, key, owner string, out airlock.Outcome) (*airlock.Answer, error) {
	rec, err := g.store.Get(ctx, key)
	switch {
	case errors.Is(err, airlock.ErrNotFound):
		return nil, errNotHeld()
	case err != nil:
		return nil, storeErr("read", err)
	case rec.Tool != tool.Name:
		return nil, errNotHeld()
	case rec.State == airlock.StateRunning && rec.Owner == owner:
	case rec.State.Final() || rec.State == airlock.StateInDoubt && out.Kind == airlock.OutcomeUnknown:
		// A completion sent again (its reply was lost): answered as the
		// first if it says the same, refused if it says otherwise.
		if want := stateOf(out.Kind); want != rec.State {
			return nil, &airlock.Error{Code: airlock.CodeConflict, Field: "outcome", Message: fmt.Sprintf(
				"this work was already completed as %s; a completion saying otherwise changes nothing", rec.State)}
		}
		a := airlock.AnswerFor(rec, tool, false)
		a.Key = key
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
	r.answer.Key = key
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
		Message: "this claim is no longer held (its lease ended, or it was never this caller's); if its work ran, its record is in doubt and is settled as any in-doubt record: do not run the work again"}
}
