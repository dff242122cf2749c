package airlock

import (
	"context"
	"time"
)

// PageSession is a person signed in to the page. It is kept in the store,
// so that every replica behind a load balancer knows it and a sign-out
// reaches them all; the cookie's value itself is never stored, only its
// SHA-256 (a copy of the table signs no one in).
type PageSession struct {
	ID      string   // hex SHA-256 of the cookie's value
	Name    string   // who: the token's name, or the person's identity from the identity provider
	Role    string   // RoleApprover or RoleAdmin
	Subject string   // the identity provider's issuer and subject ("" for a token)
	Groups  []string // the person's groups from the identity provider (approval.approvers)
	// Credential names the token that opened the session without being it
	// (a fingerprint of its hash; "" for a sign-in through the provider):
	// the page ends the session once no token of the configuration has it
	// (docs/hardening.md, "page sessions").
	Credential string
	CSRF       string    // the token every form of the session carries
	Flash      string    // the message the session's next page shows once
	CreatedAt  time.Time //
	// RenewAt is when the identity provider must confirm the person and
	// their groups again before the session decides anything (a token's
	// session: ExpiresAt, its credential being checked on every request).
	RenewAt   time.Time
	ExpiresAt time.Time // the session is gone after this
}

// Validate checks a session before it is stored.
func (s *PageSession) Validate() error {
	switch {
	case len(s.ID) != 64:
		return FieldErrorf(CodeInvalidArgument, "id", "want the 64 hex digits of the cookie's SHA-256")
	case s.Name == "":
		return FieldErrorf(CodeInvalidArgument, "name", "required: who signed in")
	case s.Role != RoleApprover && s.Role != RoleAdmin:
		return FieldErrorf(CodeInvalidArgument, "role", "%q cannot sign in to the page: want approver or admin", s.Role)
	case (s.Credential == "") == (s.Subject == ""):
		return FieldErrorf(CodeInvalidArgument, "credential", "want exactly one of credential (a token's session) and subject (a sign-in through the identity provider)")
	case s.CSRF == "":
		return FieldErrorf(CodeInvalidArgument, "csrf", "required")
	case !s.ExpiresAt.After(s.CreatedAt):
		return FieldErrorf(CodeInvalidArgument, "expires_at", "must be after created_at")
	case s.RenewAt.Before(s.CreatedAt) || s.RenewAt.After(s.ExpiresAt):
		return FieldErrorf(CodeInvalidArgument, "renew_at", "must be from created_at to expires_at")
	}
	return CheckText("name", s.Name)
}

// SessionStore keeps the page's sessions and the secrets every replica
// shares.
type SessionStore interface {
	// CreateSession stores a new session.
	CreateSession(ctx context.Context, s *PageSession) error
	// GetSession returns the session with p.ID unless it has expired by
	// p.Now (ErrNotFound).
	GetSession(ctx context.Context, p *GetSessionParams) (*PageSession, error)
	// DeleteSession removes a session (signing out); none is no error.
	DeleteSession(ctx context.Context, id string) error
	// SetSessionFlash sets (or, with "", clears) the message of the
	// session's next page.
	SetSessionFlash(ctx context.Context, p *SetSessionFlashParams) error
	// PurgeSessions deletes up to p.Limit sessions expired by p.Now.
	PurgeSessions(ctx context.Context, p *PurgeSessionsParams) (int, error)
	// Secret returns the secret stored under name, storing fresh first
	// when there is none: the first replica's value wins, and every
	// replica gets the same one.
	Secret(ctx context.Context, name string, fresh []byte) ([]byte, error)
}

// SetSessionFlashParams name the session and its one-time message ("" clears it).
type SetSessionFlashParams struct {
	ID    string
	Flash string
}

// GetSessionParams name a session and the time its expiry is judged at.
type GetSessionParams struct {
	ID  string
	Now time.Time
}

// PurgeSessionsParams name the sessions expired by Now, at most Limit.
type PurgeSessionsParams struct {
	Now   time.Time
	Limit int
}
