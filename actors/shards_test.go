package actors

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/shard"
)

// TestNewServerIDIsInItsModulesShard: a new server id is in its module's shard (the rule the cluster's
// ownership rests on), a random version 4 id, different each time; across many modules every shard
// is reached. Without the chosen last byte (a plain uuid.New) the shard check fails for ~63 of 64.
func TestNewServerIDIsInItsModulesShard(t *testing.T) {
	tenant := uuid.New()
	seen := map[uuid.UUID]bool{}
	shards := map[int]bool{}
	for i := range 5000 {
		key := moduleKey{tenantID: tenant, moduleName: fmt.Sprintf("m-%d", i)}
		id := newServerID(key)
		if got, want := shard.Of(id), ModuleShard(tenant, key.moduleName); got != want {
			t.Fatalf("module %s: id %s in shard %d, want %d", key.moduleName, id, got, want)
		}
		if id.Version() != 4 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("id %s: version %d variant %v", id, id.Version(), id.Variant())
		}
		if seen[id] {
			t.Fatalf("id %s drawn twice", id)
		}
		seen[id] = true
		shards[shard.Of(id)] = true
	}
	if len(shards) != shard.Count {
		t.Fatalf("%d of %d shards reached", len(shards), shard.Count)
	}
}
