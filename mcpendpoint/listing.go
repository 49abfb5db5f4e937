package mcpendpoint

import (
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

// Mode is how the endpoint lists the tools of a server that is not alive (MCPFLEET_MCP_UNAVAILABLE_TOOLS).
type Mode string

const (
	// Keep (the default) lists them through health changes; a call to one is answered at once with a tool
	// error saying the server is unavailable, since when, and when to try again.
	Keep Mode = "keep"
	// Hide takes a server's tools off the list once it has been down for the list hold, and lists them
	// again once it has been up that long.
	Hide Mode = "hide"
)

// down reports whether a server in status st cannot be called: unhealthy or deregistered.
func down(st health.Status) bool { return st == health.Unhealthy || st == health.Deregistered }

// holdState is what Hide mode knows of one server.
type holdState struct {
	listed bool      // its tools are on the list
	down   bool      // the class of status last seen
	since  time.Time // when that class was first seen
}

// holds decides, in Hide mode, which servers' tools are listed. A server's tools leave the list once it
// has been down (unhealthy or deregistered) for hold without interruption, and come back once it has been
// up (healthy or degraded) for hold without interruption; a server that comes up and goes down again
// within hold therefore stays out until it stays up for a whole hold. A server the flap detector marks
// as flapping leaves the list at once and stays out while it is marked, whatever its status; once it is
// no longer marked it comes back when it has been up for hold. A server seen for the first time is
// listed unless it is flapping, or down and has been for hold.
//
// It is not safe for concurrent use.
type holds struct {
	hold  time.Duration
	state map[uuid.UUID]*holdState
}

func newHolds(hold time.Duration) *holds {
	return &holds{hold: hold, state: map[uuid.UUID]*holdState{}}
}

// observe records that server id is in status st at now (changed: when it entered that class of status,
// if known — the audit log's time, so a change seen late is timed right) and whether it is flapping, and
// returns whether its tools are listed.
func (h *holds) observe(id uuid.UUID, st health.Status, changed *time.Time, flapping bool, now time.Time) bool {
	isDown := down(st)
	since := now
	if changed != nil && !changed.After(now) {
		since = *changed
	}
	s, ok := h.state[id]
	if !ok {
		s = &holdState{listed: !flapping && (!isDown || now.Sub(since) < h.hold), down: isDown, since: since}
		h.state[id] = s
	}
	if s.down != isDown {
		s.down, s.since = isDown, since
	}
	if flapping {
		s.listed = false
		return false
	}
	if s.listed == s.down && now.Sub(s.since) >= h.hold {
		s.listed = !s.down
	}
	return s.listed
}

// forget drops the servers not in seen.
func (h *holds) forget(seen map[uuid.UUID]bool) {
	for id := range h.state {
		if !seen[id] {
			delete(h.state, id)
		}
	}
}
