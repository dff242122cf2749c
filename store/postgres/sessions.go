package postgres

import (
	"context"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/rules"
)

// CreateSession implements airlock.SessionStore.
func (s *Store) CreateSession(ctx context.Context, ps *airlock.PageSession) error {
	if err := ps.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO airlock_sessions (id, name, role, subject, csrf, flash, created_at, expires_at, groups, credential, renew_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, ps.ID, ps.Name, ps.Role, ps.Subject, ps.CSRF, ps.Flash, ps.CreatedAt, ps.ExpiresAt,
		rules.GroupsJSON(ps.Groups), ps.Credential, ps.RenewAt)
	return err
}

// GetSession implements airlock.SessionStore.
func (s *Store) GetSession(ctx context.Context, p *airlock.GetSessionParams) (*airlock.PageSession, error) {
	id, now := p.ID, p.Now
	var ps airlock.PageSession
	var groups string
	err := s.pool.QueryRow(ctx, `SELECT id, name, role, subject, csrf, flash, created_at, expires_at, groups, credential, renew_at
		FROM airlock_sessions WHERE id = $1 AND expires_at > $2`, id, now).
		Scan(&ps.ID, &ps.Name, &ps.Role, &ps.Subject, &ps.CSRF, &ps.Flash, &ps.CreatedAt, &ps.ExpiresAt, &groups, &ps.Credential, &ps.RenewAt)
	if isNoRows(err) {
		return nil, airlock.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	ps.CreatedAt, ps.ExpiresAt, ps.RenewAt = ps.CreatedAt.UTC(), ps.ExpiresAt.UTC(), ps.RenewAt.UTC()
	ps.Groups = rules.ParseGroups(groups)
	return &ps, nil
}

// DeleteSession implements airlock.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM airlock_sessions WHERE id = $1`, id)
	return err
}

// SetSessionFlash implements airlock.SessionStore.
func (s *Store) SetSessionFlash(ctx context.Context, p *airlock.SetSessionFlashParams) error {
	id, flash := p.ID, p.Flash
	if err := airlock.CheckText("flash", flash); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `UPDATE airlock_sessions SET flash = $2 WHERE id = $1`, id, flash)
	return err
}

// PurgeSessions implements airlock.SessionStore.
func (s *Store) PurgeSessions(ctx context.Context, p *airlock.PurgeSessionsParams) (int, error) {
	now, limit := p.Now, p.Limit
	tag, err := s.pool.Exec(ctx, `DELETE FROM airlock_sessions WHERE id IN (
		SELECT id FROM airlock_sessions WHERE expires_at <= $1 LIMIT $2)`, now, limit)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// Secret implements airlock.SessionStore.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	for {
		var v []byte
		err := s.pool.QueryRow(ctx, `WITH ins AS (
				INSERT INTO airlock_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value)
			SELECT value FROM ins UNION ALL SELECT value FROM airlock_secrets WHERE name = $1 LIMIT 1`, name, fresh).Scan(&v)
		// No row: another replica's insert committed after this
		// statement's snapshot was taken; the next one sees it.
		if !isNoRows(err) || ctx.Err() != nil {
			return v, err
		}
	}
}
