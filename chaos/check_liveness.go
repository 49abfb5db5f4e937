// The liveness invariants: never unhealthy early, never a false alarm for a module that kept heartbeating,
// and a silent server declared unhealthy in time.

package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// receiptLatency bounds how long an accepted heartbeat takes from its sending to reaching its server's
// actor on loopback when the process is not stopped: one heartbeat interval (a hundred times the usual
// latency, so CPU starvation of a loaded machine does not make a late arrival look early). A heartbeat
// that caused a recovery needs no bound: the service stamps its arrival in the recovered event.
func (c *checker) receiptLatency() time.Duration { return max(250*time.Millisecond, c.H) }

// evidence is one heartbeat (or registration) the service accepted, and the earliest moment it can
// have been received by the service: its sending, or the service's own stamp of it when it caused a
// recovery (the recovered event's occurred_at).
type evidence struct {
	q  *Request
	at time.Time
}

// evidenceBefore returns the accepted heartbeats and registrations of server that the service had
// certainly received before t: answered before t, stamped by the service before t, or sent at least the
// receipt latency (plus any pause of the process) before t.
func (c *checker) evidenceBefore(server string, t time.Time) []evidence {
	var out []evidence
	L := c.receiptLatency()
	for _, q := range c.byServer[server] {
		if (q.Kind != ReqHeartbeat && q.Kind != ReqRegister) || !q.Accepted() || !q.Sent.Before(t) {
			continue
		}
		at, stamped := q.Sent, false
		for i := range c.events[server] {
			if e := &c.events[server][i]; e.Kind == "mcp.server.recovered" && !e.OccurredAt.Before(q.Sent) && !e.OccurredAt.After(q.Done) {
				at, stamped = e.OccurredAt, true
			}
		}
		p, _ := c.paused(q.Sent, t)
		if q.Done.Before(t) || (stamped && at.Before(t)) || t.Sub(q.Sent)-p >= L {
			out = append(out, evidence{q, at})
		}
	}
	return out
}

// checkNoEarlyUnhealthy: no unhealthy verdict less than 3H of the service's own time after it
// received a heartbeat it accepted. A heartbeat counts from its sending (or the service's own stamp of
// it) if it was answered before the verdict, stamped before it, or sent at least the receipt latency
// before it; the service's own time excludes the process's pauses (SIGSTOP), which the self-health
// guard measures with the monitor's resolution: one period per pause of slack.
func (c *checker) checkNoEarlyUnhealthy() {
	for _, e := range c.allEvents {
		if e.Kind != "mcp.server.unhealthy" {
			continue
		}
		ev := c.evidenceBefore(e.ServerID, e.OccurredAt)
		if len(ev) == 0 {
			c.check(InvNoEarlyUnhealthy, true)
			continue
		}
		last := ev[0]
		for _, x := range ev {
			if x.at.After(last.at) {
				last = x
			}
		}
		p, n := c.paused(last.at, e.OccurredAt)
		lag := e.OccurredAt.Sub(last.at) - p
		tol := c.h.Params.EarlyTolerance + time.Duration(n)*c.M
		if c.check(InvNoEarlyUnhealthy, lag >= 3*c.H-tol) {
			continue
		}
		var tl []string
		for _, x := range ev[max(0, len(ev)-3):] {
			tl = append(tl, c.describeReq(x.q))
		}
		for i := range c.events[e.ServerID] {
			if x := &c.events[e.ServerID][i]; !x.OccurredAt.Before(last.at.Add(-3*c.H)) && !x.OccurredAt.After(e.OccurredAt.Add(c.H)) {
				tl = append(tl, c.describeEvent(x))
			}
		}
		tl = append(tl, c.faultsNear(last.at.Add(-time.Second), e.OccurredAt.Add(time.Second), e.ServerID)...)
		received := "sent"
		if last.at != last.q.Sent {
			received = "stamped by the service"
		}
		msg := fmt.Sprintf("unhealthy %s after a heartbeat it accepted (%s %s, answered %s); the process was stopped %s of that: service-measured silence %s < 3H = %s",
			e.OccurredAt.Sub(last.at).Round(time.Millisecond), received, ts(last.at), ts(last.q.Done), p.Round(time.Millisecond), lag.Round(time.Millisecond), 3*c.H)
		c.violate(Violation{Invariant: InvNoEarlyUnhealthy, At: e.OccurredAt, ServerID: e.ServerID, Module: c.moduleName(e.ServerID),
			Phase: c.phaseAt(e.OccurredAt), Message: msg, Timeline: slices.Compact(slices.Sorted(slices.Values(tl)))})
	}
}

