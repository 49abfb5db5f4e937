package persistence

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Role is what an API key may do.
type Role string

// The three roles. module: register, heartbeat, deregister, read; operator: read everything in its
// tenant, enable and disable tools; admin: everything.
const (
	RoleModule   Role = "module"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

// ParseRole returns the role named s or an error naming the allowed values.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleModule, RoleOperator, RoleAdmin:
		return Role(s), nil
	}
	return "", fmt.Errorf("unknown role %q: want module, operator or admin", s)
}

// Principal is who an API key speaks for.
type Principal struct {
	KeyID    uuid.UUID
	TenantID uuid.UUID
	Role     Role
	// Modules are the module names a module key is bound to (apikey create --module); empty for an
	// unbound key and for every other role. See MayAct.
	Modules ModuleNames
}

// ModuleNames is a set of module names kept as one string (the names joined by ",", which a module name
// cannot contain), so that a Principal stays comparable.
type ModuleNames string

// NewModuleNames returns the set of names.
func NewModuleNames(names []string) ModuleNames { return ModuleNames(strings.Join(names, ",")) }

// List returns the names, nil for none.
func (m ModuleNames) List() []string {
	if m == "" {
		return nil
	}
	return strings.Split(string(m), ",")
}

// Contains reports whether name is one of the names.
func (m ModuleNames) Contains(name string) bool { return m != "" && slices.Contains(m.List(), name) }

// apiKeyPrefix starts every key, so a leaked key is recognisable by secret scanners.
const apiKeyPrefix = "mcpf_"

// GenerateAPIKey returns a new random key (256 bits of entropy) and its stored hash.
func GenerateAPIKey() (key string, hash []byte, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("generate key: %w", err)
	}
	key = apiKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashAPIKey(key), nil
}

// HashAPIKey returns the stored form of key: SHA-256. Keys are high-entropy random strings, so a fast
// hash is as strong as a slow one here, and it keeps the check cheap on the heartbeat path.
func HashAPIKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// WellFormedAPIKey reports whether key has the shape GenerateAPIKey produces, so obviously wrong keys are
// refused without a database round trip.
func WellFormedAPIKey(key string) bool {
	rest, ok := strings.CutPrefix(key, apiKeyPrefix)
	return ok && len(rest) == 43
}

// LookupKey resolves a key's hash to its principal through auth_lookup_key (the runtime role cannot read
// api_keys). It returns ErrNotFound for an unknown or revoked key.
func (s *Store) LookupKey(ctx context.Context, hash []byte) (Principal, error) {
	var p Principal
	var role string
	var modules []string
	err := s.pool.QueryRow(ctx, `SELECT key_id, tenant_id, role, modules FROM auth_lookup_key($1)`, hash).Scan(&p.KeyID, &p.TenantID, &role, &modules)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrNotFound
	}
	if err != nil {
		return Principal{}, fmt.Errorf("lookup key: %w", err)
	}
	p.Role = Role(role)
	p.Modules = NewModuleNames(modules)
	return p, nil
}
