package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The invariants, as named in the report.
const (
	InvNoEarlyUnhealthy   = "never unhealthy within 3H of an accepted heartbeat"
	InvNoFalseAlarm       = "a module that kept heartbeating is never unhealthy"
	InvSilentUnhealthy    = "a silent server is unhealthy within 3H + monitor period"
	InvSkillsConsistent   = "skills agree with their server's status"
	InvRegistration       = "acknowledged registration durable"
	InvDeregistration     = "acknowledged deregistration durable"
	InvRecoveryDurable    = "acknowledged heartbeat: durable status healthy"
	InvHealthyPrompt      = "heartbeat of a healthy server never waits on PostgreSQL"
	InvAuditChain         = "audit chain: no transition lost or doubled"
	InvAuditRetained      = "audit event seen once, kept unchanged"
	InvStatusMatchesLast  = "server status = its last audit event"
	InvAlertDelivered     = "unhealthy event alerted at least once"
	InvAlertGenuine       = "alert signed and matching an audit event"
	InvOutageHeartbeats   = "heartbeats accepted during a database outage"
	InvRefusedNotRecorded = "503 \"nothing was recorded\": nothing recorded later"
	InvReadyz             = "/readyz reports the database outage"
	InvWellFormed         = "no 500, every 503 has Retry-After"
	InvAnswered           = "every request answered while the process runs"
	InvProcess            = "process exits only when told, gracefully on SIGTERM"
)

var invariantOrder = []string{
	InvNoEarlyUnhealthy, InvNoFalseAlarm, InvSilentUnhealthy, InvSkillsConsistent, InvRegistration,
	InvDeregistration, InvRecoveryDurable, InvHealthyPrompt, InvAuditChain, InvAuditRetained, InvStatusMatchesLast,
	InvAlertDelivered, InvAlertGenuine, InvOutageHeartbeats, InvRefusedNotRecorded, InvReadyz, InvWellFormed, InvAnswered, InvProcess,
}

var faultOrder = []string{
	FaultServerPanic, FaultServerStop, FaultServerPoison, FaultWriterPanic, FaultStamperPanic, FaultAlertsPanic,
	FaultWebhookFlaky, FaultKill9, FaultDBStop, FaultDBRestart, FaultSigstop, FaultDrop10, FaultDrop60, FaultDrop100, FaultChurn,
}

// Violation is one broken invariant, with the timeline that shows it.
type Violation struct {
	Invariant string    `json:"invariant"`
	At        time.Time `json:"at"`
	ServerID  string    `json:"server_id,omitempty"`
	Module    string    `json:"module,omitempty"`
	Phase     string    `json:"phase,omitempty"`
	Message   string    `json:"message"`
	Timeline  []string  `json:"timeline,omitempty"`
}

// Report is the outcome of Check.
type Report struct {
	Faults     []Count     `json:"faults"`     // per fault kind: injected, survived
	Invariants []Count     `json:"invariants"` // per invariant: checked, violated
	Violations []Violation `json:"violations"`
	Info       []string    `json:"info"`
	SuiteError string      `json:"suite_error,omitempty"`
	Start      time.Time   `json:"start"`
}

// Count is one row of a table of the report.
type Count struct {
	Name string `json:"name"`
	N    int    `json:"n"`    // faults injected / checks made
	Good int    `json:"good"` // faults survived / checks passed
	Bad  int    `json:"bad"`  // faults not survived / violations
}

// checker holds the indexes Check builds over a history.
type checker struct {
	h   *History
	rep *Report
	H   time.Duration
	M   time.Duration

	moduleOf  map[string]ModuleInfo // server id → module
	byServer  map[string][]*Request // module requests about a server, by Sent
	byModule  map[int][]*Request    // module requests of a module, by Sent
	events    map[string][]AuditEvent
	allEvents []AuditEvent // final audit (or the poller's), by seq
	silences  map[int][]Silence
	pauses    []Window
	downs     []Window // process not serving: from kill (or unexpected exit) to the next ready
	outages   []Window
	faults    []Fault
	counts    map[string]*Count
	end       time.Time
}

