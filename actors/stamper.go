package actors

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// stamper is the heartbeat-stamp persistence actor. It coalesces stamps per server (the newest wins)
// and flushes them in set-based UPDATEs on every flush tick (the bounded window, default 500 ms) or
// as soon as maxBatch servers are waiting. One flush is in flight at a time; a failed flush puts its
// stamps back (a newer stamp for the same server wins) and is retried on the next tick. A crash loses
// at most one window of last_heartbeat_at and never a transition (those go through the writer).
type stamper struct {
	store    stampStore
	log      *slog.Logger
	maxBatch int
	epoch    uint64
	pending  map[uuid.UUID]persistence.Stamp
	flushing bool
	drainers []*actor.PID
	tel      tel
	links    batchLinks // the sampled heartbeats of the next flush
	// fleet is the fleet actor, told of a stale fence (shardFenced); set once the fleet is spawned.
	fleet *atomic.Pointer[actor.PID]
}

type stampStore interface {
	StampHeartbeatsFenced(ctx context.Context, stamps []persistence.Stamp) ([]persistence.Fence, error)
}

type stampTick struct{}

type stampFlushed struct {
	epoch  uint64
	failed []persistence.Stamp
	fenced []persistence.Fence // stale fences: their stamps were dropped
	trace  carrier             // the stamper.flush span
}

func newStamperProps(store stampStore, log *slog.Logger, maxBatch int, epochs *epochCounter, t tel, fleet *atomic.Pointer[actor.PID], d actor.Dispatcher) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &stamper{store: store, log: log, maxBatch: maxBatch, epoch: epochs.next(), pending: map[uuid.UUID]persistence.Stamp{}, tel: t, fleet: fleet}
	}, actor.WithMailbox(unboundedMailbox()), actor.WithDispatcher(d))
}

func (s *stamper) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch msg := ctx.Message().(type) {
	case *stampMsg:
		s.add(msg.stamp)
		s.links.Add(msg.trace)
		if len(s.pending) >= s.maxBatch {
			s.flush(ctx)
		}
		s.tel.metrics.Backlog(telemetryWriterStamps, len(s.pending))
	case *stampTick:
		s.flush(ctx)
	case *stampFlushed:
		if msg.epoch != s.epoch {
			return
		}
		s.flushing = false
		for _, st := range msg.failed {
			s.add(st)
		}
		if pid := s.fleet.Load(); pid != nil {
			for _, f := range msg.fenced {
				ctx.Send(pid, &shardFenced{fence: f})
			}
		}
		if len(msg.failed) > 0 {
			s.log.WarnContext(msg.trace.Context(), "stamper: heartbeat stamps not written, will retry", "stamps", len(msg.failed))
		}
		s.tel.metrics.Backlog(telemetryWriterStamps, len(s.pending))
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

func (s *stamper) add(st persistence.Stamp) {
	if cur, ok := s.pending[st.ServerID]; ok && !st.At.After(cur.At) {
		return
	}
	s.pending[st.ServerID] = st
}

func (s *stamper) answerDrainers(ctx actor.Context) {
	if s.flushing || len(s.pending) > 0 {
		return
	}
	for _, d := range s.drainers {
		ctx.Send(d, &drained{})
	}
	s.drainers = nil
}

func (s *stamper) flush(ctx actor.Context) {
	if s.flushing || len(s.pending) == 0 {
		return
	}
	batch := make([]persistence.Stamp, 0, len(s.pending))
	for _, st := range s.pending {
		batch = append(batch, st)
	}
	clear(s.pending) // the batch holds copies; the map keeps its room for the next window's stamps
	s.flushing = true
	system, self, epoch, store, t, links := ctx.ActorSystem(), ctx.Self(), s.epoch, s.store, s.tel, s.links
	s.links = batchLinks{}
	go func() {
		var failed []persistence.Stamp
		trc, fenced, err := t.flushStamps(store, batch, links)
		if err != nil {
			failed = batch
		}
		system.Root.Send(self, &stampFlushed{epoch: epoch, failed: failed, fenced: fenced, trace: trc})
	}()
}
