package actors

import (
	"testing"

	"github.com/google/uuid"
)

// Two tenants' servers of one module name are two servers; a removal forgets a name only if it still
// names the server removed, and a tenant's map goes with its last name.
func TestModuleIndexKeepsTenantsApartAndRemovesOnlyItsOwnServer(t *testing.T) {
	m := moduleIndex{}
	a, b := moduleKey{uuid.New(), "billing"}, moduleKey{uuid.New(), "billing"}
	ida, idb, later := uuid.New(), uuid.New(), uuid.New()
	m.put(a, ida)
	m.put(b, idb)
	if got, ok := m.get(a); !ok || got != ida {
		t.Fatalf("tenant a's billing: %v %v, want %v", got, ok, ida)
	}
	if got, ok := m.get(b); !ok || got != idb {
		t.Fatalf("tenant b's billing: %v %v, want %v", got, ok, idb)
	}
	m.put(a, later) // the name now names a later server
	m.remove(a, ida)
	if got, ok := m.get(a); !ok || got != later {
		t.Fatalf("removing the earlier server forgot the later one: %v %v", got, ok)
	}
	m.remove(a, later)
	if _, ok := m.get(a); ok {
		t.Fatal("the later server's removal left its name")
	}
	if _, ok := m[a.tenantID]; ok {
		t.Error("a tenant without names kept its map")
	}
	if got, ok := m.get(b); !ok || got != idb {
		t.Errorf("tenant a's removals touched tenant b's billing: %v %v", got, ok)
	}
	m.reserve(b.tenantID, 100) // a tenant with names keeps its map
	if got, ok := m.get(b); !ok || got != idb {
		t.Errorf("reserve replaced a tenant's map: %v %v", got, ok)
	}
}