// Check checks every invariant on h and returns the report. It reads h only.
func Check(h *History) *Report {
	c := &checker{h: h, rep: &Report{Start: h.Started}, H: h.Params.Heartbeat, M: h.Params.Monitor, counts: map[string]*Count{}, end: h.Ended}
	for _, n := range invariantOrder {
		c.counts[n] = &Count{Name: n}
	}
	c.index()
	c.checkNoEarlyUnhealthy()
	c.checkNoFalseAlarm()
	c.checkSilentUnhealthy()
	c.checkSkills()
	c.checkRegistrations()
	c.checkRecoveryDurable()
	c.checkHealthyPrompt()
	c.checkAudit()
	c.checkAlerts()
	c.checkOutageHeartbeats()
	c.checkRefusedNotRecorded()
	c.checkReadyz()
	c.checkResponses()
	c.checkProcess()
	c.countFaults()
	for _, n := range invariantOrder {
		cnt := c.counts[n]
		cnt.Good = cnt.N - cnt.Bad
		c.rep.Invariants = append(c.rep.Invariants, *cnt)
	}
	sort.SliceStable(c.rep.Violations, func(i, j int) bool { return c.rep.Violations[i].At.Before(c.rep.Violations[j].At) })
	return c.rep
}

func (c *checker) check(inv string, ok bool) bool {
	c.counts[inv].N++
	if !ok {
		c.counts[inv].Bad++
	}
	return ok
}

func (c *checker) violate(v Violation) {
	c.rep.Violations = append(c.rep.Violations, v)
}

func (c *checker) info(format string, args ...any) {
	c.rep.Info = append(c.rep.Info, fmt.Sprintf(format, args...))
}

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
		sort.SliceStable(qs, func(i, j int) bool { return qs[i].Sent.Before(qs[j].Sent) })
	}
	for _, qs := range c.byModule {
		sort.SliceStable(qs, func(i, j int) bool { return qs[i].Sent.Before(qs[j].Sent) })
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
	sort.SliceStable(c.allEvents, func(i, j int) bool { return c.allEvents[i].Seq < c.allEvents[j].Seq })
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
	sort.SliceStable(c.faults, func(i, j int) bool { return c.faults[i].Start.Before(c.faults[j].Start) })
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
		out += "no answer (" + q.Err + ")"
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
			Phase: c.phaseAt(e.OccurredAt), Message: msg, Timeline: sortLines(dedup(tl))})
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
			Timeline: sortLines(tail3(tl, 12))})
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
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
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
	sort.Slice(busy, func(i, j int) bool { return busy[i].Start.Before(busy[j].Start) })
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

func (c *checker) phaseAt(t time.Time) string {
	ps := c.h.Phases
	i := sort.Search(len(ps), func(i int) bool { return ps[i].At.After(t) })
	if i == 0 {
		return ""
	}
	return ps[i-1].Name
}

func sortLines(lines []string) []string {
	sort.SliceStable(lines, func(i, j int) bool { return lines[i] < lines[j] })
	return lines
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
		c.violate(Violation{Invariant: InvSilentUnhealthy, At: d, ServerID: m.ServerID, Module: m.Name, Phase: s.Phase, Message: msg, Timeline: sortLines(tl)})
	}
	if len(latencies) > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

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
	sort.SliceStable(scans, func(i, j int) bool { return scans[i].At.Before(scans[j].At) })
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
				Timeline: sortLines(dedup(tl))})
		}
	}
	for sid, n := range reported {
		if n > 3 {
			c.info("%s: %d more heartbeats answered healthy against a non-healthy durable status", sid, n-3)
		}
	}
}

func dedup(lines []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
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
				Timeline: sortLines(dedup(tl))})
		}
	}
	if reported > 20 {
		c.info("%d more slow heartbeats of healthy servers not listed", reported-20)
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		c.info("heartbeats of healthy servers: %d, latency p50 %s, p99 %s, p99.9 %s, max %s", len(lat), lat[len(lat)/2].Round(10*time.Microsecond),
			lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)*999/1000].Round(10*time.Microsecond), lat[len(lat)-1].Round(time.Millisecond))
	}
}

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
			ok := statusOfKind[e.Kind] == e.Status && contains(allowedFrom[e.Kind], e.From) && e.From == prev
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
		sort.Slice(lag, func(i, j int) bool { return lag[i] < lag[j] })
		c.info("audit: %d events; decided → seen by the poller: p50 %s, p99 %s, max %s", len(c.allEvents),
			lag[len(lag)/2].Round(time.Millisecond), lag[len(lag)*99/100].Round(time.Millisecond), lag[len(lag)-1].Round(time.Millisecond))
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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

