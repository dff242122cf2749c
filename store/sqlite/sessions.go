package sqlite

import (
	"context"
	"database/sql"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

// CreateSession implements airlock.SessionStore.
func (s *Store) CreateSession(ctx context.Context, ps *airlock.PageSession) error {
	if err := ps.Validate(); err != nil {
		return err
	}
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO airlock_sessions (id, name, role, subject, csrf, flash, created_at, expires_at, groups, credential, renew_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, ps.ID, ps.Name, ps.Role, ps.Subject, ps.CSRF, ps.Flash, micros(ps.CreatedAt), micros(ps.ExpiresAt),
			rules.GroupsJSON(ps.Groups), ps.Credential, micros(ps.RenewAt))
		return err
	})
}

// GetSession implements airlock.SessionStore.
func (s *Store) GetSession(ctx context.Context, p *airlock.GetSessionParams) (*airlock.PageSession, error) {
	id, now := p.ID, p.Now
	var ps airlock.PageSession
	var created, expires, renew int64
	var groups string
	err := s.read.QueryRowContext(ctx, `SELECT id, name, role, subject, csrf, flash, created_at, expires_at, groups, credential, renew_at
		FROM airlock_sessions WHERE id = ? AND expires_at > ?`, id, micros(now)).
		Scan(&ps.ID, &ps.Name, &ps.Role, &ps.Subject, &ps.CSRF, &ps.Flash, &created, &expires, &groups, &ps.Credential, &renew)
	if err == sql.ErrNoRows {
		return nil, airlock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	ps.CreatedAt, ps.ExpiresAt, ps.RenewAt = fromMicros(created), fromMicros(expires), fromMicros(renew)
	ps.Groups = rules.ParseGroups(groups)
	return &ps, nil
}

// DeleteSession implements airlock.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM airlock_sessions WHERE id = ?`, id)
		return err
	})
}

// SetSessionFlash implements airlock.SessionStore.
func (s *Store) SetSessionFlash(ctx context.Context, p *airlock.SetSessionFlashParams) error {
	id, flash := p.ID, p.Flash
	if err := airlock.CheckText("flash", flash); err != nil {
		return err
	}
	return s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE airlock_sessions SET flash = ? WHERE id = ?`, flash, id)
		return err
	})
}

// PurgeSessions implements airlock.SessionStore.
func (s *Store) PurgeSessions(ctx context.Context, p *airlock.PurgeSessionsParams) (int, error) {
	now, limit := p.Now, p.Limit
	var n int64
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM airlock_sessions WHERE id IN (
			SELECT id FROM airlock_sessions WHERE expires_at <= ? LIMIT ?)`, micros(now), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Secret implements airlock.SessionStore.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	var v []byte
	err := s.do(ctx, "", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT value FROM airlock_secrets WHERE name = ?`, name).Scan(&v)
	})
	return v, err
}
