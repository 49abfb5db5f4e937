// The durability invariants: what the service acknowledged (registration, deregistration, recovery, skill
// cascades) is what PostgreSQL holds, and a healthy server's heartbeat never waits on it.

package chaos

import (
	"fmt"
	"slices"
	"time"
)

// checkSkills: skill availability agrees with the committed status of the server. The cascade follows
// each transition's commit, and a cascade lost to a crash is repaired by the service's reconciliation
// (every ReconcileEvery), so a disagreement is a violation when it outlives one reconciliation period
// and 10 s, and at the very end (the suite waits a period for it).
func (c *checker) checkSkills() {
	limit := c.h.Params.ReconcileEvery + 10*time.Second
	type key struct{ server, status string }
	open := map[key]time.Time{}
	var scans []SkillsScan
	for _, s := range c.h.Skills {
		if s.OK {
			scans = append(scans, s)
		}
	}
	slices.SortStableFunc(scans, func(a, b SkillsScan) int { return a.At.Compare(b.At) })
	reported := map[key]bool{}
	longest := time.Duration(0)
	episodes := 0
	for _, s := range scans {
		now := map[key]bool{}
		for _, b := range s.Bad {
			k := key{b.ServerID, b.Status}
			now[k] = true
			if _, ok := open[k]; !ok {
				open[k] = s.At
				episodes++
			}
		}
		for k, since := range open {
			age := s.At.Sub(since)
			longest = max(longest, age)
			if !now[k] {
				delete(open, k)
				continue
			}
			if age > limit && !reported[k] {
				reported[k] = true
				c.violate(Violation{Invariant: InvSkillsConsistent, At: s.At, ServerID: k.server, Module: c.moduleName(k.server),
					Message: fmt.Sprintf("skills disagree with status %s for %s (since %s), longer than a reconciliation period + 10 s", k.status, age.Round(time.Second), ts(since))})
				c.counts[InvSkillsConsistent].Bad++
			}
		}
		if s.Checkpoint != "" {
			c.counts[InvSkillsConsistent].N += max(1, s.Servers)
		}
	}
	f := c.h.Final.Skills
	if c.h.Final.Read {
		c.counts[InvSkillsConsistent].N += max(1, f.Servers)
		for _, b := range f.Bad {
			if reported[key{b.ServerID, b.Status}] {
				continue
			}
			c.counts[InvSkillsConsistent].Bad++
			c.violate(Violation{Invariant: InvSkillsConsistent, At: f.At, ServerID: b.ServerID, Module: c.moduleName(b.ServerID),
				Message: fmt.Sprintf("at the end, %d skills disagree with status %s (after waiting a reconciliation period)", b.Bad, b.Status)})
		}
	}
	c.info("skills: %d disagreement episodes seen in %d scans, longest %s (allowed: until the next reconciliation, %s)", episodes, len(scans), longest.Round(time.Second), limit)
}