// checkNoFalseAlarm: a module the suite never silenced, which kept sending heartbeats every H (no gap
// of 2H in the suite's own sending, measured without the process's pauses), is never declared
// unhealthy — whatever happened to the service meanwhile (its database away, its actors killed, the
// process restarted or paused): that is what restart grace, the self-health guard and the outage
// behaviour promise.
func (c *checker) checkNoFalseAlarm() {
	for _, e := range c.allEvents {
		if e.Kind != "mcp.server.unhealthy" {
			continue
		}
		m, ok := c.moduleOf[e.ServerID]
		if !ok {
			continue
		}
		span := 3*c.H + c.M
		from := e.OccurredAt.Add(-span)
		p, _ := c.paused(from, e.OccurredAt)
		from = from.Add(-p)
		if c.silentDuring(m.Index, from.Add(-c.H), e.OccurredAt) || !c.registeredBefore(m.Index, from) {
			continue // the module was deliberately quiet (or not yet there): not a false alarm
		}
		var busy []Window
		var tl []string
		outcome := map[string]int{}
		for _, q := range c.byModule[m.Index] {
			if q.Kind != ReqHeartbeat || q.Done.Before(from) || q.Sent.After(e.OccurredAt) {
				continue
			}
			if q.Code == 0 && c.nodeDowns != nil && overlaps(c.nodeDowns[q.Node], q.Sent, q.Done, 500*time.Millisecond) {
				continue // sent to a node that was not serving: it reached nobody (the next one went elsewhere)
			}
			busy = append(busy, Window{q.Sent, q.Done})
			outcome[outcomeOf(q)]++
			tl = append(tl, c.describeReq(q))
		}
		gap := c.maxGap(from, e.OccurredAt, busy)
		if gap >= 2*c.H {
			c.info("inconclusive false-alarm check: %s unhealthy at %s, but the suite itself had no heartbeat sent or in flight for %s before it", m.Name, ts(e.OccurredAt), gap.Round(time.Millisecond))
			continue
		}
		c.check(InvNoFalseAlarm, false)
		tl = append(tl, c.describeEvent(&e))
		tl = append(tl, c.faultsNear(from.Add(-5*time.Second), e.OccurredAt, e.ServerID)...)
		c.violate(Violation{Invariant: InvNoFalseAlarm, At: e.OccurredAt, ServerID: e.ServerID, Module: m.Name, Phase: c.phaseAt(e.OccurredAt),
			Message: fmt.Sprintf("declared unhealthy while its module heartbeated every H (largest gap %s); its heartbeats in the 3H + M before: %s",
				gap.Round(time.Millisecond), formatOutcomes(outcome)),
			Timeline: slices.Sorted(slices.Values(tail3(tl, 12)))})
	}
	// Every live module at every unhealthy verdict of another counts as a check that passed only if it
	// was not itself declared; count the live module-verdict pairs cheaply: one check per module per
	// phase in which it was live throughout.
	for _, m := range c.h.Modules {
		phases := map[string]bool{}
		for _, q := range c.byModule[m.Index] {
			if q.Kind == ReqHeartbeat && q.Phase != "" && !phases[q.Phase] {
				phases[q.Phase] = true
				c.counts[InvNoFalseAlarm].N++
			}
		}
	}
}