// checkResponses: every answer is well formed — no 500 or other 5xx than 503, every 503 with
// Retry-After, no 4xx the suite's valid requests should not get (404 and 409 of heartbeats are judged
// by the registration invariant) — and every request is answered while the process runs and is not
// stopped (no timeout, no refused or reset connection).
func (c *checker) checkResponses() {
	bad := map[string][]*Request{}
	unanswered := map[string][]*Request{}
	for i := range c.h.Requests {
		q := &c.h.Requests[i]
		if q.Code != 0 {
			c.check(InvAnswered, true)
		}
		if q.Kind == ReqReadyz && q.Code != 0 {
			continue // a probe, not a problem answer: judged by the /readyz invariant
		}
		if q.Code == 0 {
			excused := overlaps(c.downs, q.Sent, q.Done, 500*time.Millisecond) || overlaps(c.pauses, q.Sent, q.Done, 500*time.Millisecond)
			if !c.check(InvAnswered, excused) {
				k := q.Kind + ": " + q.Err
				unanswered[k] = append(unanswered[k], q)
			}
			continue
		}
		ok := true
		switch {
		case q.Code == 503:
			ok = q.Retry != ""
		case q.Code >= 500:
			ok = false
		case q.Code == 404 || q.Code == 409:
			ok = q.Kind == ReqHeartbeat || q.Kind == ReqDeregister
		case q.Code >= 400:
			ok = false
		}
		if !c.check(InvWellFormed, ok) {
			k := fmt.Sprintf("%s %d %s (Retry-After %q)", q.Kind, q.Code, q.Problem, q.Retry)
			bad[k] = append(bad[k], q)
		}
	}
	for _, m := range []map[string][]*Request{bad, unanswered} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			qs := m[k]
			inv := InvWellFormed
			if qs[0].Code == 0 {
				inv = InvAnswered
			}
			var tl []string
			for _, q := range qs[:min(5, len(qs))] {
				tl = append(tl, fmt.Sprintf("%s (phase %s, server %s)", c.describeReq(q), q.Phase, q.ServerID))
			}
			c.violate(Violation{Invariant: inv, At: qs[0].Sent, Phase: qs[0].Phase,
				Message: fmt.Sprintf("%d× %s, from %s to %s", len(qs), k, ts(qs[0].Sent), ts(qs[len(qs)-1].Sent)), Timeline: tl})
		}
	}
}

// checkProcess: the process exits only when the suite tells it to; the last one shuts down on SIGTERM
// with exit status 0 within 20 s (the service's own shutdown bound) plus 5 s.
func (c *checker) checkProcess() {
	for i, inc := range c.h.Incarnations {
		switch {
		case inc.StopSent.IsZero() && !inc.End.IsZero():
			c.check(InvProcess, false)
			c.violate(Violation{Invariant: InvProcess, At: inc.End, Message: fmt.Sprintf("incarnation %d (pid %d) exited on its own: %s; see %s", inc.N, inc.PID, inc.Exit, inc.Log)})
		case inc.Signal == "terminated" && i == len(c.h.Incarnations)-1:
			took := inc.End.Sub(inc.StopSent)
			if !c.check(InvProcess, inc.ExitCode == 0 && took <= 25*time.Second) {
				c.violate(Violation{Invariant: InvProcess, At: inc.End, Message: fmt.Sprintf("graceful shutdown: %s after %s (want exit status 0 within 25 s)", inc.Exit, took.Round(time.Millisecond))})
			}
		default:
			c.check(InvProcess, true)
		}
	}
}

