// The checker's indexes over a history, and the questions the invariants ask of them: what was paused,
// down or faulted around a moment, what status a server had, how a request or an event reads in a timeline.

package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

func (c *checker) index() {
	h := c.h
	if c.end.IsZero() {
		c.end = time.Now()
	}
	c.moduleOf = map[string]ModuleInfo{}
	for _, m := range h.Modules {
		if m.ServerID != "" {
			c.moduleOf[m.ServerID] = m
		}
	}
	c.byServer = map[string][]*Request{}
	c.byModule = map[int][]*Request{}
	for i := range h.Requests {
		q := &h.Requests[i]
		if q.Module < 0 || q.Kind == ReqChaos {
			continue
		}
		c.byModule[q.Module] = append(c.byModule[q.Module], q)
		if q.ServerID != "" {
			c.byServer[q.ServerID] = append(c.byServer[q.ServerID], q)
		}
	}
	for _, qs := range c.byServer {
		slices.SortStableFunc(qs, bySent)
	}
	for _, qs := range c.byModule {
		slices.SortStableFunc(qs, bySent)
	}
	// The final read of the database is the record; the poller adds when each event was first seen.
	seen := map[string]time.Time{}
	for _, e := range h.Audit {
		seen[e.EventID] = e.FirstSeen
	}
	c.allEvents = append([]AuditEvent(nil), h.Final.Audit...)
	if !h.Final.Read {
		c.allEvents = append([]AuditEvent(nil), h.Audit...)
	}
	slices.SortStableFunc(c.allEvents, func(a, b AuditEvent) int { return cmp.Compare(a.Seq, b.Seq) })
	c.events = map[string][]AuditEvent{}
	for i := range c.allEvents {
		e := &c.allEvents[i]
		if t, ok := seen[e.EventID]; ok {
			e.FirstSeen = t
		}
		c.events[e.ServerID] = append(c.events[e.ServerID], *e)
	}
	c.silences = map[int][]Silence{}
	for _, s := range h.Silences {
		if s.End.IsZero() {
			s.End = c.end
		}
		c.silences[s.Module] = append(c.silences[s.Module], s)
	}
	c.faults = append([]Fault(nil), h.Faults...)
	slices.SortStableFunc(c.faults, func(a, b Fault) int { return a.Start.Compare(b.Start) })
	if h.Params.Nodes > 0 {
		c.indexCluster()
		return
	}
	for _, f := range c.faults {
		end := f.End
		if end.IsZero() {
			end = c.end
		}
		switch f.Kind {
		case FaultSigstop:
			c.pauses = append(c.pauses, Window{f.Start, end})
		case FaultKill9:
			c.downs = append(c.downs, Window{f.Start, end})
		case FaultDBStop, FaultDBRestart:
			c.outages = append(c.outages, Window{f.Start, end})
		}
	}
	// An incarnation that exited on its own is down until the next one is ready.
	for i, inc := range h.Incarnations {
		if inc.StopSent.IsZero() && !inc.End.IsZero() && i+1 < len(h.Incarnations) {
			c.downs = append(c.downs, Window{inc.End, h.Incarnations[i+1].Ready})
		}
	}
	// After the last incarnation was told to stop, nothing is expected of it.
	if n := len(h.Incarnations); n > 0 && !h.Incarnations[n-1].StopSent.IsZero() {
		c.downs = append(c.downs, Window{h.Incarnations[n-1].StopSent, c.end.Add(time.Hour)})
	}
}

// indexCluster builds the fault windows of a cluster schedule. A node fault or an etcd outage is a
// topology change: from its start to its end + the failover bound, servers may be between owners (held,
// with grace from their new owner's takeover: the deadline of a silent server is the window's end + 3H
// + M), so the window counts as down for the liveness, promptness and /readyz checks. Unanswered requests
// are excused only at the node that was not serving (killed until its restart was ready, stopped until
// continued). Pauses are not subtracted from any server's time: a stopped node's servers are taken by
// another node with grace, not held by the stopped one.
func (c *checker) indexCluster() {
	h := c.h
	nodeOf := map[string]int{}
	for _, n := range h.Nodes {
		nodeOf[n.Name] = n.Index
	}
	c.nodeDowns = map[int][]Window{}
	for _, f := range c.faults {
		end := f.End
		if end.IsZero() {
			end = c.end
		}
		switch f.Kind {
		case FaultNodeKill9, FaultNodeSigstop, FaultNodeCut:
			c.nodeDowns[nodeOf[f.Target]] = append(c.nodeDowns[nodeOf[f.Target]], Window{f.Start, end})
			c.downs = append(c.downs, Window{f.Start, end.Add(h.Params.FailoverBound)})
		case FaultEtcdStop, FaultNodeAdd:
			c.downs = append(c.downs, Window{f.Start, end.Add(h.Params.FailoverBound)})
		}
	}
	byNode := map[int][]Incarnation{}
	for _, inc := range h.Incarnations {
		byNode[inc.Node] = append(byNode[inc.Node], inc)
	}
	first := time.Time{}
	for n, incs := range byNode {
		for i, inc := range incs {
			if inc.StopSent.IsZero() && !inc.End.IsZero() {
				end := c.end
				if i+1 < len(incs) {
					end = incs[i+1].Ready
				}
				c.nodeDowns[n] = append(c.nodeDowns[n], Window{inc.End, end})
				c.downs = append(c.downs, Window{inc.End, end.Add(h.Params.FailoverBound)})
			}
		}
		if last := incs[len(incs)-1]; !last.StopSent.IsZero() && (first.IsZero() || last.StopSent.Before(first)) {
			first = last.StopSent
		}
	}
	// After the first node was told to stop at the end, nothing is expected of any.
	if !first.IsZero() {
		c.downs = append(c.downs, Window{first, c.end.Add(time.Hour)})
		for n := range byNode {
			c.nodeDowns[n] = append(c.nodeDowns[n], Window{first, c.end.Add(time.Hour)})
		}
	}
}

