package actors

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// The monitor's deadline heap (issue 14): a tick checks only the servers whose deadline has come, not
// every server. The fleet actor, which owns the tick, keeps a min-heap of deadlines on the monitor's
// clock (lifecycle.MonitorTime: the service clock net of the monitor's stall, so a stall needs no
// re-keying). Each server actor keeps its exact deadline (lifecycle.Server.Due) and the fleet holds a
// lower bound of it (fleetEntry.armed), from two sources: a message (armMsg), and the deadline the
// actor publishes in its record (serverRecord.dueHint, rounded down to the second).
//
// The rule that keeps a tick exact: the fleet's bound of a server is never later than its exact
// deadline. A server actor sends a new bound whenever its deadline moves earlier than what it last
// published (sent or stored), or comes back into existence (registration, recovery, a new incarnation,
// a check that popped the old bound), before it answers whoever caused the change; every deadline it
// computes, it also stores in dueHint. A healthy heartbeat moves the deadline later: it costs a store,
// no message. When a bound pops, the fleet reads dueHint: if that deadline is still ahead, the bound
// is renewed from it in the heap (no message, no check); otherwise the server is sent a check, which
// answers with its exact deadline, or with none if time alone can no longer change it. So a healthy
// fleet costs the monitor one heap renewal per server per ~H–2H and no message (at 100,000 servers the
// renewal messages alone were ~5,000 a second through the fleet actor, which every first registration
// shares). A hint read just before a smaller bound's message arrives is harmless: the message makes the
// bound smaller again (a bound earlier than the deadline is only an early pop).

// MonitorStats counts the deadline heap's work since Start: Checks is the servers a tick sent a check,
// Bounds the deadline bounds the heap took by message (armMsg), Renewals the bounds it renewed from a
// server's published deadline (dueHint). They are written by the fleet actor only.
type MonitorStats struct {
	Checks   atomic.Int64
	Bounds   atomic.Int64
	Renewals atomic.Int64
}

// MonitorStats returns the fleet's monitor counters.
func (f *Fleet) MonitorStats() *MonitorStats { return f.stats }

// armMsg tells the fleet a server's new deadline bound (UnixNano on the monitor's clock).
type armMsg struct {
	id uuid.UUID
	at int64
}

// deadline is one entry of the heap. Entries are never removed early: an entry whose at is no longer
// its server's fleetEntry.armed (re-armed since, checked, or the server is gone) is dropped when popped.
type deadline struct {
	at int64
	id uuid.UUID
}

// deadlineHeap is a binary min-heap of deadlines by at (hand-written: container/heap boxes every entry).
type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// popDue removes and returns the earliest entry if it is due at now (at ≤ now).
func (h *deadlineHeap) popDue(now int64) (deadline, bool) {
	s := *h
	if len(s) == 0 || s[0].at > now {
		return deadline{}, false
	}
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].at < s[m].at {
			m = l
		}
		if r < len(s) && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top, true
}

// arm takes a server's new bound (the last one received is the server's).
func (f *fleetActor) arm(msg *armMsg) {
	e := f.entries[msg.id]
	if e == nil || e.armed == msg.at {
		return
	}
	e.armed = msg.at
	f.deadlines.push(deadline{at: msg.at, id: msg.id})
	f.deps.stats.Bounds.Add(1)
}

// due pops every server whose bound has come at the monitor time now and returns those to check: a
// server whose published deadline (dueHint) is still ahead has its bound renewed from it instead. The
// bound of a server returned is spent (the check it is sent answers with a new one, or with none if
// time alone can no longer change it).
func (f *fleetActor) due(now int64) []uuid.UUID {
	var ids []uuid.UUID
	for {
		d, ok := f.deadlines.popDue(now)
		if !ok {
			break
		}
		e := f.entries[d.id]
		if e == nil || e.armed != d.at {
			continue // renewed or checked since, or gone
		}
		if at := e.rec.hint(); at > now {
			e.armed = at
			f.deadlines.push(deadline{at: at, id: d.id})
			f.deps.stats.Renewals.Add(1)
			continue
		}
		e.armed = 0
		ids = append(ids, d.id)
	}
	f.deps.stats.Checks.Add(int64(len(ids)))
	if len(f.deadlines) > 1024 && cap(f.deadlines) > 4*len(f.deadlines) {
		f.deadlines = append(deadlineHeap(nil), f.deadlines...) // give back what a burst of stale entries took
	}
	return ids
}

// arm keeps the fleet's bound of this server a lower bound of its exact deadline (see above). It is
// called wherever the deadline can move: a new incarnation, evidence, a committed registration or
// transition, a check that changed nothing.
func (a *serverActor) arm(ctx actor.Context) {
	due, ok := a.rec.life.Due(a.deps.life)
	if !ok {
		// Time alone changes nothing: a bound still in the heap pops as a check that changes nothing.
		a.rec.publish(0)
		return
	}
	at := due.UnixNano()
	a.rec.publish(at)
	if a.armed != 0 && at >= a.armed {
		a.armed = at // the fleet's bound, whichever of ours it holds, is no later: it renews from the hint
		return
	}
	a.armed = at
	ctx.Send(ctx.Parent(), &armMsg{id: a.rec.id(), at: at})
}

// publish stores deadline at (UnixNano on the monitor's clock; 0: none) in dueHint, rounded down to
// the second — a lower bound of it. A deadline outside what the hint can hold is stored as none.
func (r *serverRecord) publish(at int64) {
	sec := at / int64(time.Second)
	if at <= 0 || sec > math.MaxUint32 {
		sec = 0
	}
	r.dueHint.Store(uint32(sec))
}

// hint is the deadline in dueHint (UnixNano on the monitor's clock; 0: none).
func (r *serverRecord) hint() int64 { return int64(r.dueHint.Load()) * int64(time.Second) }
