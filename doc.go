// Package airlock makes an AI agent's side-effecting tool calls happen at
// most once per unit of work (docs/concepts.md). It holds the domain and does no
// I/O; besides the standard library it imports golang.org/x/text (Unicode
// normalization and folding for keys, ISO 4217 minor units for money) and
// go-json-experiment's jsontext (a JSON member named twice is refused):
//
//   - key derivation (DeriveKey): the key is never shown to the model; it
//     comes from the tool, the natural-key fields of the arguments (with
//     their normalizers) and a window such as one business day;
//   - the guarded call's vocabulary (Call, Outcome, Answer, SettleRequest);
//     the engine that runs it — claim the key in the store's unique index,
//     run the side effect, store the outcome, answer a repeat with the
//     first result — is package guard, with its maintenance (the Reaper);
//   - plans of irreversible tools (Plan, CheckDecision) and the audit
//     events every change writes (AuditEvent);
//   - the Store interface the drivers implement (store/sqlite,
//     store/postgres; store/storetest is their conformance suite), the
//     tools and their calendar (Catalog, Tool) with their validation, and
//     the error codes (errors.go). The server's configuration around the
//     tools (auth, upstreams, limits, notify, retention) is package
//     manifest's, beside its loader.
//
// A whole server is assembled in internal/app; cmd/airlock only wires
// flags to it.
package airlock
