// The audit and alert invariants: the audit chain loses and doubles no transition, and every unhealthy
// event is alerted, genuinely.

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// allowedFrom lists, per audit kind, the statuses it may follow.
var allowedFrom = map[string][]string{
	"mcp.server.registered":   {"", "healthy", "degraded", "unhealthy", "deregistered"},
	"mcp.server.degraded":     {"healthy"},
	"mcp.server.unhealthy":    {"healthy", "degraded"},
	"mcp.server.recovered":    {"degraded", "unhealthy"},
	"mcp.server.deregistered": {"healthy", "degraded", "unhealthy"},
}

var statusOfKind = map[string]string{
	"mcp.server.registered": "healthy", "mcp.server.degraded": "degraded", "mcp.server.unhealthy": "unhealthy",
	"mcp.server.recovered": "healthy", "mcp.server.deregistered": "deregistered",
}

// checkAudit: per server, the audit events in commit order form a chain — each starts from the status
// the previous one left, so none was lost and none doubled; every event the poller saw is in the
// database at the end, unchanged, and no event id appears twice; the final status of each server is
// its last event's.
func (c *checker) checkAudit() {
	for sid, evs := range c.events {
		prev := ""
		for i := range evs {
			e := &evs[i]
			ok := statusOfKind[e.Kind] == e.Status && slices.Contains(allowedFrom[e.Kind], e.From) && e.From == prev
			if i == 0 {
				ok = ok && e.Kind == "mcp.server.registered" && e.From == ""
			}
			if !c.check(InvAuditChain, ok) {
				tl := []string{}
				for j := max(0, i-3); j <= min(len(evs)-1, i+1); j++ {
					tl = append(tl, c.describeEvent(&evs[j]))
				}
				c.violate(Violation{Invariant: InvAuditChain, At: e.OccurredAt, ServerID: sid, Module: c.moduleName(sid), Phase: c.phaseAt(e.OccurredAt),
					Message: fmt.Sprintf("%s from %s follows an event that left %s: a transition was lost or doubled", e.Kind, orDash(e.From), orDash(prev)), Timeline: tl})
			}
			prev = e.Status
		}
	}
	final := map[string]AuditEvent{}
	ids := map[string]int{}
	for _, e := range c.h.Final.Audit {
		final[e.EventID] = e
		ids[e.EventID]++
	}
	if c.h.Final.Read {
		for id, n := range ids {
			if !c.check(InvAuditRetained, n == 1) {
				c.violate(Violation{Invariant: InvAuditRetained, At: c.end, Message: fmt.Sprintf("event %s appears %d times", id, n)})
			}
		}
		for _, e := range c.h.Audit {
			f, ok := final[e.EventID]
			same := ok && f.Seq == e.Seq && f.Kind == e.Kind && f.ServerID == e.ServerID && f.Status == e.Status && f.From == e.From && f.OccurredAt.Equal(e.OccurredAt)
			if !c.check(InvAuditRetained, same) {
				msg := "seen by the poller at " + ts(e.FirstSeen) + " but gone from the database at the end"
				if ok {
					msg = "changed since the poller saw it at " + ts(e.FirstSeen)
				}
				c.violate(Violation{Invariant: InvAuditRetained, At: e.FirstSeen, ServerID: e.ServerID, Module: c.moduleName(e.ServerID),
					Message: fmt.Sprintf("audit event %s (%s): %s", e.EventID, e.Kind, msg)})
			}
		}
		for _, s := range c.h.Final.Servers {
			evs := c.events[s.ServerID]
			last := ""
			if len(evs) > 0 {
				last = evs[len(evs)-1].Status
			}
			if !c.check(InvStatusMatchesLast, last == s.Status) {
				c.violate(Violation{Invariant: InvStatusMatchesLast, At: c.end, ServerID: s.ServerID, Module: s.ModuleName,
					Message: fmt.Sprintf("mcp_servers says %s, its last audit event says %s", s.Status, orDash(last))})
			}
		}
	}
	var lag []time.Duration
	for _, e := range c.h.Audit {
		if !e.FirstSeen.IsZero() {
			lag = append(lag, e.FirstSeen.Sub(e.OccurredAt))
		}
	}
	if len(lag) > 0 {
		slices.Sort(lag)
		c.info("audit: %d events; decided → seen by the poller: p50 %s, p99 %s, max %s", len(c.allEvents),
			lag[len(lag)/2].Round(time.Millisecond), lag[len(lag)*99/100].Round(time.Millisecond), lag[len(lag)-1].Round(time.Millisecond))
	}
}

// checkAlerts: every unhealthy audit event is alerted at least once — its own event id delivered (a 2xx
// from the webhook), or, for a flapping server whose later transitions raise no alert by design, a
// flapping alert of the same server within the flapping window before it; every delivery is signed,
// names an audit event of the same server, and says unhealthy.
func (c *checker) checkAlerts() {
	outbox := map[string]OutboxRow{}
	for _, o := range c.h.Final.Outbox {
		outbox[o.EventID] = o
	}
	delivered := map[string]int{}
	attempts := map[string]int{}
	var flapping []AlertRecv
	for _, a := range c.h.Alerts {
		attempts[a.EventID]++
		if a.Answered >= 200 && a.Answered < 300 && a.SignatureOK {
			delivered[a.EventID]++
			if strings.HasSuffix(a.Kind, "flapping") {
				flapping = append(flapping, a)
			}
		}
	}
	byID := map[string]AuditEvent{}
	for _, e := range c.allEvents {
		byID[e.EventID] = e
	}
	for _, e := range c.allEvents {
		if e.Kind != "mcp.server.unhealthy" {
			continue
		}
		ok := delivered[e.EventID] > 0
		why := ""
		if !ok {
			_, hasRow := outbox[e.EventID]
			for _, f := range flapping {
				if f.ServerID == e.ServerID && !f.OccurredAt.After(e.OccurredAt) && e.OccurredAt.Sub(f.OccurredAt) <= c.h.Params.FlapWindow && !hasRow {
					ok = true
				}
			}
			switch {
			case hasRow && attempts[e.EventID] > 0:
				why = fmt.Sprintf("its outbox row was posted %d times but never answered 2xx with a valid signature", attempts[e.EventID])
			case hasRow:
				why = fmt.Sprintf("its outbox row (delivered=%v, attempts=%d) never reached the webhook", outbox[e.EventID].Delivered, outbox[e.EventID].Attempts)
			case c.h.Final.Read:
				why = "it has no outbox row and no flapping alert of its server precedes it"
			default:
				why = "never delivered"
			}
		}
		if !c.check(InvAlertDelivered, ok) {
			c.violate(Violation{Invariant: InvAlertDelivered, At: e.OccurredAt, ServerID: e.ServerID, Module: c.moduleName(e.ServerID), Phase: c.phaseAt(e.OccurredAt),
				Message: fmt.Sprintf("unhealthy event %s not alerted: %s", e.EventID, why)})
		}
	}
	repeats := 0
	for _, a := range c.h.Alerts {
		ev, known := byID[a.EventID]
		var problems []string
		if !a.SignatureOK {
			problems = append(problems, "bad signature")
		}
		if a.HeaderID != a.EventID {
			problems = append(problems, "header event id "+a.HeaderID+" ≠ body "+a.EventID)
		}
		switch {
		case a.Kind == "mcp.server.unhealthy" || strings.HasSuffix(a.Kind, "flapping"):
			if !known || ev.Kind != "mcp.server.unhealthy" || ev.ServerID != a.ServerID || a.Status != "unhealthy" {
				problems = append(problems, "does not match an unhealthy audit event of server "+a.ServerID)
			}
		case a.BodyError != "":
			problems = append(problems, "unreadable body: "+a.BodyError)
		}
		if !c.check(InvAlertGenuine, len(problems) == 0) {
			c.violate(Violation{Invariant: InvAlertGenuine, At: a.At, ServerID: a.ServerID, Module: c.moduleName(a.ServerID),
				Message: fmt.Sprintf("alert %s (%s): %s", a.EventID, a.Kind, strings.Join(problems, "; "))})
		}
	}
	for _, n := range delivered {
		if n > 1 {
			repeats++
		}
	}
	kinds := map[string]int{}
	for _, a := range c.h.Alerts {
		kinds[a.Kind]++
	}
	c.info("alerts: %d deliveries of %d event ids (%d delivered more than once); by kind: %s", len(c.h.Alerts), len(attempts), repeats, formatOutcomes(kinds))
}
