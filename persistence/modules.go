package persistence

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ServerIDByModule returns the id of tenantID's server under moduleName, of any status, or ErrNotFound.
// The cluster routes a registration with it: to the owner of that server's shard when the module is
// known, to the owner of the module's own shard when it is not.
func (s *Store) ServerIDByModule(ctx context.Context, tenantID uuid.UUID, moduleName string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return translate(tx.QueryRow(ctx, `SELECT server_id FROM mcp_servers WHERE module_name = $1`, moduleName).Scan(&id))
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("server by module: %w", err)
	}
	return id, nil
}
