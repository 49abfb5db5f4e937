package persistence

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LegacyCredential is a server's credential still sealed in the legacy format (its first byte is 1,
// secrets.FormatLegacy), with the endpoint its row has now.
type LegacyCredential struct {
	TenantID   uuid.UUID
	ServerID   uuid.UUID
	Endpoint   string // "" when none is configured
	Credential []byte
}

// LegacyCredentials returns every tenant's credentials sealed in the legacy format, tenant by tenant
// under row-level security. The partial index of migration 0013 finds them without reading the table, so
// once they are sealed again this costs one index probe per tenant.
func (s *Store) LegacyCredentials(ctx context.Context) ([]LegacyCredential, error) {
	tenants, err := s.TenantIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("legacy credentials: %w", err)
	}
	var out []LegacyCredential
	for _, t := range tenants {
		err := s.InTenant(ctx, t, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT server_id, coalesce(endpoint, ''), credential FROM server_config
				WHERE substring(credential FROM 1 FOR 1) = '\x01'::bytea ORDER BY server_id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				c := LegacyCredential{TenantID: t}
				if err := rows.Scan(&c.ServerID, &c.Endpoint, &c.Credential); err != nil {
					return err
				}
				out = append(out, c)
			}
			return rows.Err()
		})
		if err != nil {
			return nil, fmt.Errorf("legacy credentials: %w", err)
		}
	}
	return out, nil
}

// ReplaceCredential sets the credential of one server of tenantID to sealed if it is still old and the
// endpoint is still endpoint (a compare-and-set: an edit made meanwhile wins, and a credential is never
// sealed for an endpoint the row no longer has). It reports whether the row was changed. It is not an
// operator edit: updated_at is left alone.
func (s *Store) ReplaceCredential(ctx context.Context, tenantID, serverID uuid.UUID, endpoint string, old, sealed []byte) (bool, error) {
	var n int64
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE server_config SET credential = $4
			WHERE server_id = $1 AND coalesce(endpoint, '') = $2 AND credential = $3`, serverID, endpoint, old, sealed)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("replace credential: %w", err)
	}
	return n == 1, nil
}