// countFaults tallies the faults and whether the service survived each: it accepted a heartbeat again
// within 30 s of the fault's end (of the very server, for an actor fault of a server that was not
// silenced then).
func (c *checker) countFaults() {
	counts := map[string]*Count{}
	var accepted []*Request
	for i := range c.h.Requests {
		q := &c.h.Requests[i]
		if q.Kind == ReqHeartbeat && q.Accepted() {
			accepted = append(accepted, q)
		}
	}
	sort.Slice(accepted, func(i, j int) bool { return accepted[i].Sent.Before(accepted[j].Sent) })
	for _, f := range c.faults {
		cnt := counts[f.Kind]
		if cnt == nil {
			cnt = &Count{Name: f.Kind}
			counts[f.Kind] = cnt
		}
		cnt.N++
		end := f.End
		if end.IsZero() {
			end = c.end
		}
		survived := false
		i := sort.Search(len(accepted), func(i int) bool { return accepted[i].Sent.After(end) })
		for ; i < len(accepted) && accepted[i].Sent.Before(end.Add(30*time.Second)); i++ {
			switch f.Kind {
			case FaultServerPanic, FaultServerStop, FaultServerPoison:
				if accepted[i].ServerID != f.Target {
					continue
				}
			}
			survived = true
			break
		}
		if f.Kind == FaultChurn {
			survived = false
			for _, m := range c.h.Modules {
				if m.Name != f.Target {
					continue
				}
				for _, q := range c.byModule[m.Index] {
					if q.Kind == ReqRegister && q.Accepted() && q.Sent.After(f.Start) {
						survived = true
						break
					}
				}
			}
		}
		if !survived && (f.Kind == FaultServerPanic || f.Kind == FaultServerStop || f.Kind == FaultServerPoison) {
			// A silenced server's first accepted heartbeat comes when its silence ends.
			for _, q := range c.byServer[f.Target] {
				if q.Kind == ReqHeartbeat && q.Accepted() && q.Sent.After(end) {
					survived = true
					break
				}
			}
		}
		if survived {
			cnt.Good++
		} else {
			cnt.Bad++
		}
	}
	for _, k := range faultOrder {
		if cnt, ok := counts[k]; ok {
			c.rep.Faults = append(c.rep.Faults, *cnt)
		}
	}
	stall := time.Duration(0)
	for _, s := range c.h.Stalls {
		stall += s.Stall
	}
	c.info("self-health guard: %d \"monitor stalled\" lines logged, %s in total", len(c.h.Stalls), stall.Round(time.Millisecond))
}

// String renders the report: the fault table, the invariant table, the violations with their
// timelines, and the notes.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nFAULTS                                   injected  survived\n")
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %-38s %8d  %8d\n", f.Name, f.N, f.Good)
	}
	fmt.Fprintf(&b, "\nINVARIANTS                                                    checked  violated\n")
	for _, i := range r.Invariants {
		fmt.Fprintf(&b, "  %-59s %8d  %8d\n", i.Name, i.N, i.Bad)
	}
	if len(r.Info) > 0 {
		fmt.Fprintf(&b, "\nNOTES\n")
		for _, s := range r.Info {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "\nVIOLATIONS (%d)\n", len(r.Violations))
		shown := map[string]int{}
		for _, v := range r.Violations {
			shown[v.Invariant]++
			if shown[v.Invariant] > 10 {
				continue
			}
			fmt.Fprintf(&b, "- [%s] %s", v.Invariant, ts(v.At))
			if v.Phase != "" {
				fmt.Fprintf(&b, " phase %s", v.Phase)
			}
			if v.ServerID != "" {
				fmt.Fprintf(&b, " server %s (%s)", v.ServerID, v.Module)
			}
			fmt.Fprintf(&b, "\n    %s\n", v.Message)
			for _, l := range v.Timeline {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
		for _, inv := range invariantOrder {
			if n := shown[inv]; n > 10 {
				fmt.Fprintf(&b, "  … and %d more violations of %q (all in history.json / report)\n", n-10, inv)
			}
		}
	}
	if r.SuiteError != "" {
		fmt.Fprintf(&b, "\nSUITE ERROR: %s\n", r.SuiteError)
	}
	if len(r.Violations) == 0 && r.SuiteError == "" {
		fmt.Fprintf(&b, "\nno violations\n")
	}
	return b.String()
}