func tail3(lines []string, n int) []string {
	if len(lines) > n {
		return append([]string{fmt.Sprintf("(%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return lines
}

func outcomeOf(q *Request) string {
	switch {
	case q.Code == 0:
		return "no answer: " + q.Err
	case q.Accepted():
		return fmt.Sprintf("%d", q.Code)
	default:
		return fmt.Sprintf("%d %s (%s)", q.Code, q.Problem, q.Detail)
	}
}

func formatOutcomes(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d× %s", m[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// maxGap is the longest stretch of [from, to] during which the module had no heartbeat in flight (a
// request counts from its sending to its answer), not counting the process's pauses.
func (c *checker) maxGap(from, to time.Time, busy []Window) time.Duration {
	slices.SortFunc(busy, func(a, b Window) int { return a.Start.Compare(b.Start) })
	var g time.Duration
	cur := from
	gapTo := func(t time.Time) {
		if t.After(cur) {
			p, _ := c.paused(cur, t)
			g = max(g, t.Sub(cur)-p)
		}
	}
	for _, w := range busy {
		gapTo(minTime(w.Start, to))
		cur = maxTime(cur, w.End)
	}
	gapTo(to)
	return g
}

func (c *checker) silentDuring(module int, a, b time.Time) bool {
	for _, s := range c.silences[module] {
		if s.Start.Before(b) && s.End.After(a) {
			return true
		}
	}
	return false
}

func (c *checker) registeredBefore(module int, t time.Time) bool {
	for _, q := range c.byModule[module] {
		if q.Kind == ReqRegister && q.Accepted() && q.Done.Before(t) {
			return true
		}
	}
	return false
}

// checkSilentUnhealthy: every server the suite silenced long enough is declared unhealthy within
// 3H + one monitor period (+ Tolerance) of its last evidence — the answer of its module's last
// request — unless a fault legitimately held it, and then by the end of the hold:
//   - the process stopped (SIGSTOP): the deadline moves by the pause;
//   - the process killed and restarted: restart grace counts 3H + M from the new process being ready;
//   - PostgreSQL away: the transition commits within 3 s + M of the database being back;
//   - the writer, or the server's own actor, killed: one more monitor period or two;
//   - the self-health guard logging a stall ("monitor stalled"): the deadline moves by the stall.
func (c *checker) checkSilentUnhealthy() {
	tol := c.h.Params.Tolerance
	var latencies []time.Duration
	short := 0
	for _, s := range c.h.Silences {
		if s.Reason != SilenceDrop {
			continue
		}
		m := c.h.Modules[s.Module]
		if m.ServerID == "" {
			continue
		}
		end := s.End
		if end.IsZero() {
			end = c.end
		}
		var last *Request
		for _, q := range c.byModule[s.Module] {
			if q.Sent.Before(s.Start) && (q.Kind == ReqHeartbeat || q.Kind == ReqRegister) {
				last = q
			}
		}
		if last == nil {
			continue
		}
		E := last.Done
		for _, p := range c.pauses {
			if last.Sent.Before(p.End) && last.Done.After(p.Start) && p.End.After(E) {
				E = p.End
			}
		}
		d, holds := c.deadline(s.Module, m.ServerID, E, 3*c.H+c.M+tol)
		if end.Before(d) {
			short++
			continue // not silent long enough to judge
		}
		st, _ := c.statusAt(m.ServerID, E)
		var first *AuditEvent
		for i := range c.events[m.ServerID] {
			ev := &c.events[m.ServerID][i]
			if ev.Kind == "mcp.server.unhealthy" && !ev.OccurredAt.Before(E.Add(-3*c.H)) && (first == nil || ev.OccurredAt.Before(first.OccurredAt)) {
				first = ev
			}
		}
		ok := st == "unhealthy" || (first != nil && !first.OccurredAt.After(d))
		if first != nil {
			latencies = append(latencies, first.OccurredAt.Sub(E))
		}
		if c.check(InvSilentUnhealthy, ok) {
			continue
		}
		tl := []string{c.describeReq(last)}
		for i := range c.events[m.ServerID] {
			ev := &c.events[m.ServerID][i]
			if !ev.OccurredAt.Before(E.Add(-3*c.H)) && !ev.OccurredAt.After(end.Add(5*time.Second)) {
				tl = append(tl, c.describeEvent(ev))
			}
		}
		tl = append(tl, fmt.Sprintf("%s  silence of the module began (phase %s)", ts(s.Start), s.Phase))
		tl = append(tl, fmt.Sprintf("%s  deadline (holds: %s)", ts(d), strings.Join(holds, "; ")))
		tl = append(tl, fmt.Sprintf("%s  silence of the module ended", ts(end)))
		tl = append(tl, c.faultsNear(E, d, m.ServerID)...)
		msg := fmt.Sprintf("silent since its last answer at %s; deadline %s (%s after): ", ts(E), ts(d), d.Sub(E).Round(time.Millisecond))
		if first == nil {
			msg += "never declared unhealthy"
		} else {
			msg += fmt.Sprintf("declared unhealthy only at %s, %s late", ts(first.OccurredAt), first.OccurredAt.Sub(d).Round(time.Millisecond))
		}
		c.violate(Violation{Invariant: InvSilentUnhealthy, At: d, ServerID: m.ServerID, Module: m.Name, Phase: s.Phase, Message: msg, Timeline: slices.Sorted(slices.Values(tl))})
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		c.info("silence → unhealthy (occurred_at − last answer): %d silences judged, p50 %s, p99 %s, max %s (bound 3H + M + tolerance = %s before holds); %d silences too short to judge",
			len(latencies), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)*99/100].Round(time.Millisecond),
			latencies[len(latencies)-1].Round(time.Millisecond), 3*c.H+c.M+tol, short)
	}
}

// deadline returns when a server silent since E must be unhealthy at the latest, and the holds applied.
func (c *checker) deadline(module int, server string, E time.Time, bound time.Duration) (time.Time, []string) {
	tol := c.h.Params.Tolerance
	d := E.Add(bound)
	var holds []string
	applied := map[string]bool{}
	for range 50 {
		changed := false
		apply := func(key string, nd time.Time, why string) {
			if applied[key] {
				return
			}
			applied[key] = true
			if nd.After(d) {
				d = nd
				changed = true
				holds = append(holds, why)
			}
		}
		for i, p := range c.pauses {
			if p.Start.Before(d) && p.End.After(E) {
				pd := p.End.Sub(maxTime(p.Start, E))
				apply(fmt.Sprintf("p%d", i), d.Add(pd), fmt.Sprintf("SIGSTOP %s", pd.Round(time.Millisecond)))
			}
		}
		for i, w := range c.downs {
			if w.Start.Before(d) && w.End.After(E) {
				apply(fmt.Sprintf("k%d", i), w.End.Add(bound), fmt.Sprintf("restart grace from ready at %s", ts(w.End)))
			}
		}
		for i, o := range c.outages {
			if o.Start.Before(d) && o.End.After(E) {
				apply(fmt.Sprintf("o%d", i), o.End.Add(3*time.Second+c.M+tol), fmt.Sprintf("PostgreSQL back at %s", ts(o.End)))
			}
		}
		for i, f := range c.faults {
			if f.Start.Before(E) || !f.Start.Before(d) {
				continue
			}
			switch {
			case f.Kind == FaultWriterPanic:
				apply(fmt.Sprintf("f%d", i), f.Start.Add(2*c.M+tol), "writer panic at "+ts(f.Start))
			case (f.Kind == FaultServerPanic || f.Kind == FaultServerStop || f.Kind == FaultServerPoison) && f.Target == server:
				apply(fmt.Sprintf("f%d", i), f.Start.Add(2*c.M+tol), "its actor killed at "+ts(f.Start))
			}
		}
		for i, s := range c.h.Stalls {
			if s.At.After(E) && s.At.Before(d) && !within(c.pauses, s.At, 0, 2*time.Second) {
				apply(fmt.Sprintf("s%d", i), d.Add(s.Stall), fmt.Sprintf("monitor stall %s logged at %s", s.Stall.Round(time.Millisecond), ts(s.At)))
			}
		}
		if !changed {
			break
		}
	}
	if len(holds) == 0 {
		holds = []string{"none"}
	}
	return d, holds
}
