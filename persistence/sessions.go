package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A dashboard session is stored as the SHA-256 of its opaque random id (the cookie holds the id), the key
// that signed in, and an expiry. It ends at its expiry, at sign-out (revoked_at), or when its key is
// revoked.

// CreateSession stores a session of p whose id hashes to hash, valid from at until expires. It also
// purges the tenant's sessions that expired more than a day before at.
func (s *Store) CreateSession(ctx context.Context, p Principal, hash []byte, at, expires time.Time) error {
	err := s.InTenant(ctx, p.TenantID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE expires_at < $1`, at.Add(-24*time.Hour)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ui_sessions (session_hash, tenant_id, key_id, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5)`, hash, p.TenantID, p.KeyID, at, expires)
		return translate(err)
	})
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// LookupSession returns the principal of the live session whose id hashes to hash, and when the session
// expires. It returns ErrNotFound for an unknown, expired or revoked session, or one whose key was
// revoked.
func (s *Store) LookupSession(ctx context.Context, hash []byte, now time.Time) (Principal, time.Time, error) {
	var p Principal
	var role string
	var expires time.Time
	err := s.pool.QueryRow(ctx, `SELECT key_id, tenant_id, role, expires_at FROM ui_session_lookup($1, $2)`, hash, now).
		Scan(&p.KeyID, &p.TenantID, &role, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, time.Time{}, ErrNotFound
	}
	if err != nil {
		return Principal{}, time.Time{}, fmt.Errorf("lookup session: %w", err)
	}
	p.Role = Role(role)
	return p, expires, nil
}

// RevokeSession ends the session of tenantID whose id hashes to hash (sign-out). Revoking an unknown or
// already revoked session is not an error.
func (s *Store) RevokeSession(ctx context.Context, tenantID uuid.UUID, hash []byte, at time.Time) error {
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE ui_sessions SET revoked_at = $2 WHERE session_hash = $1 AND revoked_at IS NULL`, hash, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}
