package airlock

import (
	"context"
	"encoding/json"
)

// ActorReconcile is the actor of settlements made by reconciliation.
const ActorReconcile = "reconcile"

// Verdict is what a reconcile_with tool's answer says about in-doubt work.
type Verdict string

// Verdicts.
const (
	VerdictHappened    Verdict = "happened"     // the work was done; settle with the answer
	VerdictNotHappened Verdict = "not_happened" // it was not; settle and free the key
	VerdictUnknown     Verdict = "unknown"      // the answer does not say; ask again later
)

// Reconciliation is the finding about one in-doubt record.
type Reconciliation struct {
	Verdict Verdict
	Tool    string          // the read tool that was asked
	Answer  json.RawMessage // its answer
}

// Reconciler asks a tool's reconcile_with read tool whether an in-doubt
// record's work happened. Package reconcile implements it.
type Reconciler interface {
	// Asks reports whether the tool's in-doubt records are asked about
	// (the tool names reconcile_with): settled when Automatic, else the
	// answer is kept for the person who settles them.
	Asks(tool string) bool
	// Automatic reports whether the tool's in-doubt records are settled by
	// reconciliation (the tool names reconcile_with and its conditions).
	Automatic(tool string) bool
	// Reconcile asks about rec. An error is a read tool that failed or a
	// condition that could not be evaluated: the record stays in doubt.
	Reconcile(ctx context.Context, rec *Record) (*Reconciliation, error)
}
