package actors

import (
	"runtime"

	"github.com/asynkron/protoactor-go/actor"
)

// workers is the dispatcher of the server actors and the fleet actor: protoactor's default starts a
// goroutine each time a mailbox has work, which for a server actor is once per heartbeat, and every one
// of those goroutines grows its stack from the starting size on the way into the actor (copying it:
// ~5 % of the service's CPU in the steady heartbeat profile). A workers dispatcher hands the mailbox's
// run to one of a few long-lived goroutines that is idle at that moment, whose stack has already grown;
// when none is idle it starts a goroutine as the default does. So Schedule never blocks or queues (a
// mailbox's run never waits behind another's), and an actor that blocks holds only its own goroutine.
type workers struct {
	idle       chan func() // unbuffered: a send succeeds only into a worker waiting for work
	done       chan struct{}
	throughput int
}

var _ actor.Dispatcher = (*workers)(nil)

// workerThroughput is the messages a mailbox run handles before it yields (protoactor's default).
const workerThroughput = 300

// newWorkers starts n workers; stop ends them.
func newWorkers(n int) *workers {
	w := &workers{idle: make(chan func()), done: make(chan struct{}), throughput: workerThroughput}
	for range n {
		go w.run()
	}
	return w
}

// defaultWorkers is how many workers a fleet starts: a few per processor, the heartbeats the
// service's goroutines hand to server actors at one moment.
func defaultWorkers() int { return 4 * runtime.GOMAXPROCS(0) }

func (w *workers) run() {
	for {
		select {
		case fn := <-w.idle:
			fn()
		case <-w.done:
			return
		}
	}
}

// Schedule runs fn on an idle worker, or on a new goroutine if none is idle (or the workers stopped).
func (w *workers) Schedule(fn func()) {
	select {
	case w.idle <- fn:
	default:
		go fn()
	}
}

// withThroughput is a dispatcher onto the same workers whose mailbox runs handle up to n messages
// before they yield.
func (w *workers) withThroughput(n int) *workers {
	return &workers{idle: w.idle, done: w.done, throughput: n}
}

// Throughput is the messages a mailbox run handles before yielding.
func (w *workers) Throughput() int { return w.throughput }

// stop ends the idle workers (a busy one ends after its run); later Schedules start goroutines.
func (w *workers) stop() { close(w.done) }
