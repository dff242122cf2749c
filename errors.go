package airlock

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a stable, machine-readable error code. Each transport maps codes to
// its own statuses in one place (see the gateway); the codes never change
// meaning once released.
type Code string

// Error codes.
const (
	CodeInvalidArgument   Code = "invalid_argument"       // the caller's input is wrong; nothing ran
	CodeMissingField      Code = "missing_field"          // a natural-key field is missing or empty; nothing ran
	CodeUnknownTool       Code = "unknown_tool"           // no such tool in the manifest
	CodeArgumentsMismatch Code = "arguments_mismatch"     // same key, other arguments, and the tool rejects mismatches
	CodeNotSent           Code = "not_sent"               // the upstream was not reached; nothing was done; retry later
	CodeStoreUnavailable  Code = "store_unavailable"      // no durable claim could be made; nothing ran
	CodeNotFound          Code = "not_found"              // no such record
	CodeConflict          Code = "state_conflict"         // the record is not in a state that allows the change
	CodeLeaseLost         Code = "lease_lost"             // another owner holds the record
	CodeInvalidManifest   Code = "invalid_manifest"       // the manifest does not validate
	CodeBudgetExceeded    Code = "budget_exceeded"        // max_calls_per_run reached
	CodeTooManyAttempts   Code = "too_many_attempts"      // too many failed sign-ins or tokens from one address; wait
	CodeNotCallable       Code = "not_callable"           // the tool may not be called this way (irreversible)
	CodeUpstream          Code = "upstream_error"         // a read tool's upstream failed; nothing was changed; safe to retry
	CodeUnauthenticated   Code = "unauthenticated"        // no valid bearer token
	CodeForbidden         Code = "forbidden"              // the token's role may not do this
	CodeTooLarge          Code = "too_large"              // the request body is over the limit
	CodeUnsupportedMedia  Code = "unsupported_media_type" // the request body is not sent as JSON
	CodeInternal          Code = "internal"               // a bug or an unexpected failure
)

// Error is an error with a code, a message for people and models, and the
// field it is about, if any. Transports render it as
// {"error": {"code", "message", "field"}}.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Err     error  `json:"-"` // the cause, for errors.Is/As and logs; never shown to a caller
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Message == "" {
		// A sentinel has no message; its code says what it is in logs.
		b.WriteString(string(e.Code))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrNotFound) works for any not-found error.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t == e || (t.Message == "" && t.Code == e.Code)
	}
	return false
}

// Sentinels, one per code, for errors.Is. They carry no message; use
// Errorf to make an error that matches them.
var (
	ErrInvalidArgument   = &Error{Code: CodeInvalidArgument}
	ErrMissingField      = &Error{Code: CodeMissingField}
	ErrUnknownTool       = &Error{Code: CodeUnknownTool}
	ErrArgumentsMismatch = &Error{Code: CodeArgumentsMismatch}
	ErrNotSent           = &Error{Code: CodeNotSent}
	ErrUpstream          = &Error{Code: CodeUpstream}
	ErrUnauthenticated   = &Error{Code: CodeUnauthenticated}
	ErrForbidden         = &Error{Code: CodeForbidden}
	ErrTooLarge          = &Error{Code: CodeTooLarge}
	ErrUnsupportedMedia  = &Error{Code: CodeUnsupportedMedia}
	ErrStoreUnavailable  = &Error{Code: CodeStoreUnavailable}
	ErrNotFound          = &Error{Code: CodeNotFound}
	ErrStateConflict     = &Error{Code: CodeConflict}
	ErrLeaseLost         = &Error{Code: CodeLeaseLost}
	ErrInvalidManifest   = &Error{Code: CodeInvalidManifest}
	ErrBudgetExceeded    = &Error{Code: CodeBudgetExceeded}
	ErrNotCallable       = &Error{Code: CodeNotCallable}
)

// ErrNotProposer refuses a plan's withdrawal asked by another principal
// than its proposer (another principal doing the same work shares the
// plan; a plan with no proposer kept is withdrawn by nobody). It is
// forbidden: errors.Is(ErrNotProposer, ErrForbidden).
var ErrNotProposer = &Error{Code: CodeForbidden, Field: "plan_id",
	Message: "only the plan's proposer may withdraw it: it was proposed by another principal, and it still waits for a person"}

// Errorf makes an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldErrorf makes an *Error about one field.
func FieldErrorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, CodeInternal when err carries none, and
// "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Problem is one thing wrong with a manifest: where (a path such as
// "tools[2].natural_key[0].normalize[1]") and what.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	// Place is where Path is in the source file ("airlock.yaml:14:7"), when
	// the loader knows it.
	Place string `json:"place,omitempty"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Place != "" {
		b.WriteString(p.Place)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ValidationError lists every problem found, so that one run of
// `airlock tools check` shows them all.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid manifest:\n" + strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalidManifest) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidManifest }
