// The database-outage invariants: heartbeats are accepted during an outage, a refusal that says nothing was
// recorded means it, and /readyz reports the outage.

package chaos

import (
	"fmt"
	"time"
)

// checkOutageHeartbeats: while PostgreSQL is away, heartbeats of healthy servers keep being accepted
// (issue 7, database outage). A heartbeat counts when its server is healthy by every measure
// (deservesHealthy); heartbeats within a second of an actor fault of their server, or while the process
// was not serving, do not count.
func (c *checker) checkOutageHeartbeats() {
	for oi, o := range c.outages {
		total, bad := 0, 0
		servers := map[string]bool{}
		outcome := map[string]int{}
		var first, last time.Time
		for sid, qs := range c.byServer {
			for _, q := range qs {
				if q.Kind != ReqHeartbeat || q.Sent.Before(o.Start) || q.Sent.After(o.End) {
					continue
				}
				if overlaps(c.downs, q.Sent, q.Done, time.Second) || overlaps(c.pauses, q.Sent, q.Done, time.Second) || c.actorFaultNear(sid, q.Sent) || !c.deservesHealthy(q) {
					continue
				}
				total++
				if !q.Accepted() {
					bad++
					servers[sid] = true
					outcome[outcomeOf(q)]++
					if first.IsZero() {
						first = q.Sent
					}
					first = minTime(first, q.Sent)
					last = maxTime(last, q.Sent)
				}
			}
		}
		c.counts[InvOutageHeartbeats].N += total
		c.counts[InvOutageHeartbeats].Bad += bad
		if bad > 0 {
			c.violate(Violation{Invariant: InvOutageHeartbeats, At: first, Phase: c.phaseAt(o.Start),
				Message: fmt.Sprintf("outage %d (%s–%s, %s): %d heartbeats of %d healthy servers refused (of %d such heartbeats), from %s (%s into the outage) to %s: %s",
					oi+1, ts(o.Start), ts(o.End), o.End.Sub(o.Start).Round(time.Millisecond), bad, len(servers), total, ts(first), first.Sub(o.Start).Round(time.Millisecond), ts(last), formatOutcomes(outcome))})
		}
	}
}

// checkRefusedNotRecorded: an answer 503 ("nothing was recorded: retry") given while PostgreSQL was
// away leaves nothing behind — no recovery, registration or deregistration decided between the
// request's sending and that answer appears in the audit later (it could only have been committed after
// the database came back, that is after the client was told it was not).
func (c *checker) checkRefusedNotRecorded() {
	kindOf := map[string]string{ReqHeartbeat: "mcp.server.recovered", ReqRegister: "mcp.server.registered", ReqDeregister: "mcp.server.deregistered"}
	byPhase := map[string][]string{}
	n := 0
	for sid, qs := range c.byServer {
		for _, q := range qs {
			kind, ok := kindOf[q.Kind]
			if !ok || q.Code != 503 || q.Problem != "unavailable" || !within(c.outages, q.Done, 0, 0) {
				continue
			}
			var hit *AuditEvent
			for i := range c.events[sid] {
				if e := &c.events[sid][i]; e.Kind == kind && !e.OccurredAt.Before(q.Sent) && !e.OccurredAt.After(q.Done) {
					hit = e
				}
			}
			if c.check(InvRefusedNotRecorded, hit == nil) {
				continue
			}
			n++
			if n <= 5 {
				c.violate(Violation{Invariant: InvRefusedNotRecorded, At: q.Done, ServerID: sid, Module: c.moduleName(sid), Phase: q.Phase,
					Message:  fmt.Sprintf("%s answered 503 %q during a database outage, yet its %s was committed after the database came back", q.Kind, q.Detail, kind),
					Timeline: []string{c.describeReq(q), c.describeEvent(hit)}})
			} else {
				byPhase[q.Phase] = append(byPhase[q.Phase], sid)
			}
		}
	}
	for ph, sids := range byPhase {
		c.violate(Violation{Invariant: InvRefusedNotRecorded, Phase: ph, At: c.end,
			Message: fmt.Sprintf("%d more requests in phase %s answered 503 \"nothing was recorded\" whose write was committed later", len(sids), ph)})
	}
}

func (c *checker) actorFaultNear(server string, t time.Time) bool {
	for _, f := range c.faults {
		if f.Target == server && f.Start.After(t.Add(-time.Second)) && f.Start.Before(t.Add(time.Second)) {
			return true
		}
	}
	return false
}

// checkReadyz: /readyz does not claim the database is fine while it is away (from 3 s into an outage),
// and says ready when the process runs and the database is back (from 5 s after).
func (c *checker) checkReadyz() {
	type agg struct {
		n, bad      int
		first, last time.Time
		seen        map[string]int
	}
	during, after := &agg{seen: map[string]int{}}, &agg{seen: map[string]int{}}
	for i := range c.h.Requests {
		q := &c.h.Requests[i]
		if q.Kind != ReqReadyz || q.Code == 0 {
			continue
		}
		if overlaps(c.downs, q.Sent, q.Done, time.Second) || overlaps(c.pauses, q.Sent, q.Done, 2*time.Second) {
			continue
		}
		var a *agg
		var good bool
		switch {
		case c.inside(c.outages, q.Sent, q.Done.Add(time.Second), 3*time.Second):
			// The outage ends when the suite sees PostgreSQL accept connections, which is a little after
			// the service may; a probe in the last second of the window may already, rightly, say ready.
			a, good = during, q.Status != "ready"
		case !overlaps(c.outages, q.Sent, q.Done, 5*time.Second):
			a, good = after, q.Code == 200 && q.Status == "ready"
		default:
			continue
		}
		a.n++
		if !good {
			a.bad++
			a.seen[fmt.Sprintf("%d %s", q.Code, q.Status)]++
			if a.first.IsZero() {
				a.first = q.Sent
			}
			a.last = q.Sent
		}
	}
	c.counts[InvReadyz].N += during.n + after.n
	c.counts[InvReadyz].Bad += during.bad + after.bad
	if during.bad > 0 {
		c.violate(Violation{Invariant: InvReadyz, At: during.first, Message: fmt.Sprintf("%d of %d probes during outages said ready (%s), first %s, last %s",
			during.bad, during.n, formatOutcomes(during.seen), ts(during.first), ts(during.last))})
	}
	if after.bad > 0 {
		c.violate(Violation{Invariant: InvReadyz, At: after.first, Message: fmt.Sprintf("%d of %d probes with the process and the database up did not say ready (%s), first %s, last %s",
			after.bad, after.n, formatOutcomes(after.seen), ts(after.first), ts(after.last))})
	}
}

// inside reports whether [a, b] lies within one window, at least lead after its start.
func (c *checker) inside(ws []Window, a, b time.Time, lead time.Duration) bool {
	for _, w := range ws {
		if !a.Before(w.Start.Add(lead)) && !b.After(w.End) {
			return true
		}
	}
	return false
}
