package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// pidCache keeps, by server id, the PID that callers outside the actors (Fleet.Heartbeat, askServer)
// send to a server's actor with. A PID made afresh for each message costs its id string (formatted and
// concatenated) and, on every send, protoactor's registry look-up of that 42-byte string (two hashes of
// it and a locked map); a kept PID carries a pointer to the actor's process, which protoactor checks
// and renews itself when the process dies (a respawned actor is found again by id). It is a cache:
// losing an entry costs a look-up, never a message. The fleet forgets the servers it forgets (remove,
// forgetShards), and a send that found no such server forgets its id (noActor), so it holds at most
// the servers that exist and were spoken to.
type pidCache struct {
	m sync.Map // uuid.UUID → *actor.PID
}

// get returns server id's PID, under the fleet actor fleet of system.
func (c *pidCache) get(system *actor.ActorSystem, fleet *actor.PID, id uuid.UUID) *actor.PID {
	if p, ok := c.m.Load(id); ok {
		return p.(*actor.PID)
	}
	p, _ := c.m.LoadOrStore(id, actor.NewPID(system.Address(), fleet.Id+"/"+id.String()))
	return p.(*actor.PID)
}

// forget drops server id's PID.
func (c *pidCache) forget(id uuid.UUID) { c.m.Delete(id) }
