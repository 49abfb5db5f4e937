package persistence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		registerUUID(conn.TypeMap())
		return nil
	}
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
	KeyID   uuid.UUID `json:"key_id"`
	APIKey  string    `json:"api_key"`
	Role    Role      `json:"role"`
	Modules []string  `json:"modules,omitempty"`
}

// CreateAPIKey creates a key for tenantID with role, bound to modules (module keys only; none: unbound,
// see Principal.MayAct). It returns ErrNotFound if the tenant does not exist, and an error naming the
// problem for a bad role or module name.
func (a *Admin) CreateAPIKey(ctx context.Context, tenantID uuid.UUID, role Role, modules ...string) (CreatedKey, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return CreatedKey{}, fmt.Errorf("create api key: %w", err)
	}
	if len(modules) > 0 && role != RoleModule {
		return CreatedKey{}, fmt.Errorf("create api key: only a module key can be bound to module names, not a %s key", role)
	}
	bound := []string{}
	for _, m := range modules {
		if err := ValidModuleName(m); err != nil {
			return CreatedKey{}, fmt.Errorf("create api key: module %q: %w", m, err)
		}
		if !slices.Contains(bound, m) {
			bound = append(bound, m)
		}
	}
	key, hash, err := GenerateAPIKey()
	if err != nil {
		return CreatedKey{}, err
	}
	out := CreatedKey{KeyID: uuid.New(), APIKey: key, Role: role}
	if len(bound) > 0 {
		out.Modules = bound
	}
	err = a.inTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, tenant_id, role, key_hash, modules) VALUES ($1, $2, $3, $4, $5)`,
			out.KeyID, tenantID, string(role), hash, bound)
		return err
	})
	if err != nil {
		return CreatedKey{}, fmt.Errorf("create api key: %w", err)
	}
	return out, nil
}

// inTenant runs fn in a transaction scoped to tenantID, or returns ErrNotFound if there is no such tenant.
func (a *Admin) inTenant(ctx context.Context, tenantID uuid.UUID, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenantID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		if err := SetTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		return fn(tx)
	})
}

// KeyInfo describes an API key without its secret.
type KeyInfo struct {
	KeyID     uuid.UUID  `json:"key_id"`
	TenantID  uuid.UUID  `json:"tenant_id"`
	Role      Role       `json:"role"`
	Modules   []string   `json:"modules"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// ListAPIKeys lists every key of tenantID, revoked ones included, oldest first. It returns ErrNotFound
// if the tenant does not exist.
func (a *Admin) ListAPIKeys(ctx context.Context, tenantID uuid.UUID) ([]KeyInfo, error) {
	var out []KeyInfo
	err := a.inTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key_id, tenant_id, role, modules, created_at, revoked_at FROM api_keys
			WHERE tenant_id = $1 ORDER BY created_at, key_id`, tenantID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyInfo, error) {
			var k KeyInfo
			var role string
			err := r.Scan(&k.KeyID, &k.TenantID, &role, &k.Modules, &k.CreatedAt, &k.RevokedAt)
			k.Role = Role(role)
			return k, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey revokes a key: it stops working within the service's key cache lifetime (30 s). Revoking
// a revoked key changes nothing and returns it with its first revocation time. It returns ErrNotFound
// for no such key.
func (a *Admin) RevokeAPIKey(ctx context.Context, keyID uuid.UUID) (KeyInfo, error) {
	var k KeyInfo
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		// api_keys has RLS enabled but not forced, so the owner finds the key before knowing its tenant.
		var role string
		err := tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = $1
			RETURNING key_id, tenant_id, role, modules, created_at, revoked_at`, keyID).
			Scan(&k.KeyID, &k.TenantID, &role, &k.Modules, &k.CreatedAt, &k.RevokedAt)
		k.Role = Role(role)
		return translate(err)
	})
	if err != nil {
		return KeyInfo{}, fmt.Errorf("revoke api key: %w", err)
	}
	return k, nil
}
