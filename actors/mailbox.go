package actors

import (
	"runtime"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// unboundedMailbox is the mailbox of every actor here: unbounded (a full bounded mailbox blocks the
// sender) and lock-free, which is also the smallest per idle actor (protoactor.md), gated (gatedMailbox).
func unboundedMailbox() actor.MailboxProducer {
	inner := actor.UnboundedLockfree()
	return func() actor.Mailbox { return &gatedMailbox{Mailbox: inner()} }
}

// gatedMailbox holds other senders off a mailbox until its actor is set up. protoactor's spawn makes
// the process findable by name (its registry entry) before it gives the mailbox its invoker and
// dispatcher and posts Started: a message sent by name in that window — a heartbeat to a server actor
// being respawned or woken from dormancy — read the mailbox's dispatcher while the spawn wrote it (a
// data race; a nil dispatcher), and could run before Started. A post waits, yielding, until the spawn
// has registered the handlers (a system message) or started the mailbox (a user message: Started is
// queued before that). The wait is the spawn's few microseconds and only in that window; afterwards a
// post costs one atomic load.
type gatedMailbox struct {
	actor.Mailbox
	state atomic.Int32 // 0 made, 1 handlers registered, 2 started
}

func (m *gatedMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(invoker, dispatcher)
	m.state.Store(1)
}

func (m *gatedMailbox) Start() {
	m.Mailbox.Start()
	m.state.Store(2)
}

func (m *gatedMailbox) PostSystemMessage(msg any) {
	m.await(1)
	m.Mailbox.PostSystemMessage(msg)
}

func (m *gatedMailbox) PostUserMessage(msg any) {
	m.await(2)
	m.Mailbox.PostUserMessage(msg)
}

func (m *gatedMailbox) await(state int32) {
	for m.state.Load() < state {
		runtime.Gosched()
	}
}
