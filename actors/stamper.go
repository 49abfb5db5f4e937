package actors

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// stamper is the heartbeat-stamp persistence actor. The server actors put their stamps into a
// stampTable it shares with them (the newest stamp of a server wins); it flushes the table in
// set-based UPDATEs of at most maxBatch servers each on every flush tick (the bounded window, default
// 500 ms), as soon as maxBatch servers are waiting (the table's put says so, once per flush), and again
// at once while that many still wait after a flush. One flush is in flight at a time; a
// failed flush puts its stamps back (a newer stamp for the same server wins) and is retried on the
// next tick. A crash loses at most one window of last_heartbeat_at and never a transition (those go
// through the writer).
type stamper struct {
	store    stampStore
	log      *slog.Logger
	table    *stampTable
	epoch    uint64
	flushing bool
	drainers []*actor.PID
	tel      tel
	// fleet is the fleet actor, told of a stale fence (shardFenced); set once the fleet is spawned.
	fleet *atomic.Pointer[actor.PID]
}

// stampTable holds the heartbeat stamps waiting to be written, one per server, between the server
// actors that put them and the stamper that takes them. A heartbeat costs a map write under a lock,
// not a message, and what waits is bounded by the number of servers whatever the heartbeat rate:
// when stamps went to the stamper as messages, a machine too slow for its fleet (250,000 servers on a
// slow day, issue 14) queued millions of them in the stamper's mailbox, gigabytes of heap whose
// collection then starved the service.
type stampTable struct {
	maxBatch int

	mu       sync.Mutex
	pending  map[uuid.UUID]persistence.Stamp
	links    batchLinks // the sampled heartbeats of the pending stamps
	signaled bool       // put has reported the table full since the last take
}

func newStampTable(maxBatch int) *stampTable {
	return &stampTable{maxBatch: maxBatch, pending: map[uuid.UUID]persistence.Stamp{}}
}

// put records st unless the table holds a stamp of the same server at least as new, and links the
// heartbeat's span c. It reports full once the table holds maxBatch servers — once until the next
// take: the caller then tells the stamper (stampFull).
func (t *stampTable) put(st persistence.Stamp, c carrier) (full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.putLocked(st)
	t.links.Add(c)
	if len(t.pending) >= t.maxBatch && !t.signaled {
		t.signaled = true
		return true
	}
	return false
}

func (t *stampTable) putLocked(st persistence.Stamp) {
	if cur, ok := t.pending[st.ServerID]; ok && !st.At.After(cur.At) {
		return
	}
	t.pending[st.ServerID] = st
}

// putBack returns the stamps of a failed flush; a newer stamp of the same server, put meanwhile, wins.
func (t *stampTable) putBack(stamps []persistence.Stamp) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range stamps {
		t.putLocked(st)
	}
}

// take takes at most maxBatch stamps out of the table (appended to batch), any of them, with the links of
// the sampled heartbeats put since the last take (a link may so go with a flush that writes its stamp's
// server a flush later, when the table held more than maxBatch).
//
// One flush is one transaction that holds the row lock of every server it stamps until it commits, and
// is retried whole if it fails. Taking the whole table made a service short of CPU worse: while a flush
// was slow the table filled towards the fleet, the next flush took all of it (31,000 stamps a flush on
// average, up to 140,000, in a saturated run at 150,000 servers), ran into the stamp timeout (10 s), failed
// whole and put everything back, while its row locks held every deregistration and transition of those
// servers — 3,428 of 15,000 deregistrations in 74 s, 4,566 of them failed. A backlog is now written as a
// stream of bounded transactions: the stamper flushes again as soon as one ends (stampFlushed).
func (t *stampTable) take(batch []persistence.Stamp) ([]persistence.Stamp, batchLinks) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := min(len(t.pending), t.maxBatch)
	batch = slices.Grow(batch, n)
	for id, st := range t.pending { // deleting keeps the map's room for the next window's stamps
		if n == 0 {
			break
		}
		batch = append(batch, st)
		delete(t.pending, id)
		n--
	}
	links := t.links
	t.links, t.signaled = batchLinks{}, false
	return batch, links
}

// len is how many servers have a stamp waiting.
func (t *stampTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

type stampStore interface {
	StampHeartbeatsFenced(ctx context.Context, stamps []persistence.Stamp) ([]persistence.Fence, error)
}

type stampTick struct{}

// stampFull tells the stamper that the table holds maxBatch servers.
type stampFull struct{}

var stampFullMsg = &stampFull{}

type stampFlushed struct {
	epoch  uint64
	failed []persistence.Stamp
	fenced []persistence.Fence // stale fences: their stamps were dropped
	trace  carrier             // the stamper.flush span
}

func newStamperProps(store stampStore, log *slog.Logger, table *stampTable, epochs *epochCounter, t tel, fleet *atomic.Pointer[actor.PID], d actor.Dispatcher) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &stamper{store: store, log: log, table: table, epoch: epochs.next(), tel: t, fleet: fleet}
	}, actor.WithMailbox(unboundedMailbox()), actor.WithDispatcher(d))
}

func (s *stamper) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch msg := ctx.Message().(type) {
	case *stampFull:
		s.flush(ctx)
	case *stampTick:
		s.flush(ctx)
	case *stampFlushed:
		if msg.epoch != s.epoch {
			return
		}
		s.flushing = false
		s.table.putBack(msg.failed)
		if pid := s.fleet.Load(); pid != nil {
			for _, f := range msg.fenced {
				ctx.Send(pid, &shardFenced{fence: f})
			}
		}
		if len(msg.failed) > 0 {
			s.log.WarnContext(msg.trace.Context(), "stamper: heartbeat stamps not written, will retry", "stamps", len(msg.failed))
		}
		waiting := s.table.len()
		s.tel.metrics.Backlog(telemetryWriterStamps, waiting)
		if len(s.drainers) == 0 && len(msg.failed) == 0 && waiting >= s.table.maxBatch {
			s.flush(ctx) // a full table waited for this flush
		}
		if len(s.drainers) > 0 {
			if len(msg.failed) > 0 {
				// Draining at shutdown: one more try is all we give a failing database.
				for _, d := range s.drainers {
					ctx.Send(d, &drained{})
				}
				s.drainers = nil
				return
			}
			s.flush(ctx)
			s.answerDrainers(ctx)
		}
	case *drainMsg:
		s.drainers = append(s.drainers, ctx.Sender())
		s.flush(ctx)
		s.answerDrainers(ctx)
	}
}

func (s *stamper) answerDrainers(ctx actor.Context) {
	if s.flushing || s.table.len() > 0 {
		return
	}
	for _, d := range s.drainers {
		ctx.Send(d, &drained{})
	}
	s.drainers = nil
}

func (s *stamper) flush(ctx actor.Context) {
	if s.flushing {
		return
	}
	batch, links := s.table.take(nil)
	if len(batch) == 0 {
		return
	}
	s.flushing = true
	system, self, epoch, store, t := ctx.ActorSystem(), ctx.Self(), s.epoch, s.store, s.tel
	go func() {
		var failed []persistence.Stamp
		trc, fenced, err := t.flushStamps(store, batch, links)
		if err != nil {
			failed = batch
		}
		system.Root.Send(self, &stampFlushed{epoch: epoch, failed: failed, fenced: fenced, trace: trc})
	}()
}
