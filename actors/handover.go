package actors

import (
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// handover passes a server's record to the incarnation of its actor that the shared server Props'
// producer makes. A producer is not told which actor it produces, so one Props per server would be
// needed to close over the record (~420 bytes a server: the Props, its closure, its options); instead
// the record is put here, under the actor's PID id, by whoever is about to make an incarnation:
//   - the fleet, before it spawns the server's actor (spawn);
//   - the failing incarnation, on Restarting (the supervisor's restart makes the next one in place).
//
// The new incarnation takes its record on Started, the first message it gets (protoactor delivers
// Started before any user message, on spawn and on restart). An entry lives from put to that Started:
// the map is empty at rest.
type handover struct {
	mu   sync.Mutex
	recs map[string]*serverRecord
}

func newHandover() *handover { return &handover{recs: map[string]*serverRecord{}} }

// put hands rec to the next incarnation of the actor named pidID.
func (h *handover) put(pidID string, rec *serverRecord) {
	h.mu.Lock()
	h.recs[pidID] = rec
	h.mu.Unlock()
}

// take returns the record handed to the actor named pidID and forgets it; nil if there is none.
func (h *handover) take(pidID string) *serverRecord {
	h.mu.Lock()
	rec := h.recs[pidID]
	delete(h.recs, pidID)
	h.mu.Unlock()
	return rec
}

// newServerProps is the one Props every server actor is spawned with (see handover).
func newServerProps(deps *serverDeps) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &serverActor{deps: deps}
	}, actor.WithMailbox(unboundedMailbox()), actor.WithDispatcher(deps.workers))
}

// claimRecord gives a new incarnation its record, on Started.
func (a *serverActor) claimRecord(ctx actor.Context) {
	if a.rec != nil {
		return
	}
	if a.rec = a.deps.handover.take(ctx.Self().Id); a.rec == nil {
		// A bug, not a condition: every incarnation is made after a put.
		panic(fmt.Sprintf("server actor %s started without its record", ctx.Self().Id))
	}
}