// checkRegistrations: every acknowledged registration and deregistration is committed, with its audit
// event, before it was acknowledged; a heartbeat is never told "not registered" after an acknowledged
// registration, nor "deregistered" unless the module deregistered.
func (c *checker) checkRegistrations() {
	final := map[string]FinalServer{}
	for _, s := range c.h.Final.Servers {
		final[s.ServerID] = s
	}
	for _, m := range c.h.Modules {
		acked, attempts, registeredEvents := 0, 0, 0
		for _, e := range c.events[m.ServerID] {
			if e.Kind == "mcp.server.registered" {
				registeredEvents++
			}
		}
		deregistered := false // by the module itself, since its last acknowledged registration
		for _, q := range c.byModule[m.Index] {
			switch q.Kind {
			case ReqRegister:
				attempts++
				if !q.Accepted() {
					continue
				}
				acked++
				deregistered = false
				ok := true
				var why string
				if fs, found := final[q.ServerID]; c.h.Final.Read && (!found || fs.ModuleName != m.Name) {
					ok, why = false, "no such server in mcp_servers at the end"
				}
				if ok {
					var ev *AuditEvent
					for i := range c.events[q.ServerID] {
						e := &c.events[q.ServerID][i]
						if e.Kind == "mcp.server.registered" && !e.OccurredAt.After(q.Done) && !e.OccurredAt.Before(q.Sent.Add(-50*time.Millisecond)) {
							ev = e
						}
					}
					if ev == nil {
						ok, why = false, "no registered audit event decided between its sending and its answer"
					}
				}
				if !c.check(InvRegistration, ok) {
					c.violate(Violation{Invariant: InvRegistration, At: q.Done, ServerID: q.ServerID, Module: m.Name, Phase: q.Phase,
						Message: "registration acknowledged (" + fmt.Sprint(q.Code) + ") but " + why, Timeline: []string{c.describeReq(q)}})
				}
			case ReqDeregister:
				if !q.Accepted() {
					continue
				}
				deregistered = true
				st, ev := c.statusAt(q.ServerID, q.Done)
				ok := st == "deregistered" && ev != nil && ev.Kind == "mcp.server.deregistered"
				if !c.check(InvDeregistration, ok) {
					tl := []string{c.describeReq(q)}
					if ev != nil {
						tl = append(tl, c.describeEvent(ev))
					}
					c.violate(Violation{Invariant: InvDeregistration, At: q.Done, ServerID: q.ServerID, Module: m.Name, Phase: q.Phase,
						Message: "deregistration acknowledged but the audit chain says " + orDash(st) + " at its answer", Timeline: tl})
				}
			case ReqHeartbeat:
				lost := q.Code == 404 && acked > 0
				phantom := q.Code == 409 && !deregistered
				if lost || phantom {
					c.check(InvRegistration, false)
					what := "heartbeat answered 404 server_not_registered after an acknowledged registration: the registration was lost"
					if phantom {
						what = "heartbeat answered 409 server_deregistered though the module never deregistered (or registered again, acknowledged)"
					}
					c.violate(Violation{Invariant: InvRegistration, At: q.Done, ServerID: q.ServerID, Module: m.Name, Phase: q.Phase,
						Message: what, Timeline: []string{c.describeReq(q)}})
				}
			}
		}
		if acked > 0 && !c.check(InvRegistration, registeredEvents >= acked && registeredEvents <= attempts) {
			c.violate(Violation{Invariant: InvRegistration, ServerID: m.ServerID, Module: m.Name, At: c.end,
				Message: fmt.Sprintf("%d registered audit events for %d acknowledged registrations out of %d attempts", registeredEvents, acked, attempts)})
		}
	}
}

// checkRecoveryDurable: a heartbeat answered "healthy" means the server's durable status was healthy
// while it was handled (a recovery is committed before it is acknowledged): either the status committed
// last among the events decided before its sending is healthy, or a healthy event (the recovery it
// caused, or a registration) was decided between its sending and its answer.
func (c *checker) checkRecoveryDurable() {
	reported := map[string]int{}
	for sid, qs := range c.byServer {
		for _, q := range qs {
			if q.Kind != ReqHeartbeat || !q.Accepted() {
				continue
			}
			st, ev := c.statusAt(sid, q.Sent)
			ok := st == "healthy"
			for i := range c.events[sid] {
				if e := &c.events[sid][i]; !ok && e.Status == "healthy" && !e.OccurredAt.Before(q.Sent) && !e.OccurredAt.After(q.Done) {
					ok = true
				}
			}
			if c.check(InvRecoveryDurable, ok) {
				continue
			}
			reported[sid]++
			if reported[sid] > 3 {
				continue // the first three per server are enough to show it
			}
			tl := []string{c.describeReq(q)}
			for i := range c.events[sid] {
				if e := &c.events[sid][i]; !e.OccurredAt.Before(q.Sent.Add(-5*c.H)) && !e.OccurredAt.After(q.Done.Add(c.H)) {
					tl = append(tl, c.describeEvent(e))
				}
			}
			if ev != nil {
				tl = append(tl, c.describeEvent(ev))
			}
			tl = append(tl, c.faultsNear(q.Sent.Add(-10*time.Second), q.Done, sid)...)
			c.violate(Violation{Invariant: InvRecoveryDurable, At: q.Done, ServerID: sid, Module: c.moduleName(sid), Phase: q.Phase,
				Message:  fmt.Sprintf("heartbeat answered healthy, but the durable status at its sending was %s and no recovery was decided before its answer", orDash(st)),
				Timeline: slices.Compact(slices.Sorted(slices.Values(tl)))})
		}
	}
	for sid, n := range reported {
		if n > 3 {
			c.info("%s: %d more heartbeats answered healthy against a non-healthy durable status", sid, n-3)
		}
	}
}

