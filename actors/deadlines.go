package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/lifecycle"
)

// The monitor's deadline heap (issue 14): a tick checks only the servers whose deadline has come, not
// every server. The fleet actor, which owns the tick, keeps a min-heap of deadlines on the monitor's
// clock (lifecycle.MonitorTime: the service clock net of the monitor's stall, so a stall needs no
// re-keying). Each server actor keeps its exact deadline (lifecycle.Server.Due) and tells the fleet a
// lower bound of it by message (armMsg). Nothing is shared: the fleet's bound (fleetEntry.armed) is
// the fleet's, the actor's record of what it sent (serverActor.armed) is the actor's.
//
// The rule that keeps a tick exact: the fleet's bound of a server is never later than its exact
// deadline. A server actor sends a new bound whenever its deadline moves earlier than what it sent, or
// comes back into existence (registration, recovery, a new incarnation), before it answers whoever
// caused the change. A healthy heartbeat moves the deadline later, which leaves the bound a lower bound:
// it costs no message, except when the bound would come due before the next heartbeat (then it is
// renewed, about once per 2H). A popped bound that turns out early is a check that changes nothing;
// the server answers it with its exact deadline.

// MonitorStats counts the deadline heap's work since Start: Checks is the servers a tick sent a check,
// Bounds the deadline bounds the heap took (armMsg). They are written by the fleet actor only.
type MonitorStats struct {
	Checks atomic.Int64
	Bounds atomic.Int64
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

// due pops every server whose bound has come at the monitor time now and returns them; their bound is
// spent (the check they are sent answers with a new one, or with none if time alone can no longer
// change them).
func (f *fleetActor) due(now int64) []uuid.UUID {
	var ids []uuid.UUID
	for {
		d, ok := f.deadlines.popDue(now)
		if !ok {
			break
		}
		if e := f.entries[d.id]; e != nil && e.armed == d.at {
			e.armed = 0
			ids = append(ids, d.id)
		}
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
		return // time alone changes nothing; a bound still in the heap pops as a check that changes nothing
	}
	at := due.UnixNano()
	if a.armed != 0 && at >= a.armed {
		if at == a.armed {
			return
		}
		// Still a lower bound: renew it only when it would come due before the next heartbeat.
		now := lifecycle.MonitorTime(a.deps.clock.Now(), a.deps.stall.Total()).UnixNano()
		if a.armed-now >= int64(a.deps.life.Thresholds.Interval/2) {
			return
		}
	}
	a.armed = at
	ctx.Send(ctx.Parent(), &armMsg{id: a.rec.id(), at: at})
}