// bySent orders requests by when they were sent.
func bySent(a, b *Request) int { return a.Sent.Compare(b.Sent) }

// afterFirst is the comparison that makes slices.BinarySearchFunc find the first element whose time is
// after t (sort.Search's "first i with ts[i].After(t)"): every element at or before t sorts below t.
func afterFirst(at, t time.Time) int {
	if at.After(t) {
		return 1
	}
	return -1
}

// paused returns how much of [a, b] the process spent stopped (SIGSTOP), and in how many pauses.
func (c *checker) paused(a, b time.Time) (time.Duration, int) {
	var d time.Duration
	n := 0
	for _, p := range c.pauses {
		if o := overlap(p, a, b); o > 0 {
			d += o
			n++
		}
	}
	return d, n
}

func overlap(w Window, a, b time.Time) time.Duration {
	s, e := w.Start, w.End
	if a.After(s) {
		s = a
	}
	if b.Before(e) {
		e = b
	}
	if e.After(s) {
		return e.Sub(s)
	}
	return 0
}

func within(ws []Window, t time.Time, before, after time.Duration) bool {
	for _, w := range ws {
		if !t.Before(w.Start.Add(-before)) && !t.After(w.End.Add(after)) {
			return true
		}
	}
	return false
}

func overlaps(ws []Window, a, b time.Time, slack time.Duration) bool {
	for _, w := range ws {
		if a.Before(w.End.Add(slack)) && b.After(w.Start.Add(-slack)) {
			return true
		}
	}
	return false
}

// faultsNear lists the faults whose window touches [a, b], for timelines.
func (c *checker) faultsNear(a, b time.Time, server string) []string {
	var out []string
	for _, f := range c.faults {
		end := f.End
		if end.IsZero() {
			end = c.end
		}
		if end.Before(a) || f.Start.After(b) || f.Kind == FaultChurn {
			continue
		}
		switch f.Kind {
		case FaultServerPanic, FaultServerStop, FaultServerPoison:
			if f.Target != server {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s  fault %s until %s %s", ts(f.Start), f.Kind, ts(end), f.Target))
	}
	return out
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Format("15:04:05.000")
}

func (c *checker) moduleName(server string) string { return c.moduleOf[server].Name }

// statusAt is the server's status by the last committed (highest seq) of its audit events decided
// (occurred_at) at or before t.
func (c *checker) statusAt(server string, t time.Time) (string, *AuditEvent) {
	var last *AuditEvent
	evs := c.events[server]
	for i := range evs {
		if e := &evs[i]; !e.OccurredAt.After(t) && (last == nil || e.Seq > last.Seq) {
			last = e
		}
	}
	if last == nil {
		return "", nil
	}
	return last.Status, last
}

func (c *checker) describeReq(q *Request) string {
	out := fmt.Sprintf("%s  %s sent, answered %s: ", ts(q.Sent), q.Kind, ts(q.Done))
	switch {
	case q.Code == 0:
		out += "no answer (" + q.Err + "; " + orDash(q.Conn)
		if q.Node < len(c.h.Nodes) {
			out += ", to " + c.h.Nodes[q.Node].Name
		}
		out += ")"
	case q.Accepted():
		out += fmt.Sprintf("%d %s", q.Code, q.Status)
	default:
		out += fmt.Sprintf("%d %s %q", q.Code, q.Problem, q.Detail)
	}
	return out
}

func (c *checker) describeEvent(e *AuditEvent) string {
	return fmt.Sprintf("%s  audit %s (%s → %s) seq %d, first seen %s", ts(e.OccurredAt), e.Kind, orDash(e.From), e.Status, e.Seq, ts(e.FirstSeen))
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func (c *checker) phaseAt(t time.Time) string {
	ps := c.h.Phases
	i, _ := slices.BinarySearchFunc(ps, t, func(p PhaseMark, t time.Time) int { return afterFirst(p.At, t) })
	if i == 0 {
		return ""
	}
	return ps[i-1].Name
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
