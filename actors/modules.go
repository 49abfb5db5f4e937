package actors

import "github.com/google/uuid"

// moduleIndex finds the server of a (tenant, module name): the fleet's, which serialises every first
// registration and configuration of a name through it. It holds one map of module names per tenant,
// so a server's entry is its name and id — 32 bytes a slot — and not its tenant's id again as well (48
// with moduleKey as the key): at 250,000 servers of a tenant, ~4 MB less of a map that is held for
// good. Not safe for concurrent use (the fleet actor's own).
type moduleIndex map[uuid.UUID]map[string]uuid.UUID

// get returns the server of k.
func (m moduleIndex) get(k moduleKey) (uuid.UUID, bool) {
	id, ok := m[k.tenantID][k.moduleName]
	return id, ok
}

// put makes id the server of k.
func (m moduleIndex) put(k moduleKey, id uuid.UUID) {
	names := m[k.tenantID]
	if names == nil {
		names = map[string]uuid.UUID{}
		m[k.tenantID] = names
	}
	names[k.moduleName] = id
}

// reserve sizes the map of tenantID's names for n servers, if the tenant has none yet: a fleet that
// takes in a tenant's servers at once (a start's load) sizes it once instead of growing it.
func (m moduleIndex) reserve(tenantID uuid.UUID, n int) {
	if m[tenantID] == nil && n > 0 {
		m[tenantID] = make(map[string]uuid.UUID, n)
	}
}

// remove forgets k if id is its server (a later server of the name is left alone), and the tenant's
// map with its last name.
func (m moduleIndex) remove(k moduleKey, id uuid.UUID) {
	names := m[k.tenantID]
	if got, ok := names[k.moduleName]; !ok || got != id {
		return
	}
	delete(names, k.moduleName)
	if len(names) == 0 {
		delete(m, k.tenantID)
	}
}
