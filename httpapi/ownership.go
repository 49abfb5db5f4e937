package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// ownerLookup reads who owns a server.
type ownerLookup interface {
	ServerOwner(ctx context.Context, tenantID, serverID uuid.UUID) (string, persistence.Origin, error)
}

// serverOwner is what decides which module keys may act on a server. Both fields never change for a
// server_id, so a cached answer never goes stale.
type serverOwner struct {
	module string
	origin persistence.Origin
}

// owners caches who owns each server, by server_id, for the module keys' actions on a server
// (heartbeat, deregistration), so a heartbeat costs a map lookup, not a database round trip, and a
// deregistration one round trip less. At most max entries are held; past that one arbitrary entry is
// dropped per insertion (it is read again on its next use). An entry is held for every server a module
// key acts on — 250,000 and more — so it is kept to 24 bytes (cachedOwner): the tenant as its index in
// tenants, the origin as a flag.
type owners struct {
	lookup ownerLookup
	max    int

	mu      sync.RWMutex
	cache   map[uuid.UUID]cachedOwner
	tenants []uuid.UUID          // by index: the tenants of the servers cached (a few; never forgotten)
	index   map[uuid.UUID]uint32 // tenants' indexes
}

// cachedOwner is a serverOwner as the cache holds it, with its server's tenant.
type cachedOwner struct {
	module string
	tenant uint32 // owners.tenants' index
	admin  bool   // origin: OriginAdmin, else OriginModule
}

func newOwners(lookup ownerLookup, max int) *owners {
	return &owners{lookup: lookup, max: max, cache: map[uuid.UUID]cachedOwner{}, index: map[uuid.UUID]uint32{}}
}

// get returns the owner of serverID in tenantID, from the cache when it holds it (an owner never
// changes) and from the database otherwise. It returns persistence.ErrNotFound for no such server in the
// tenant (another tenant's server is the same as none).
func (o *owners) get(ctx context.Context, tenantID, serverID uuid.UUID) (serverOwner, error) {
	o.mu.RLock()
	e, ok := o.cache[serverID]
	var tenant uuid.UUID
	if ok {
		tenant = o.tenants[e.tenant]
	}
	o.mu.RUnlock()
	if ok {
		if tenant != tenantID {
			return serverOwner{}, persistence.ErrNotFound
		}
		own := serverOwner{module: e.module, origin: persistence.OriginModule}
		if e.admin {
			own.origin = persistence.OriginAdmin
		}
		return own, nil
	}
	module, origin, err := o.lookup.ServerOwner(ctx, tenantID, serverID)
	if err != nil {
		return serverOwner{}, err
	}
	own := serverOwner{module: module, origin: origin}
	o.put(tenantID, serverID, own)
	return own, nil
}

// entryLocked is the cache's entry of own in tenantID, the tenant indexed if it is new. o.mu is held.
func (o *owners) entryLocked(tenantID uuid.UUID, own serverOwner) cachedOwner {
	i, ok := o.index[tenantID]
	if !ok {
		i = uint32(len(o.tenants))
		o.tenants = append(o.tenants, tenantID)
		o.index[tenantID] = i
	}
	return cachedOwner{module: own.module, tenant: i, admin: own.origin == persistence.OriginAdmin}
}

// ownerLister reads every server's owner of a tenant at once (persistence.Store.ServerOwners).
type ownerLister interface {
	ServerOwners(ctx context.Context, tenantID uuid.UUID, fn func(serverID uuid.UUID, module string, origin persistence.Origin)) error
}

// warm fills the cache with the owners of every server of tenants, up to its bound, without evicting
// anything: the answers never go stale, so an entry cached meanwhile by a lookup is as good. It returns
// how many it cached; on an error the cache keeps what was read and lookups fill the rest as they come.
func (o *owners) warm(ctx context.Context, lister ownerLister, tenants []uuid.UUID) (int, error) {
	n := 0
	for _, t := range tenants {
		err := lister.ServerOwners(ctx, t, func(id uuid.UUID, module string, origin persistence.Origin) {
			o.mu.Lock()
			if _, ok := o.cache[id]; !ok && len(o.cache) < o.max {
				o.cache[id] = o.entryLocked(t, serverOwner{module: module, origin: origin})
				n++
			}
			o.mu.Unlock()
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// WarmOwners reads the owner of every server of tenants into the heartbeat path's owner cache in one
// query per tenant, so the fleet's first heartbeats after a start (a restart, a failover) cost no
// database transaction each. It returns how many owners it cached. A store that cannot list owners
// warms nothing. Heartbeats served meanwhile look their owner up as they always do.
func (s *Server) WarmOwners(ctx context.Context, tenants []uuid.UUID) (int, error) {
	lister, ok := s.deps.Store.(ownerLister)
	if !ok {
		return 0, nil
	}
	return s.owners.warm(ctx, lister, tenants)
}

// put caches own as the owner of serverID in tenantID.
func (o *owners) put(tenantID, serverID uuid.UUID, own serverOwner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.cache[serverID]; !ok && len(o.cache) >= o.max {
		for k := range o.cache {
			delete(o.cache, k)
			break
		}
	}
	o.cache[serverID] = o.entryLocked(tenantID, own)
}

// notOwned is the refusal of an action on a server the key does not own. It is only ever given for a
// server of the caller's own tenant: another tenant's server answers as an unknown one.
func notOwned(detail string) *Problem {
	return problem(http.StatusForbidden, "server_not_owned", detail)
}

// authorizeOn checks that p may take action a on serverID. Admin keys skip the lookup. An unknown server
// (or another tenant's) passes, so the fleet answers it as it does today (404 server_not_registered).
func (s *Server) authorizeOn(ctx context.Context, p persistence.Principal, a persistence.Action, serverID uuid.UUID) error {
	if p.Role == persistence.RoleAdmin {
		return nil
	}
	own, err := s.owners.get(ctx, p.TenantID, serverID)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return nil
	case persistence.IsTransient(err):
		return unavailable("the server's owner could not be checked right now: retry", 2*time.Second, err)
	case err != nil:
		return internalError(err)
	}
	if p.MayAct(a, own.module, own.origin) {
		return nil
	}
	if own.origin == persistence.OriginAdmin {
		return notOwned("an administrator configured this server: a module key may only heartbeat it, and only if it is bound to its module name")
	}
	return notOwned("this API key is bound to other module names than this server's")
}
