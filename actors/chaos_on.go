//go:build chaos

package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// Crash makes the actor that receives it panic: the chaos hook, compiled only with -tags chaos so that
// tests can kill actors from inside a process where nothing outside can reach them.
type Crash struct{}

func handleChaos(ctx actor.Context) {
	if _, ok := ctx.Message().(*Crash); ok {
		panic("chaos: crash requested")
	}
}

// CrashServer panics the actor of serverID (it is restarted by the fleet's supervisor strategy).
func (f *Fleet) CrashServer(serverID uuid.UUID) { f.system.Root.Send(f.serverPID(serverID), &Crash{}) }

// StopServer stops the actor of serverID outright (the fleet respawns it).
func (f *Fleet) StopServer(serverID uuid.UUID) { f.system.Root.Stop(f.serverPID(serverID)) }

// PoisonServer poisons the actor of serverID (it drains its mailbox first; the fleet respawns it).
func (f *Fleet) PoisonServer(serverID uuid.UUID) { f.system.Root.Poison(f.serverPID(serverID)) }

// CrashWriter panics the durable-command writer.
func (f *Fleet) CrashWriter() { f.system.Root.Send(f.writer, &Crash{}) }

// CrashStamper panics the heartbeat stamper.
func (f *Fleet) CrashStamper() { f.system.Root.Send(f.stamper, &Crash{}) }

// CrashAlerts panics the alert dispatcher.
func (f *Fleet) CrashAlerts() { f.system.Root.Send(f.alerts, &Crash{}) }
