package chaos

import (
	"fmt"
	"slices"
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
	InvOwner              = "cluster: every transition committed by its shard's owner, fenced"
)

var invariantOrder = []string{
	InvNoEarlyUnhealthy, InvNoFalseAlarm, InvSilentUnhealthy, InvSkillsConsistent, InvRegistration,
	InvDeregistration, InvRecoveryDurable, InvHealthyPrompt, InvAuditChain, InvAuditRetained, InvStatusMatchesLast,
	InvAlertDelivered, InvAlertGenuine, InvOutageHeartbeats, InvRefusedNotRecorded, InvReadyz, InvWellFormed, InvAnswered, InvProcess, InvOwner,
}

var faultOrder = []string{
	FaultServerPanic, FaultServerStop, FaultServerPoison, FaultWriterPanic, FaultStamperPanic, FaultAlertsPanic,
	FaultWebhookFlaky, FaultKill9, FaultDBStop, FaultDBRestart, FaultSigstop, FaultDrop10, FaultDrop60, FaultDrop100, FaultChurn,
	FaultNodeKill9, FaultNodeSigstop, FaultNodeCut, FaultEtcdStop, FaultNodeAdd,
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
	downs     []Window         // process not serving: from kill (or unexpected exit) to the next ready; cluster: a topology change + the failover bound
	nodeDowns map[int][]Window // cluster: a node not serving (killed, stopped, exited on its own) until ready or continued
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
	c.checkOwners()
	c.countFaults()
	for _, n := range invariantOrder {
		cnt := c.counts[n]
		cnt.Good = cnt.N - cnt.Bad
		c.rep.Invariants = append(c.rep.Invariants, *cnt)
	}
	slices.SortStableFunc(c.rep.Violations, func(a, b Violation) int { return a.At.Compare(b.At) })
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
