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
