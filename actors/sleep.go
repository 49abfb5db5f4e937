package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

// A deregistered server's actor stops once nothing has reached it for Config.DormantAfter: the server
// stays in the fleet, dormant, as a deregistered server loaded at start is (fleet.go, wake), and its
// actor is spawned again when something needs it — a heartbeat (answered 409 server_deregistered), a
// registration. Without this, every server ever registered kept its actor, mailbox and registry entry
// for as long as the process ran: a fleet whose modules come and go under new names (a pod's name, a
// blue/green deployment) grew without bound, and only a restart gave the memory back.
//
// The server actor decides (it alone knows it is idle), the fleet follows:
//  1. sleepCheck, DormantAfter after the deregistration committed (or after the start of an incarnation
//     of a deregistered server): if the server is still deregistered, idle, with nothing stashed and no
//     message since the timer was set, the actor goes asleep and tells the fleet (asleepMsg); otherwise
//     it sets the timer again, or, registered again, sets none.
//  2. Asleep, it writes nothing more: what reaches it is answered as a deregistered server answers
//     (read-only), and a registration or configuration the fleet forwarded before it read asleepMsg is
//     handed back to the fleet, as by a retired server (serverActor.retired).
//  3. The fleet, on asleepMsg from the running incarnation, stops sending to it (its PID leaves the
//     entry and the PID cache) and poisons it — the fleet, not the actor: its Terminated (a system
//     message, which protoactor handles before any user message waiting) then never reaches the fleet
//     before the asleepMsg it must be matched with, which would read as a crash and respawn the actor.
//     On the Terminated the fleet marks the server dormant. In between, a request for the server is
//     answered ErrUnavailable, as during a respawn; after, it wakes a new incarnation over the same
//     record — never two at once, so the record has one owner at a time. A message that reaches the
//     mailbox between the poison and protoactor's removal of the process is dropped by protoactor, as for
//     any actor that stops (a shard handed off): its caller is answered ErrUnavailable when its wait ends.
//     Nothing is acknowledged that did not happen.
const defaultDormantAfter = time.Minute

// sleepCheck is the actor's timer: see whether the server can go dormant.
type sleepCheck struct{}

// IgnoreDeadLetterLogging keeps a timer that fires after its actor stopped otherwise (its shard handed
// off, the fleet stopped) out of protoactor's dead-letter log: there is nothing left to check.
func (*sleepCheck) IgnoreDeadLetterLogging() {}

// asleepMsg tells the fleet that incarnation pid of server id has gone asleep: the fleet stops it.
type asleepMsg struct {
	id  uuid.UUID
	pid *actor.PID
}

// sleepLater sets the timer of a deregistered server's actor: a sleepCheck after DormantAfter. From
// now until it fires, any message the actor handles keeps it awake (quiet, see Receive).
func (a *serverActor) sleepLater(ctx actor.Context) {
	a.quiet = true
	system, self := ctx.ActorSystem(), ctx.Self()
	time.AfterFunc(a.deps.sleepAfter, func() { system.Root.Send(self, &sleepCheck{}) })
}

// sleepDecision is what a server actor does with a sleepCheck.
type sleepDecision int

const (
	stayAwake  sleepDecision = iota // registered again (or already asleep, or being replaced): no timer
	checkLater                      // deregistered but not idle, or spoken to since the timer: set it again
	goAsleep
)

// decideSleep is the rule of step 1: status is the server's, quiet whether no message reached the actor
// since its timer was set, idle whether no write is in flight and nothing is stashed, gone whether the
// actor already sleeps or is retired or being replaced.
func decideSleep(status health.Status, quiet, idle, gone bool) sleepDecision {
	switch {
	case gone || status != health.Deregistered:
		return stayAwake
	case !quiet || !idle:
		return checkLater
	}
	return goAsleep
}

// checkSleep handles the timer (step 1).
func (a *serverActor) checkSleep(ctx actor.Context) {
	switch decideSleep(a.rec.statusOf(), a.quiet, !a.busy && len(a.stash) == 0, a.asleep || a.retired || a.dead) {
	case checkLater:
		a.sleepLater(ctx)
	case goAsleep:
		a.asleep = true
		ctx.Send(ctx.Parent(), &asleepMsg{id: a.rec.id(), pid: ctx.Self()})
	}
}

// asleep is the fleet's half of step 3 on asleepMsg. A message from an incarnation it no longer runs
// changes nothing: that one has stopped already (respawned since), or is told to by handOff (forgotten
// with its shard).
func (f *fleetActor) asleep(ctx actor.Context, msg *asleepMsg) {
	e := f.entries[msg.id]
	if e == nil || e.pid == nil || !e.pid.Equal(msg.pid) {
		return
	}
	e.pid = nil
	f.deps.pids.forget(msg.id)
	f.sleeping[msg.id] = true
	ctx.Poison(msg.pid)
}

// fellAsleep is the end of step 3, on the Terminated of a server that went asleep: it is dormant now.
// It reports whether id was asleep.
func (f *fleetActor) fellAsleep(id uuid.UUID) bool {
	if !f.sleeping[id] {
		return false
	}
	delete(f.sleeping, id)
	if e := f.entries[id]; e != nil && e.pid == nil {
		e.dormant = true
		if f.onEvent != nil {
			f.onEvent("server_asleep")
		}
	}
	return true
}
