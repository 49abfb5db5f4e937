package actors

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// TestSendDuringSpawn: messages sent by name to actors while they are being spawned (a heartbeat to a
// server actor being respawned or woken) are delivered, and after Started. Under the race detector
// (make test) protoactor's own mailbox fails this: the sender reads the dispatcher the spawn is
// writing. Without the gate, a message can also be handled before Started.
func TestSendDuringSpawn(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	const n = 300
	var early, handled atomic.Int64
	props := actor.PropsFromProducer(func() actor.Actor { return &startedProbe{early: &early, handled: &handled} },
		actor.WithMailbox(unboundedMailbox()))
	var wg sync.WaitGroup
	sent := make([]atomic.Bool, n)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			// Send until the name resolves: the first send that finds the process is in or after its spawn.
			pid := actor.NewPID(system.Address(), fmt.Sprintf("a-%d", i))
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				if _, ok := system.ProcessRegistry.Get(pid); ok {
					system.Root.Send(pid, "hello")
					sent[i].Store(true)
					break
				}
			}
		}
	}()
	for i := range n {
		if _, err := system.Root.SpawnNamed(props, fmt.Sprintf("a-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range n {
		if !sent[i].Load() {
			t.Fatalf("actor a-%d never became findable", i)
		}
	}
	wait.For(t, "every message handled", 10*time.Second, func() bool { return handled.Load() == n })
	if got := early.Load(); got != 0 {
		t.Fatalf("%d messages handled before Started", got)
	}
}

// startedProbe counts the strings it handles, and those handled before its Started.
type startedProbe struct {
	started        bool
	early, handled *atomic.Int64
}

func (p *startedProbe) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		p.started = true
	case string:
		p.handled.Add(1)
		if !p.started {
			p.early.Add(1)
		}
	}
}

// Many senders at once (heartbeats from every request goroutine): every message is handled, each
// sender's in the order it sent them, and no run is lost (a post that finds the mailbox going idle
// schedules the next one).
func TestMailboxDeliversEveryMessageInOrder(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	w := newWorkers(2)
	defer w.stop()
	const senders, each = 8, 5000
	var handled atomic.Int64
	var disorder atomic.Int64
	last := make([]int, senders)
	props := actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(seqMsg); ok {
			if m.n != last[m.sender]+1 {
				disorder.Add(1)
			}
			last[m.sender] = m.n
			handled.Add(1)
		}
	}, actor.WithMailbox(unboundedMailbox()), actor.WithDispatcher(w.withThroughput(7)))
	pid := system.Root.Spawn(props)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for n := 1; n <= each; n++ {
				system.Root.Send(pid, seqMsg{sender: s, n: n})
			}
		})
	}
	wg.Wait()
	wait.For(t, "every message handled", 10*time.Second, func() bool { return handled.Load() == senders*each })
	if d := disorder.Load(); d != 0 {
		t.Fatalf("%d messages out of their sender's order", d)
	}
}

type seqMsg struct{ sender, n int }

// System messages run first, in order, and the emptied system queue is dropped; while suspended only
// they run; a resume lets the user messages through.
func TestMailboxSystemFirstAndSuspend(t *testing.T) {
	m, inv, d := newTestMailbox()
	m.PostUserMessage("u1")
	m.PostSystemMessage("s1")
	m.PostSystemMessage("s1b")
	d.runAll()
	inv.want(t, "s1", "s1b", "u1")
	if m.sys != nil {
		t.Fatal("the emptied system queue is kept: every idle actor would hold it")
	}
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage("u2")
	d.runAll()
	inv.want(t, "s1", "s1b", "u1")
	if n := m.UserMessageCount(); n != 1 {
		t.Fatalf("suspended with %d user messages, want 1", n)
	}
	m.PostSystemMessage("s2")
	d.runAll()
	inv.want(t, "s1", "s1b", "u1", "s2")
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.runAll()
	inv.want(t, "s1", "s1b", "u1", "s2", "u2")
	if d.scheduled != 4 {
		t.Fatalf("%d runs scheduled, want 4 (one per post into an idle mailbox)", d.scheduled)
	}
}

// A panic in the actor is escalated with the message that caused it; the escalation's suspension holds
// the next user message back until the supervisor resumes the mailbox.
func TestMailboxEscalatesAPanic(t *testing.T) {
	m, inv, d := newTestMailbox()
	inv.onEscalate = func() { m.PostSystemMessage(&actor.SuspendMailbox{}) } // as actorContext.EscalateFailure
	m.PostUserMessage("boom")
	m.PostUserMessage("after")
	d.runAll()
	if len(inv.escalated) != 1 || inv.escalated[0] != "boom" {
		t.Fatalf("escalated %v, want the message that panicked", inv.escalated)
	}
	inv.want(t, "boom")
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.runAll()
	inv.want(t, "boom", "after")
}

// A queue that never drains holds room for at most four times its backlog, in order; an emptied queue keeps
// only the room it is allowed.
func TestMessageQueue(t *testing.T) {
	var q messageQueue
	const backlog = 100
	next, want := 0, 0
	for range backlog {
		q.push(next)
		next++
	}
	for range 100_000 {
		q.push(next)
		next++
		if got := q.pop(maxKeptQueue); got != want {
			t.Fatalf("popped %v, want %d", got, want)
		}
		want++
	}
	if c := cap(q.items); c > 4*backlog {
		t.Fatalf("a backlog of %d holds room for %d messages", backlog, c)
	}
	for q.len() > 0 {
		q.pop(maxKeptQueue)
	}
	if q.items != nil {
		t.Fatalf("an emptied queue keeps room for %d messages, more than %d", cap(q.items), maxKeptQueue)
	}
	q.push("one")
	q.pop(0)
	if q.items != nil || q.pop(0) != nil {
		t.Fatal("a queue emptied with keep 0 kept its room, or popped from nothing")
	}
}

// testInvoker records what the mailbox invokes; a user message "boom" panics.
type testInvoker struct {
	got        []any
	escalated  []any
	onEscalate func()
}

func (i *testInvoker) InvokeSystemMessage(msg any) { i.got = append(i.got, msg) }
func (i *testInvoker) InvokeUserMessage(msg any) {
	i.got = append(i.got, msg)
	if msg == "boom" {
		panic("boom")
	}
}
func (i *testInvoker) EscalateFailure(_ any, msg any) {
	i.escalated = append(i.escalated, msg)
	if i.onEscalate != nil {
		i.onEscalate()
	}
}

func (i *testInvoker) want(t *testing.T, msgs ...any) {
	t.Helper()
	if fmt.Sprintf("%v", i.got) != fmt.Sprintf("%v", msgs) {
		t.Fatalf("invoked %v, want %v", i.got, msgs)
	}
}

// stepDispatcher holds scheduled runs until runAll.
type stepDispatcher struct {
	runs      []func()
	scheduled int
}

func (d *stepDispatcher) Schedule(fn func()) { d.runs = append(d.runs, fn); d.scheduled++ }
func (d *stepDispatcher) Throughput() int    { return 2 }
func (d *stepDispatcher) runAll() {
	for len(d.runs) > 0 {
		fn := d.runs[0]
		d.runs = d.runs[1:]
		fn()
	}
}

func newTestMailbox() (*mailbox, *testInvoker, *stepDispatcher) {
	m := unboundedMailbox()().(*mailbox)
	inv, d := &testInvoker{}, &stepDispatcher{}
	m.RegisterHandlers(inv, d)
	m.Start()
	return m, inv, d
}
