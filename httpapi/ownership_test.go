package httpapi

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// ownerStore answers single lookups (counted) and whole-tenant listings from one table.
type ownerStore struct {
	servers map[uuid.UUID]storedOwner
	lookups atomic.Int64
	failAt  int // ServerOwners fails after this many rows (0: never)
}

type storedOwner struct {
	tenantID uuid.UUID
	module   string
	origin   persistence.Origin
}

func (s *ownerStore) ServerOwner(_ context.Context, tenantID, serverID uuid.UUID) (string, persistence.Origin, error) {
	s.lookups.Add(1)
	e, ok := s.servers[serverID]
	if !ok || e.tenantID != tenantID {
		return "", "", persistence.ErrNotFound
	}
	return e.module, e.origin, nil
}

func (s *ownerStore) ServerOwners(_ context.Context, tenantID uuid.UUID, fn func(uuid.UUID, string, persistence.Origin)) error {
	n := 0
	for id, e := range s.servers {
		if e.tenantID != tenantID {
			continue
		}
		if s.failAt > 0 && n == s.failAt {
			return errors.New("connection lost")
		}
		fn(id, e.module, e.origin)
		n++
	}
	return nil
}

// TestWarmOwnersSparesTheFirstHeartbeats: after the warm-up a heartbeat's owner check is a map lookup
// for every server of the tenants warmed — no database round trip — and another tenant's server is
// still none of the caller's; the cache's bound holds and a failed warm-up keeps what it read.
func TestWarmOwnersSparesTheFirstHeartbeats(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	st := &ownerStore{servers: map[uuid.UUID]storedOwner{}}
	var ofA, ofB []uuid.UUID
	for i := range 50 {
		id, tenant, module, origin := uuid.New(), a, "m", persistence.OriginModule
		if i%5 == 0 {
			tenant, module, origin = b, "admins", persistence.OriginAdmin
			ofB = append(ofB, id)
		} else {
			ofA = append(ofA, id)
		}
		st.servers[id] = storedOwner{tenantID: tenant, module: module, origin: origin}
	}
	o := newOwners(st, 1000)
	n, err := o.warm(context.Background(), st, []uuid.UUID{a, b})
	if err != nil || n != 50 {
		t.Fatalf("warm: %d cached, %v", n, err)
	}
	for _, id := range ofA {
		if e, err := o.get(context.Background(), a, id); err != nil || e.module != "m" {
			t.Fatalf("heartbeat owner of %s: %+v %v", id, e, err)
		}
		if _, err := o.get(context.Background(), b, id); !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("tenant b sees tenant a's server: %v", err)
		}
	}
	for _, id := range ofB {
		if e, err := o.get(context.Background(), b, id); err != nil || e != (serverOwner{module: "admins", origin: persistence.OriginAdmin}) {
			t.Fatalf("tenant b's administrator's server %s: %+v %v", id, e, err)
		}
		if _, err := o.get(context.Background(), a, id); !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("tenant a sees tenant b's server: %v", err)
		}
	}
	if n := st.lookups.Load(); n != 0 {
		t.Fatalf("%d database lookups after the warm-up, want 0", n)
	}

	bounded := newOwners(st, 10)
	if n, _ := bounded.warm(context.Background(), st, []uuid.UUID{a, b}); n != 10 || len(bounded.cache) != 10 {
		t.Fatalf("bound 10: cached %d, holds %d", n, len(bounded.cache))
	}

	st.failAt = 7
	partial := newOwners(st, 1000)
	if n, err := partial.warm(context.Background(), st, []uuid.UUID{a}); err == nil || n != 7 || len(partial.cache) != 7 {
		t.Fatalf("failed warm-up: cached %d, holds %d, err %v", n, len(partial.cache), err)
	}
}

// serverWithOwner is an API over a store that holds one server, id of tenant, of module and origin.
func serverWithOwner(module string, origin persistence.Origin) (s *Server, st *ownerStore, tenant, id uuid.UUID) {
	tenant, id = uuid.New(), uuid.New()
	st = &ownerStore{servers: map[uuid.UUID]storedOwner{id: {tenantID: tenant, module: module, origin: origin}}}
	return &Server{owners: newOwners(st, 10)}, st, tenant, id
}

// A module key's deregistration is checked against the cached owner, as its heartbeats are (an owner
// never changes): one database lookup for a server however many actions follow, and the cached answer
// refuses what the database's would — a key bound to another module, another tenant's server.
func TestDeregistrationUsesTheCachedOwner(t *testing.T) {
	s, st, tenant, id := serverWithOwner("m", persistence.OriginModule)
	ctx := context.Background()
	key := persistence.Principal{TenantID: tenant, Role: persistence.RoleModule, Modules: "m"}
	for _, a := range []persistence.Action{persistence.ActHeartbeat, persistence.ActDeregister, persistence.ActDeregister} {
		if err := s.authorizeOn(ctx, key, a, id); err != nil {
			t.Fatalf("action %v of the module's own key: %v", a, err)
		}
	}
	other := persistence.Principal{TenantID: tenant, Role: persistence.RoleModule, Modules: "n"}
	var p *Problem
	if err := s.authorizeOn(ctx, other, persistence.ActDeregister, id); !errors.As(err, &p) || p.Status != 403 {
		t.Fatalf("a key bound to another module deregisters: %v", err)
	}
	if n := st.lookups.Load(); n != 1 {
		t.Fatalf("%d owner lookups for one server, want 1", n)
	}
	// Another tenant's key: the cached owner says none of its servers (the fleet then answers 404).
	if _, err := s.owners.get(ctx, uuid.New(), id); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("another tenant sees the server: %v", err)
	}
}

// An administrator's server keeps its origin in the cache: the second decision, from the cache, is the
// first's, from the database — a bound key may only heartbeat it, an unbound one nothing.
func TestCachedOwnerKeepsAnAdministratorsServer(t *testing.T) {
	s, st, tenant, id := serverWithOwner("gw", persistence.OriginAdmin)
	ctx := context.Background()
	bound := persistence.Principal{TenantID: tenant, Role: persistence.RoleModule, Modules: "gw"}
	unbound := persistence.Principal{TenantID: tenant, Role: persistence.RoleModule}
	for try := range 2 {
		if err := s.authorizeOn(ctx, bound, persistence.ActHeartbeat, id); err != nil {
			t.Fatalf("try %d: the bound key's heartbeat: %v", try, err)
		}
		var p *Problem
		if err := s.authorizeOn(ctx, bound, persistence.ActDeregister, id); !errors.As(err, &p) || p.Status != 403 {
			t.Fatalf("try %d: the bound key deregisters an administrator's server: %v", try, err)
		}
		if err := s.authorizeOn(ctx, unbound, persistence.ActHeartbeat, id); !errors.As(err, &p) || p.Status != 403 {
			t.Fatalf("try %d: an unbound key heartbeats an administrator's server: %v", try, err)
		}
	}
	if n := st.lookups.Load(); n != 1 {
		t.Fatalf("%d owner lookups, want 1 (the rest from the cache)", n)
	}
}
