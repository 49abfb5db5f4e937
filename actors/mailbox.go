package actors

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// unboundedMailbox is the mailbox of every actor here (a mailbox): unbounded (a full bounded mailbox
// blocks the sender), gated, and one allocation per actor.
func unboundedMailbox() actor.MailboxProducer {
	return func() actor.Mailbox { return &mailbox{} }
}

// mailbox is protoactor's default mailbox (actor.UnboundedLockfree) in one small object, with a gate.
//
// Size: a server actor's mailbox is held once per server, 100,000 times and more. protoactor's is six
// objects — the mailbox, two lock-free queues, each queue's node, and the gate around them — 200 bytes
// per idle actor, and it allocates a 24-byte node for every message. This one is a 96-byte object whose
// user queue is a slice under a mutex, plus the 16-byte room that queue keeps after a message: a message
// costs an append into that room, not an allocation. Its system queue exists only while it holds a
// message (system messages are rare: Started, a stop, a failure). BenchmarkServerMemory: 1,387 → 1,317
// bytes per server, then 16 fewer with the system queue made on demand. Each server actor's mailbox is
// posted to by one heartbeat every H, so the mutex is as good as uncontended; the busy actors (the
// fleet, the writer) take it twice per message, as the lock-free queue took its atomics.
//
// Semantics, as protoactor's defaultMailbox (mailbox.go of the pinned version) without its middlewares
// and MessageBatch expansion, which nothing here uses:
//   - system messages run before user messages; SuspendMailbox and ResumeMailbox are handled here, and
//     while suspended only system messages run;
//   - a run is scheduled on the dispatcher when a message arrives and none is scheduled; it handles up
//     to the dispatcher's Throughput messages between yields (runtime.Gosched), until the queues it may
//     take from are empty, and no message posted meanwhile is left without a run;
//   - a panic in the invoker is escalated (EscalateFailure, which suspends this mailbox and tells the
//     supervisor) with the message that caused it, and the run goes on with the system messages.
//
// The gate holds other senders off the mailbox until its actor is set up. protoactor's spawn makes the
// process findable by name (its registry entry) before it gives the mailbox its invoker and dispatcher
// and posts Started: a message sent by name in that window — a heartbeat to a server actor being
// respawned or woken from dormancy — read the mailbox's dispatcher while the spawn wrote it (a data race;
// a nil dispatcher), and could run before Started. A post waits, yielding, until the spawn has
// registered the handlers (a system message) or started the mailbox (a user message: Started is queued
// before that). The wait is the spawn's few microseconds and only in that window; afterwards a post
// costs one atomic load.
type mailbox struct {
	gate atomic.Int32 // 0 made, 1 handlers registered, 2 started

	mu        sync.Mutex
	scheduled bool // a run is scheduled or running
	suspended bool
	sys       *messageQueue // nil while empty
	user      messageQueue

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

var _ actor.Mailbox = (*mailbox)(nil)

// RegisterHandlers implements actor.Mailbox.
func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
	m.gate.Store(1)
}

// Start implements actor.Mailbox.
func (m *mailbox) Start() { m.gate.Store(2) }

// PostSystemMessage implements actor.Mailbox.
func (m *mailbox) PostSystemMessage(msg any) {
	m.await(1)
	m.post(true, msg)
}

// PostUserMessage implements actor.Mailbox.
func (m *mailbox) PostUserMessage(msg any) {
	m.await(2)
	m.post(false, msg)
}

// UserMessageCount implements actor.Mailbox.
func (m *mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user.len()
}

func (m *mailbox) await(gate int32) {
	for m.gate.Load() < gate {
		runtime.Gosched()
	}
}

// post queues msg, on the system queue or the user queue, and schedules a run unless one is scheduled.
func (m *mailbox) post(system bool, msg any) {
	m.mu.Lock()
	if !system {
		m.user.push(msg)
	} else {
		if m.sys == nil {
			m.sys = &messageQueue{}
		}
		m.sys.push(msg)
	}
	run := !m.scheduled
	m.scheduled = true
	m.mu.Unlock()
	if run {
		m.dispatcher.Schedule(m.process)
	}
}

// process is a scheduled run: it handles messages until none it may take is left, then marks the
// mailbox idle under the same lock a post takes, so a message posted after that schedules a new run.
func (m *mailbox) process() {
	for !m.run() {
	}
}

// run handles messages; it returns true once it has marked the mailbox idle, false after a panic was
// escalated (the caller runs again: the escalation has queued a system message).
func (m *mailbox) run() (idle bool) {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	i, t := 0, m.dispatcher.Throughput()
	for {
		if i > t {
			i = 0
			runtime.Gosched()
		}
		i++
		m.mu.Lock()
		if msg = m.popSystem(); msg != nil {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended = true
				m.mu.Unlock()
			case *actor.ResumeMailbox:
				m.suspended = false
				m.mu.Unlock()
			default:
				m.mu.Unlock()
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if !m.suspended {
			msg = m.user.pop(maxKeptQueue)
		}
		if msg == nil {
			m.scheduled = false
			m.mu.Unlock()
			return true
		}
		m.mu.Unlock()
		m.invoker.InvokeUserMessage(msg)
	}
}

// popSystem returns the oldest system message, or nil; the queue goes once it is empty. m.mu is held.
func (m *mailbox) popSystem() any {
	if m.sys == nil {
		return nil
	}
	msg := m.sys.pop(0)
	if m.sys.len() == 0 {
		m.sys = nil
	}
	return msg
}

// messageQueue is a FIFO of messages in a slice: pop advances head, and the slice's room is reused
// once it is empty, or compacted by push when the consumed head is at least half of it, so a queue
// that never drains (the fleet actor's under a registration flood) holds room for at most four times
// its backlog (it grows only when more than half of it is backlog). Not safe for concurrent use (the mailbox's mutex guards it).
type messageQueue struct {
	items []any
	head  int
}

// maxKeptQueue is the room an emptied user queue keeps for the next messages (a server actor's: one,
// reused by every heartbeat); a larger one (a burst's) is released. An emptied system queue is dropped
// whole (mailbox.popSystem): its room would cost every server 16 bytes, the queue itself 32.
const maxKeptQueue = 64

func (q *messageQueue) len() int { return len(q.items) - q.head }

func (q *messageQueue) push(msg any) {
	if len(q.items) == cap(q.items) && q.head > 0 && q.head >= len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, msg)
}

// pop returns the oldest message, or nil when the queue is empty. A queue it empties keeps its room
// if that is at most keep messages.
func (q *messageQueue) pop(keep int) any {
	if q.head == len(q.items) {
		return nil
	}
	msg := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		if cap(q.items) > keep {
			q.items = nil
		} else {
			q.items = q.items[:0]
		}
		q.head = 0
	}
	return msg
}