// deservesHealthy reports whether the server of heartbeat q is healthy by every measure when q is
// sent: its committed audit chain says healthy, and its previous heartbeat (or registration) was accepted
// less than 1.5H of the service's time before — so by the health model it cannot be anything else.
func (c *checker) deservesHealthy(q *Request) bool {
	var prev *Request
	for _, p := range c.byServer[q.ServerID] {
		if !p.Sent.Before(q.Sent) {
			break
		}
		if (p.Kind == ReqHeartbeat || p.Kind == ReqRegister) && p.Accepted() && !p.Done.After(q.Sent) {
			prev = p
		}
	}
	if prev == nil {
		return false
	}
	paused, _ := c.paused(prev.Sent, q.Sent)
	if q.Sent.Sub(prev.Sent)-paused >= 3*c.H/2 {
		return false
	}
	st, _ := c.statusAt(q.ServerID, q.Sent)
	return st == "healthy"
}

// checkHealthyPrompt: the heartbeat of a healthy server (see deservesHealthy) is answered by its actor
// without waiting on PostgreSQL (README, durability contract), so within 2H (beyond that a module's
// server could turn degraded; the usual answer takes a millisecond) — unless the process was stopped or
// restarting meanwhile, or the server's actor was being killed.
func (c *checker) checkHealthyPrompt() {
	var lat []time.Duration
	reported := 0
	for sid, qs := range c.byServer {
		for _, q := range qs {
			if q.Kind != ReqHeartbeat || q.Code == 0 && !q.Timeout || !c.deservesHealthy(q) {
				continue
			}
			if overlaps(c.downs, q.Sent, q.Done, 500*time.Millisecond) || overlaps(c.pauses, q.Sent, q.Done, 500*time.Millisecond) || c.actorFaultNear(sid, q.Sent) {
				continue
			}
			took := q.Done.Sub(q.Sent)
			lat = append(lat, took)
			if c.check(InvHealthyPrompt, took <= 2*c.H) {
				continue
			}
			reported++
			if reported > 20 {
				continue
			}
			tl := []string{c.describeReq(q)}
			for i := range c.events[sid] {
				if e := &c.events[sid][i]; !e.OccurredAt.Before(q.Sent.Add(-3*c.H)) && !e.OccurredAt.After(q.Done.Add(c.H)) {
					tl = append(tl, c.describeEvent(e))
				}
			}
			tl = append(tl, c.faultsNear(q.Sent.Add(-3*c.H), q.Done, sid)...)
			c.violate(Violation{Invariant: InvHealthyPrompt, At: q.Sent, ServerID: sid, Module: c.moduleName(sid), Phase: q.Phase,
				Message:  fmt.Sprintf("heartbeat of a healthy server (committed status healthy, previous heartbeat accepted less than 1.5H before) took %s to answer (%s)", took.Round(time.Millisecond), outcomeOf(q)),
				Timeline: slices.Compact(slices.Sorted(slices.Values(tl)))})
		}
	}
	if reported > 20 {
		c.info("%d more slow heartbeats of healthy servers not listed", reported-20)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		c.info("heartbeats of healthy servers: %d, latency p50 %s, p99 %s, p99.9 %s, max %s", len(lat), lat[len(lat)/2].Round(10*time.Microsecond),
			lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)*999/1000].Round(10*time.Microsecond), lat[len(lat)-1].Round(time.Millisecond))
	}
}
