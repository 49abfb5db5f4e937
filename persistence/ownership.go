package persistence

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Origin says who created a server, which settles who may change it and whose catalogue it is. It is
// stored in server_config.origin and never changes.
type Origin string

// The two origins.
const (
	// OriginModule: the server registered itself (POST /v1/mcp/servers/register). Its catalogue is its
	// capability advertisement; a catalogue import is refused.
	OriginModule Origin = "module"
	// OriginAdmin: an administrator configured it (POST /v1/mcp/servers). Its catalogue is what an
	// import read with tools/list; a registration never touches it.
	OriginAdmin Origin = "admin"
)

// Catalogue sources, one per origin (Origin.CatalogueSource).
const (
	CatalogueAdvertisement = "advertisement"
	CatalogueImport        = "import"
)

// CatalogueSource names the one source that writes the server's tools.
func (o Origin) CatalogueSource() string {
	if o == OriginAdmin {
		return CatalogueImport
	}
	return CatalogueAdvertisement
}

// Errors of ownership and quotas.
var (
	// ErrNotOwned: the key may not change this server (a module key and an administrator's server, or a
	// server of a module name the key is not bound to).
	ErrNotOwned = errors.New("server not owned by this key")
	// ErrServerLimit: the tenant has as many servers as the configured limit allows.
	ErrServerLimit = errors.New("servers per tenant limit reached")
	// ErrCatalogueSource: the server's catalogue comes from its capability advertisement, so an import
	// may not write it.
	ErrCatalogueSource = errors.New("the catalogue is owned by the server's advertisement")
)

// Action is what a key does to a server's registration.
type Action int

// The three actions of the module API.
const (
	ActRegister Action = iota
	ActHeartbeat
	ActDeregister
)

// MayAct reports whether p may take action a on the server named module whose origin is o (a server
// that does not exist yet is registered with OriginModule). The rules:
//   - an admin key may do everything;
//   - an operator key may do none of them;
//   - a module key bound to module names acts only on servers of those names: it may register, heartbeat
//     and deregister a self-registered one, and only heartbeat (push liveness for) an administrator's;
//   - an unbound module key is a tenant-wide module credential (what every key was before bindings
//     existed): it may register, heartbeat and deregister any self-registered server of its tenant, and
//     nothing of an administrator's server.
//
// Re-registering an administrator's server would rewrite its version, endpoint and catalogue, so no
// module key may do it, bound or not.
//
// An unbound key can thus re-register another module's self-registered server of its tenant. What keeps
// that from redirecting an administrator's calls is not this rule but the catalogue's: a re-registration
// that changes a tool's definition, or moves the server's endpoint, disables the affected enabled tools
// until an operator enables them again (RegisterCmd, queueRegisteredEndpoint). One mechanism covers bound
// and unbound keys alike, a module's own key if it is stolen included; what an unbound key keeps is
// the power to disturb another module's availability (deregister it), never to receive its calls.
func (p Principal) MayAct(a Action, module string, o Origin) bool {
	switch p.Role {
	case RoleAdmin:
		return true
	case RoleModule:
	default:
		return false
	}
	bound := p.Modules != ""
	if bound && !p.Modules.Contains(module) {
		return false
	}
	if o == OriginAdmin {
		return bound && a == ActHeartbeat
	}
	return true
}

var moduleNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// MaxModuleName is the longest module name.
const MaxModuleName = 128

// ValidModuleName checks the shape of a module name: 1 to MaxModuleName letters, digits, '.', '_' and
// '-', starting with a letter or digit.
func ValidModuleName(name string) error {
	switch {
	case name == "":
		return errors.New("a module name must not be empty")
	case len(name) > MaxModuleName:
		return fmt.Errorf("a module name must be at most %d characters", MaxModuleName)
	case !moduleNameRE.MatchString(name):
		return errors.New("a module name may contain only letters, digits, '.', '_' and '-', and must start with a letter or digit")
	}
	return nil
}

// ServerOwner returns the module name and origin of one server of tenantID, or ErrNotFound (also for
// another tenant's server).
func (s *Store) ServerOwner(ctx context.Context, tenantID, serverID uuid.UUID) (string, Origin, error) {
	var module, origin string
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return translate(tx.QueryRow(ctx, `SELECT m.module_name, coalesce(c.origin, 'module')
			FROM mcp_servers m LEFT JOIN server_config c ON c.server_id = m.server_id
			WHERE m.server_id = $1`, serverID).Scan(&module, &origin))
	})
	if err != nil {
		return "", "", fmt.Errorf("server owner: %w", err)
	}
	return module, Origin(origin), nil
}

// ServerOwners calls fn with the module name and origin of every server of tenantID, read in one query
// in one read-only transaction: the warm-up of the API's owner cache after a start, so a fleet's first
// heartbeats after a restart or a failover cost a map lookup each, not a transaction each. fn must not
// block on the database.
func (s *Store) ServerOwners(ctx context.Context, tenantID uuid.UUID, fn func(serverID uuid.UUID, module string, origin Origin)) error {
	err := inTenantTx(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT m.server_id, m.module_name, coalesce(c.origin, 'module')
			FROM mcp_servers m LEFT JOIN server_config c ON c.server_id = m.server_id`)
		if err != nil {
			return err
		}
		var (
			id             uuid.UUID
			module, origin string
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &module, &origin}, func() error {
			fn(id, module, Origin(origin))
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("server owners: %w", err)
	}
	return nil
}
