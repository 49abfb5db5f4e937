package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// pidCache keeps, by server id, the PID of each running server actor — the one its spawn returned, which
// is also the actor's own — for the callers outside the actors that send to it (Fleet.Heartbeat,
// askServer). A PID made afresh for each message costs its id string (formatted and concatenated) and,
// on every send, protoactor's registry look-up of that 42-byte string (two hashes of it and a locked
// map); a kept PID carries a pointer to the actor's process, which protoactor checks and renews itself
// when the process dies. It is a cache: a server not in it is sent to with a fresh PID (its actor may be
// dormant), which costs the look-up, never a message. The fleet actor puts the PID of every actor it
// spawns and forgets the servers it forgets (remove, forgetShards), so an id nobody spawned — another
// tenant's guess, a server gone — never enters it. An entry is ~60 bytes (the PID and its id string are
// the actor's own).
type pidCache struct {
	shards [pidShards]pidShard
}

// pidShards splits the cache so that the HTTP goroutines' look-ups do not share one lock (plain maps:
// a sync.Map entry costs ~250 bytes in its trie nodes).
const pidShards = 64

type pidShard struct {
	mu sync.RWMutex
	m  map[uuid.UUID]*actor.PID
}

func (c *pidCache) shard(id uuid.UUID) *pidShard { return &c.shards[id[0]%pidShards] }

// get returns server id's kept PID, or a fresh one under the fleet actor fleet of system.
func (c *pidCache) get(system *actor.ActorSystem, fleet *actor.PID, id uuid.UUID) *actor.PID {
	sh := c.shard(id)
	sh.mu.RLock()
	p := sh.m[id]
	sh.mu.RUnlock()
	if p != nil {
		return p
	}
	return actor.NewPID(system.Address(), fleet.Id+"/"+id.String())
}

// put keeps pid as server id's.
func (c *pidCache) put(id uuid.UUID, pid *actor.PID) {
	sh := c.shard(id)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = map[uuid.UUID]*actor.PID{}
	}
	sh.m[id] = pid
	sh.mu.Unlock()
}

// has reports whether server id's PID is kept.
func (c *pidCache) has(id uuid.UUID) bool {
	sh := c.shard(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[id] != nil
}

// forget drops server id's PID.
func (c *pidCache) forget(id uuid.UUID) {
	sh := c.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}
