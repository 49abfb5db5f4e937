package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Admin performs owner-only operations (tenants and API keys) over MCPFLEET_ADMIN_DATABASE_URL.
type Admin struct {
	pool *pgxpool.Pool
}

// OpenAdmin connects to the database as its owner.
func OpenAdmin(ctx context.Context, adminURL string) (*Admin, error) {
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return nil, errors.New("open admin database: invalid connection string")
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open admin database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open admin database: %w", err)
	}
	return &Admin{pool: pool}, nil
}

// Close closes the connection pool.
func (a *Admin) Close() { a.pool.Close() }

// CreateTenant creates a tenant and returns its id.
func (a *Admin) CreateTenant(ctx context.Context, name string) (uuid.UUID, error) {
	if name == "" || len(name) > 200 {
		return uuid.Nil, errors.New("create tenant: name must be 1 to 200 characters")
	}
	id := uuid.New()
	if _, err := a.pool.Exec(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)`, id, name); err != nil {
		return uuid.Nil, fmt.Errorf("create tenant: %w", err)
	}
	return id, nil
}

// CreatedKey is a freshly created API key. APIKey is shown once and never stored.
type CreatedKey struct {
	KeyID  uuid.UUID `json:"key_id"`
	APIKey string    `json:"api_key"`
	Role   Role      `json:"role"`
}

// CreateAPIKey creates a key for tenantID with role. It returns ErrNotFound if the tenant does not exist.
func (a *Admin) CreateAPIKey(ctx context.Context, tenantID uuid.UUID, role Role) (CreatedKey, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return CreatedKey{}, fmt.Errorf("create api key: %w", err)
	}
	key, hash, err := GenerateAPIKey()
	if err != nil {
		return CreatedKey{}, err
	}
	out := CreatedKey{KeyID: uuid.New(), APIKey: key, Role: role}
	err = inTenantTx(ctx, a.pool, pgx.TxOptions{}, tenantID, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenantID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, tenant_id, role, key_hash) VALUES ($1, $2, $3, $4)`, out.KeyID, tenantID, string(role), hash)
		return err
	})
	if err != nil {
		return CreatedKey{}, fmt.Errorf("create api key: %w", err)
	}
	return out, nil
}
