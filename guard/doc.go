// Package guard runs side effects at most once per key (docs/concepts.md,
// "The guarded call"): Guard.Do derives the key, claims it in the store's
// unique index, runs the side effect while a lease keeper renews its
// lease, records the outcome, and answers a repeat with the first result
// (never an error). The call path is Guard's; its maintenance is the
// Reaper's — expired leases to in_doubt or re-driven, records past
// retention purged, in-doubt records reconciled — a service started and
// stopped on its own. Both read one time source, Config.Clock.
package guard
