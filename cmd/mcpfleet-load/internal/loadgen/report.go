package loadgen

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The targets a run is judged by: issue 14's table (the fleet size, CPU against the no-op ceiling,
// tracing, memory, registration rate, cold start, against the reference).
const (
	TargetServers      = 250_000
	TargetInterval     = 10 * time.Second
	TargetP99          = 50 * time.Millisecond
	TargetRSSKiBPerSrv = 2.5
	// TargetRegistrationsPerSec is a whole fleet re-registering at once: 100,000 in 20 s. It is judged
	// on the first TargetRegistrationFleet registrations ("sustained to 100,000"), the whole run's
	// fleet when it is smaller; a larger fleet's whole rate is reported beside it.
	TargetRegistrationsPerSec = 5000.0
	TargetRegistrationFleet   = 100_000
	// TargetCPUVsNoop bounds the service's CPU per steady heartbeat ÷ the no-op server's CPU per
	// request under the same load: the steady rate N/H, paced, through as many connections.
	TargetCPUVsNoop = 2.5
	// TargetPeakVsReference and TargetCPUVsReference compare with the naive reference server:
	// closed-loop peak at least this many times the reference's, total CPU per heartbeat (service +
	// PostgreSQL backends) at most this fraction of it.
	TargetPeakVsReference = 2.5
	TargetCPUVsReference  = 0.35
	// TargetTracingFullPercent and TargetTracingRatioPercent are the closed-loop heartbeat throughput with
	// tracing at 100 % and at 1 % parent-based sampling, as a share of tracing off.
	TargetTracingFullPercent  = 85.0
	TargetTracingRatioPercent = 98.0
	// TargetColdStart is serve → ready with TargetServers servers in PostgreSQL.
	TargetColdStart = 2 * time.Second
)

// Target results.
const (
	ResultMet         = "met"
	ResultNotMet      = "NOT met"
	ResultNotMeasured = "not measured"
)

// Summary is every figure of a run; it is what --json prints.
type Summary struct {
	StartedAt    time.Time           `json:"started_at"`
	Config       RunConfig           `json:"config"`
	Registration RegistrationSummary `json:"registration"`
	Warmup       PhaseSummary        `json:"registration_heartbeats"`
	Steady       PhaseSummary        `json:"steady"`
	Sweep        SweepSummary        `json:"sweep"`
	Peak         PhaseSummary        `json:"peak"`
	Ceiling      PhaseSummary        `json:"ceiling"`
	RSS          RSSSummary          `json:"rss"`
	Heap         HeapSummary         `json:"heap"`
	Tracing      TracingSummary      `json:"tracing"`
	ColdStart    ColdStartSummary    `json:"cold_start"`
	// ColdStartStep is the cold-start step's summary (Config.ColdStartFile), which the cold-start
	// target is judged by when it measured a restart; nil: none was run.
	ColdStartStep  *ColdStartStep        `json:"cold_start_step,omitempty"`
	Deregistration DeregistrationSummary `json:"deregistration"`
	Hold           HoldSearch            `json:"hold_search"`
	Tail           PhaseSummary          `json:"deregistration_heartbeats"`
	// CPU is the CPU the load generator and the service used during the
	// steady phase.
	CPU CPUSummary `json:"steady_cpu"`
	// RegistrationCPU is the CPU used from the start of registration until the heartbeat backlog it
	// left had cleared (the window of Warmup's heartbeats).
	RegistrationCPU CPUSummary `json:"registration_cpu"`
	// LoadAverage is the machine's 1-minute load average at the start and
	// the end of the run (other work on the machine skews every figure).
	LoadAverage [2]string `json:"load_average_1m"`
	// SettleSeconds is how long the run waited after registration for queued
	// heartbeats to clear before the steady window.
	SettleSeconds float64 `json:"settle_seconds"`
	// CeilingCPU is the CPU the no-op server spent in the ceiling phase.
	CeilingCPU CeilingCPU `json:"ceiling_cpu"`
	// NoopSteady is the no-op server driven at the steady phase's rate (N/H, paced evenly, through
	// cfg.Connections connections) after the ceiling, and NoopSteadyCPU the CPU it spent on that.
	NoopSteady    PhaseSummary `json:"noop_steady"`
	NoopSteadyCPU CeilingCPU   `json:"noop_steady_cpu"`
	// CeilingRatioPercent is the peak rate as a percentage of the no-op
	// ceiling's rate (0 when either was not measured).
	CeilingRatioPercent float64 `json:"peak_percent_of_ceiling"`
	// FalseTransitions counts non-healthy heartbeat answers for on-time
	// modules (registration and steady phases) plus the on-time modules the
	// sweeps saw degraded or unhealthy.
	FalseTransitions uint64 `json:"false_transitions"`
	// Reference is the same load driven against the naive reference server (Reference), after the
	// service; nil when not run.
	Reference *Summary `json:"reference,omitempty"`
	Targets   []Target `json:"targets"`
	AllMet    bool     `json:"all_targets_met"`
	Notes     []string `json:"notes,omitempty"`

	// Plots are the heartbeat phases' latencies for the SVG plots; PlotFiles are the plots' file names
	// beside the report (set when it is written to a file), which the report links.
	Plots     []plotPhase `json:"-"`
	PlotFiles []string    `json:"-"`
}

// RunConfig is the configuration the run used.
type RunConfig struct {
	BaseURL              string  `json:"base_url"`
	N                    int     `json:"n"`
	IntervalSeconds      float64 `json:"interval_seconds"`
	JitterSeconds        float64 `json:"jitter_seconds"`
	RampPerSecond        int     `json:"ramp_per_second"`
	SteadySeconds        float64 `json:"steady_seconds"`
	Connections          int     `json:"connections"`
	PeakWorkers          int     `json:"peak_workers"`
	PeakSeconds          float64 `json:"peak_seconds"`
	ServicePID           int     `json:"service_pid,omitempty"`
	GoVersion            string  `json:"go_version"`
	GOMAXPROCS           int     `json:"gomaxprocs"`
	NumCPU               int     `json:"num_cpu"`
	LoadGeneratorPID     int     `json:"load_generator_pid"`
	CeilingMeasured      bool    `json:"ceiling_enabled"`
	DeregisteredAtTheEnd bool    `json:"deregister_at_end"`
}

// ErrorSummary counts failed requests by kind ("timeout", "HTTP 503
// unavailable", …).
type ErrorSummary struct {
	Total  uint64            `json:"total"`
	ByKind map[string]uint64 `json:"by_kind,omitempty"`
}

// RegistrationSummary describes phase (a).
type RegistrationSummary struct {
	Attempted     int     `json:"attempted_requests"`
	Registered    int     `json:"registered"`
	Created       int     `json:"created"`
	Reregistered  int     `json:"reregistered"`
	Seconds       float64 `json:"seconds"`
	RatePerSecond float64 `json:"rate_per_second"`
	// FirstRegistered is min(N, TargetRegistrationFleet) and FirstSeconds the time from the phase's
	// start to its FirstRegistered-th registration answered (0: never reached).
	FirstRegistered int     `json:"first_registered"`
	FirstSeconds    float64 `json:"first_seconds"`
	P50Ms           float64 `json:"p50_ms"`
	P99Ms           float64 `json:"p99_ms"`
	MaxMs           float64 `json:"max_ms"`
	// Errors are the modules that did not register (their last attempt's error); Retried the failed
	// attempts that were tried again (registerRetry), whether or not a later one registered.
	Errors  ErrorSummary `json:"errors"`
	Retried ErrorSummary `json:"retried,omitzero"`
}

// FirstRate is the registration rate up to FirstRegistered; ok is false if they were not all registered.
func (r RegistrationSummary) FirstRate() (rate float64, ok bool) {
	if r.FirstSeconds <= 0 || r.FirstRegistered <= 0 {
		return 0, false
	}
	return float64(r.FirstRegistered) / r.FirstSeconds, true
}

// PhaseSummary describes a heartbeat phase.
type PhaseSummary struct {
	Seconds               float64      `json:"seconds"`
	Sent                  uint64       `json:"sent"`
	OK                    uint64       `json:"ok"`
	RatePerSecond         float64      `json:"rate_per_second"`
	ExpectedRatePerSecond float64      `json:"expected_rate_per_second,omitempty"`
	MeanMs                float64      `json:"mean_ms"`
	P50Ms                 float64      `json:"p50_ms"`
	P90Ms                 float64      `json:"p90_ms"`
	P99Ms                 float64      `json:"p99_ms"`
	P999Ms                float64      `json:"p999_ms"`
	MaxMs                 float64      `json:"max_ms"`
	ScheduleLagP99Ms      float64      `json:"schedule_lag_p99_ms"`
	ScheduleLagMaxMs      float64      `json:"schedule_lag_max_ms"`
	NonHealthyOnTime      uint64       `json:"non_healthy_answers_on_time"`
	NonHealthyLate        uint64       `json:"non_healthy_answers_late"`
	Errors                ErrorSummary `json:"errors"`
}

// SweepSummary describes the GET /v1/mcp/servers?status= sweeps.
type SweepSummary struct {
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
	// Final sweep, this run's registered modules only.
	Degraded    int `json:"degraded"`
	Unhealthy   int `json:"unhealthy"`
	LateModules int `json:"late_modules"`
	// Foreign counts non-healthy servers that are not this run's.
	Foreign int `json:"foreign"`
	// OnTimeNonHealthy counts distinct on-time modules any sweep (during the
	// steady phase or final) saw degraded or unhealthy.
	OnTimeNonHealthy int `json:"on_time_non_healthy"`
}

// RSSSummary describes the service's memory growth.
type RSSSummary struct {
	Measured     bool    `json:"measured"`
	PID          int     `json:"pid,omitempty"`
	BeforeKiB    int64   `json:"before_kib"`
	AfterKiB     int64   `json:"after_kib"`
	PerServerKiB float64 `json:"per_server_kib"`
	Error        string  `json:"error,omitempty"`
}

// CPUSummary is CPU use during a window of the run (the steady phase, registration): percentages
// are of one core, but for MachineBusyPercent.
type CPUSummary struct {
	Seconds           float64 `json:"seconds"` // the window's length
	ClientPercent     float64 `json:"load_generator_percent"`
	ServicePercent    float64 `json:"service_percent"`
	ServiceMeasured   bool    `json:"service_measured"`
	ServiceCPUSeconds float64 `json:"service_cpu_seconds"`
	// Database* is the CPU of the PostgreSQL backends serving the service's database (Config
	// ServiceDatabase), read from /proc: not the server's shared processes (WAL writer, checkpointer,
	// autovacuum), whose work the heartbeats also cause.
	DatabaseMeasured   bool    `json:"database_measured"`
	DatabaseCPUSeconds float64 `json:"database_cpu_seconds"`
	DatabaseBackends   int     `json:"database_backends"`
	DatabaseExited     int     `json:"database_backends_exited"`
	DatabaseError      string  `json:"database_error,omitempty"`
	// MachineBusyPercent is the share of the whole machine's CPU (every CPU: 100 is all busy) that was
	// busy in the window, from /proc/stat: the service, PostgreSQL, the load generator and anything else.
	MachineBusyPercent float64 `json:"machine_busy_percent"`
	MachineMeasured    bool    `json:"machine_measured"`
}

// CeilingCPU is the CPU the no-op server of the ceiling phase spent after its warm-up.
type CeilingCPU struct {
	Measured bool    `json:"measured"`
	Seconds  float64 `json:"seconds"`
}

// NoopPerRequest returns the no-op server's CPU per request answered in the ceiling's closed loop, in ms.
func (s *Summary) NoopPerRequest() (float64, bool) { return s.CeilingCPU.perRequest(s.Ceiling) }

// NoopSteadyPerRequest returns the no-op server's CPU per request answered at the steady rate, in ms:
// the figure the service's CPU per steady heartbeat is judged against (the same load).
func (s *Summary) NoopSteadyPerRequest() (float64, bool) {
	return s.NoopSteadyCPU.perRequest(s.NoopSteady)
}

// perRequest is c's CPU per request answered 200 in ph, in ms.
func (c CeilingCPU) perRequest(ph PhaseSummary) (float64, bool) {
	if !c.Measured || ph.OK == 0 || c.Seconds <= 0 {
		return 0, false
	}
	return 1000 * c.Seconds / float64(ph.OK), true
}

// PerHeartbeat returns the CPU per steady heartbeat answered 200, in ms, of the service, of its
// PostgreSQL backends, and both; ok reports which were measured (service, database).
func (s *Summary) PerHeartbeat() (service, database, total float64, serviceOK, databaseOK bool) {
	n := float64(s.Steady.OK)
	if n == 0 {
		return 0, 0, 0, false, false
	}
	serviceOK, databaseOK = s.CPU.ServiceMeasured, s.CPU.DatabaseMeasured
	if serviceOK {
		service = 1000 * s.CPU.ServiceCPUSeconds / n
	}
	if databaseOK {
		database = 1000 * s.CPU.DatabaseCPUSeconds / n
	}
	return service, database, service + database, serviceOK, databaseOK
}

// PerRegistration returns the CPU per module registered, in ms, of the service and of its PostgreSQL
// backends, net of the heartbeats answered in the same window (Warmup's, each counted at the steady
// phase's cost per heartbeat and taken off; never below 0). ok reports which were measured, in both
// windows.
func (s *Summary) PerRegistration() (service, database float64, serviceOK, databaseOK bool) {
	n := float64(s.Registration.Registered)
	sv, db, _, svOK, dbOK := s.PerHeartbeat()
	if n == 0 {
		return 0, 0, false, false
	}
	hb := float64(s.Warmup.OK)
	net := func(seconds, perHeartbeat float64) float64 { return max(0, (1000*seconds-hb*perHeartbeat)/n) }
	serviceOK = svOK && s.RegistrationCPU.ServiceMeasured
	if serviceOK {
		service = net(s.RegistrationCPU.ServiceCPUSeconds, sv)
	}
	databaseOK = dbOK && s.RegistrationCPU.DatabaseMeasured
	if databaseOK {
		database = net(s.RegistrationCPU.DatabaseCPUSeconds, db)
	}
	return service, database, serviceOK, databaseOK
}

// DeregistrationSummary describes the final deregistration.
type DeregistrationSummary struct {
	Attempted    int          `json:"attempted"`
	Deregistered int          `json:"deregistered"`
	Seconds      float64      `json:"seconds"`
	Errors       ErrorSummary `json:"errors"`
}

// Target is one judged target.
type Target struct {
	Name      string `json:"name"`
	Threshold string `json:"threshold"`
	Measured  string `json:"measured"`
	Result    string `json:"result"`
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarizeErrors(e *errorCounts) ErrorSummary {
	m := e.snapshot()
	var total uint64
	for _, v := range m {
		total += v
	}
	if len(m) == 0 {
		m = nil
	}
	return ErrorSummary{Total: total, ByKind: m}
}

func summarizePhase(ph *phase, expected float64) PhaseSummary {
	el := ph.elapsed().Seconds()
	s := PhaseSummary{
		Seconds:               el,
		Sent:                  ph.sent.Load(),
		OK:                    ph.ok.Load(),
		ExpectedRatePerSecond: expected,
		MeanMs:                msOf(ph.lat.Mean()),
		P50Ms:                 msOf(ph.lat.Quantile(0.50)),
		P90Ms:                 msOf(ph.lat.Quantile(0.90)),
		P99Ms:                 msOf(ph.lat.Quantile(0.99)),
		P999Ms:                msOf(ph.lat.Quantile(0.999)),
		MaxMs:                 msOf(ph.lat.Max()),
		ScheduleLagP99Ms:      msOf(ph.lag.Quantile(0.99)),
		ScheduleLagMaxMs:      msOf(ph.lag.Max()),
		NonHealthyOnTime:      ph.nonHealthyOnTime.Load(),
		NonHealthyLate:        ph.nonHealthyLate.Load(),
		Errors:                summarizeErrors(&ph.errs),
	}
	if el > 0 {
		s.RatePerSecond = float64(s.OK) / el
	}
	return s
}

// evaluate computes FalseTransitions, the targets (issue 14's table, in its order) and AllMet.
func (s *Summary) evaluate() {
	s.FalseTransitions = s.Warmup.NonHealthyOnTime + s.Steady.NonHealthyOnTime + uint64(s.Sweep.OnTimeNonHealthy)
	s.Targets = slices.Concat(s.fleetTargets(), s.cpuTargets(), s.tracingTargets(), s.memoryTargets(), s.startTargets(), s.referenceTargets())
	s.AllMet = true
	for _, t := range s.Targets {
		if t.Result != ResultMet {
			s.AllMet = false
		}
	}
}

// heldShare is the share of the expected steady heartbeat rate (N/H) a fleet must be answered at to
// count as held: below it the load generator's schedule falls behind, and the servers heartbeat less often
// than every H however many registered.
const heldShare = 0.99

// fleetSizeText is the fleet-size target's measurement: the servers registered and, when the steady
// phase fell short of N/H, the rate it did answer.
func fleetSizeText(s *Summary) string {
	n, h := thousands(int64(s.Registration.Registered)), secs(s.Config.IntervalSeconds)
	var t string
	switch {
	case s.Steady.ExpectedRatePerSecond == 0:
		t = n + " servers registered"
	case windowHeld(s.Steady, s.Sweep.OnTimeNonHealthy, msOf(TargetP99)):
		t = fmt.Sprintf("%s servers held every %s", n, h)
	default:
		t = fmt.Sprintf("%s servers registered, not held every %s: %s", n, h, broken(s.Steady, msOf(TargetP99)))
	}
	return t + holdText(s.Hold)
}

// holdText is the step-down search's outcome for the fleet-size target, "" if it did not run.
func holdText(h HoldSearch) string {
	switch {
	case !h.Ran:
		return ""
	case h.Largest > 0:
		return fmt.Sprintf("; largest held in the step-down: %s servers", thousands(int64(h.Largest)))
	case len(h.Steps) > 0:
		return fmt.Sprintf("; none held in the step-down to %s servers", thousands(int64(h.Steps[len(h.Steps)-1].Servers)))
	}
	return "; the step-down ran no step"
}

// writeHoldSearch writes the step-down search's table: each size's window, and which held.
func writeHoldSearch(b *strings.Builder, s *Summary) {
	h := s.Hold
	if !h.Ran {
		return
	}
	fmt.Fprintf(b, "\n## Largest fleet held\n\n")
	fmt.Fprintf(b, "The steady phase did not hold %s servers (held: at least %.0f %% of N/H answered, p99 under %s ms, no error, no false transition). "+
		"After the restarts the run took an evenly spread tenth of the fleet out at a time (deregistered: the rest keep their phases, so the load stays even over H; "+
		"a module whose deregistration failed stops heartbeating all the same and stays registered, silent: it is counted as taken out, and its failure shown), "+
		"waited for the schedule's backlog to clear, and ran the steady schedule for %s at each size, until one held or a step more would have left less than a step; "+
		"the deregistration below then covers the rest.", thousands(int64(s.Registration.Registered)), 100*heldShare, strconv.FormatFloat(h.LimitP99Ms, 'f', -1, 64), secs(h.WindowSeconds))
	switch {
	case h.VacuumError != "":
		fmt.Fprintf(b, " Vacuuming the service's database before the first step failed (%s): the restarts' dead rows stayed in every window.", h.VacuumError)
	case h.Autovacuum != "":
		fmt.Fprintf(b, " Before the first step it vacuumed and analyzed the service's database (`VACUUM (ANALYZE)`, %.1f s; the server's `autovacuum` is %s): "+
			"the restarts' heartbeats leave dead rows in `mcp_servers`, which autovacuum clears on a server that runs it.", h.VacuumSeconds, h.Autovacuum)
	}
	fmt.Fprintf(b, " %s", recoveryText(h))
	fmt.Fprintf(b, "\n\n")
	fmt.Fprintf(b, "| servers | taken out before it / failed | heartbeats/s answered / expected | latency p50 / p99 / max (ms) | errors | false transitions | CPU: service / load generator (%% of one core) | machine busy (%% of 2 CPUs) | held |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range h.Steps {
		w := st.Window
		held := "no"
		if st.Held {
			held = "**yes**"
		}
		fmt.Fprintf(b, "| %s | %s / %s | %.0f / %.0f | %s | %s | %s | %.0f / %.0f | %.0f | %s |\n", thousands(int64(st.Servers)),
			thousands(int64(st.Deregistered)), nf(st.DeregisterErrors.Total), w.RatePerSecond, w.ExpectedRatePerSecond,
			latencies(w), nf(w.Errors.Total), nf(w.NonHealthyOnTime+uint64(st.FalseSwept)), st.CPU.ServicePercent, st.CPU.ClientPercent, st.CPU.MachineBusyPercent, held)
	}
	fmt.Fprintf(b, "\n%s\n", holdVerdict(s))
}

// recoveryText says how long the step-down waited for the fleet to be healthy before its first step.
func recoveryText(h HoldSearch) string {
	switch {
	case h.RecoveryError != "":
		return fmt.Sprintf("Before the first step it waited %.1f s for this run's heartbeating modules to be healthy again, and the last look at the fleet failed (%s); %s were degraded or unhealthy at the one before.",
			h.RecoverySeconds, h.RecoveryError, thousands(int64(h.NonHealthyLeft)))
	case h.NonHealthyLeft > 0:
		return fmt.Sprintf("Before the first step it waited %.1f s (its limit, %d H) for this run's heartbeating modules to be healthy again: %s still were not.",
			h.RecoverySeconds, recoverLimit, thousands(int64(h.NonHealthyLeft)))
	}
	return fmt.Sprintf("Before the first step it waited %.1f s for this run's heartbeating modules to be healthy again (missed heartbeats in the restarts' closed loops degrade them rightly).", h.RecoverySeconds)
}

// holdVerdict says, in a sentence, the largest size held and what broke at the next size up.
func holdVerdict(s *Summary) string {
	h := s.Hold
	if len(h.Steps) == 0 {
		return "No step ran."
	}
	above, aboveN := s.Steady, s.Registration.Registered
	for _, st := range h.Steps {
		if st.Held {
			return fmt.Sprintf("Largest held: %s servers. What breaks next, at %s: %s.", thousands(int64(st.Servers)), thousands(int64(aboveN)), broken(above, h.LimitP99Ms))
		}
		above, aboveN = st.Window, st.Servers
	}
	return fmt.Sprintf("None held down to %s servers; there: %s.", thousands(int64(aboveN)), broken(above, h.LimitP99Ms))
}

// broken lists what a window missed of the held rule with p99 limit limitMs.
func broken(w PhaseSummary, limitMs float64) string {
	var out []string
	if w.ExpectedRatePerSecond > 0 && w.RatePerSecond < heldShare*w.ExpectedRatePerSecond {
		out = append(out, fmt.Sprintf("%.0f of %.0f heartbeats/s answered (%.1f %%)", w.RatePerSecond, w.ExpectedRatePerSecond, 100*w.RatePerSecond/w.ExpectedRatePerSecond))
	}
	if w.P99Ms >= limitMs {
		out = append(out, fmt.Sprintf("p99 %s ms", f2(w.P99Ms)))
	}
	if w.Errors.Total > 0 {
		out = append(out, nf(w.Errors.Total)+" errors")
	}
	if w.NonHealthyOnTime > 0 {
		out = append(out, nf(w.NonHealthyOnTime)+" non-healthy answers on time")
	}
	if len(out) == 0 {
		return "false transitions seen by a sweep"
	}
	return strings.Join(out, ", ")
}

// judge is a target's result: not measured, met or not.
func judge(measured, met bool) string {
	switch {
	case !measured:
		return ResultNotMeasured
	case met:
		return ResultMet
	}
	return ResultNotMet
}

// fleetTargets: servers held at H = 10 s with p99 < 50 ms, 0 errors and 0 false transitions.
func (s *Summary) fleetTargets() []Target {
	steadyRan := s.Steady.Sent > 0
	errs := s.Registration.Errors.Total + s.Warmup.Errors.Total + s.Steady.Errors.Total
	return []Target{
		{
			Name: "fleet size at H = 10 s",
			Threshold: fmt.Sprintf("≥ %s servers held every %s (p99 < %d ms, 0 errors, 0 false transitions)",
				thousands(TargetServers), TargetInterval, TargetP99.Milliseconds()),
			Measured: fleetSizeText(s),
			Result: judge(steadyRan, s.Registration.Registered >= TargetServers && windowHeld(s.Steady, s.Sweep.OnTimeNonHealthy, msOf(TargetP99)) &&
				s.Registration.Errors.Total+s.Warmup.Errors.Total == 0 &&
				time.Duration(s.Config.IntervalSeconds*float64(time.Second)) == TargetInterval),
		},
		{
			Name:      "steady heartbeat p99 latency",
			Threshold: fmt.Sprintf("< %d ms", TargetP99.Milliseconds()),
			Measured:  fmt.Sprintf("%.2f ms", s.Steady.P99Ms),
			Result:    judge(s.Steady.OK > 0, s.Steady.P99Ms < msOf(TargetP99)),
		},
		{
			Name:      "errors (registration and steady heartbeats)",
			Threshold: "0",
			Measured: fmt.Sprintf("%d (%d registration, %d heartbeat)", errs,
				s.Registration.Errors.Total, s.Warmup.Errors.Total+s.Steady.Errors.Total) + retriedText(s.Registration.Retried),
			Result: judge(steadyRan, errs == 0),
		},
		{
			Name:      "false transitions",
			Threshold: "0",
			Measured:  falseTransitionsText(s),
			Result:    judge(steadyRan && (s.Sweep.Done || s.FalseTransitions > 0), s.FalseTransitions == 0),
		},
	}
}

// retriedText is what the errors target says of the registration attempts that failed and were
// tried again: nothing when none did.
func retriedText(r ErrorSummary) string {
	if r.Total == 0 {
		return ""
	}
	return fmt.Sprintf("; besides, %s failed registration attempts were tried again (Errors by kind)", thousands(int64(r.Total)))
}

// cpuTargets: the service's CPU per steady heartbeat ÷ the no-op server's per request at the same
// rate, same run.
func (s *Summary) cpuTargets() []Target {
	sv, _, _, svOK, _ := s.PerHeartbeat()
	noop, noopOK := s.NoopSteadyPerRequest()
	t := Target{Name: "service CPU per heartbeat ÷ no-op CPU per request", Threshold: fmt.Sprintf("≤ %.1f×", TargetCPUVsNoop), Measured: "—"}
	if svOK && noopOK {
		t.Measured = fmt.Sprintf("%.2f× (%.3f ms ÷ %.3f ms)", sv/noop, sv, noop)
	}
	t.Result = judge(svOK && noopOK, svOK && noopOK && sv/noop <= TargetCPUVsNoop)
	return []Target{t}
}

// tracingTargets: closed-loop heartbeat throughput with tracing at 100 % and at 1 % parent-based, as
// a share of tracing off, each after a restart of the service in the same run.
func (s *Summary) tracingTargets() []Target {
	out := make([]Target, 0, 2)
	for _, tt := range []struct {
		name string
		kind string
		min  float64
	}{{"heartbeat throughput with tracing on at 100 % sampling vs off", kindFull, TargetTracingFullPercent}, {"heartbeat throughput with tracing at 1 % parent-based vs off", kindRatio, TargetTracingRatioPercent}} {
		t := Target{Name: tt.name, Threshold: fmt.Sprintf("≥ %.0f %%", tt.min), Measured: "— (no restart phases: --service-command)"}
		p, rate, runs, ok := s.Tracing.KindVsOff(tt.kind)
		if ok {
			t.Measured = fmt.Sprintf("%.1f %% (%s, %.0f vs %.0f heartbeats/s", p, plural(runs, "run"), rate, s.Tracing.offRate())
			lo, hi, _, _ := s.Tracing.KindSpread(tt.kind) // known: the same runs KindVsOff averaged
			offLo, offHi, offRuns, _ := s.Tracing.KindSpread(kindOff)
			if runs > 1 && offRuns > 1 {
				t.Measured += fmt.Sprintf("; single runs %.0f–%.0f %%, off's own %.0f–%.0f %% of their mean", lo, hi, offLo, offHi)
			}
			t.Measured += ")"
			if c, ok := s.Tracing.KindCPUVsOff(tt.kind); ok {
				t.Measured += fmt.Sprintf("; service CPU per heartbeat %.0f %% of off's", c)
			}
		} else if s.Tracing.Error != "" {
			t.Measured = "— (" + s.Tracing.Error + ")"
		}
		t.Result = judge(ok, p >= tt.min)
		out = append(out, t)
	}
	return out
}

// memoryTargets: RSS growth per server, and the live heap per server from the heap profile.
func (s *Summary) memoryTargets() []Target {
	heap := Target{Name: "live heap per server (heap profile)", Threshold: fmt.Sprintf("≤ %.1f KiB", TargetRSSKiBPerSrv), Measured: "— (no --service-pprof)"}
	if s.Heap.Measured {
		heap.Measured = fmt.Sprintf("%.2f KiB", s.Heap.PerServerBytes/1024)
	} else if s.Heap.Error != "" {
		heap.Measured = "— (" + s.Heap.Error + ")"
	}
	heap.Result = judge(s.Heap.Measured, s.Heap.PerServerBytes/1024 <= TargetRSSKiBPerSrv)
	return []Target{{
		Name:      "service RSS growth per server",
		Threshold: fmt.Sprintf("≤ %.1f KiB", TargetRSSKiBPerSrv),
		Measured:  rssText(s),
		Result:    judge(s.RSS.Measured, s.RSS.PerServerKiB <= TargetRSSKiBPerSrv),
	}, heap}
}

// startTargets: the registration rate of a whole fleet at once, and the cold start with it in PostgreSQL.
func (s *Summary) startTargets() []Target {
	coldText, coldOK, coldMet := s.coldStartText()
	cold := Target{Name: "cold start: serve to ready with the fleet in PostgreSQL", Threshold: fmt.Sprintf("≤ %.0f s at %s servers", TargetColdStart.Seconds(), thousands(TargetServers)),
		Measured: coldText, Result: judge(coldOK, coldMet)}
	reg := s.Registration
	rate, reached := reg.FirstRate()
	measured := fmt.Sprintf("%.0f registrations/s (%s in %.1f s)", rate, thousands(int64(reg.FirstRegistered)), reg.FirstSeconds)
	if !reached {
		measured = fmt.Sprintf("— (%s of %s registered, in %.1f s)", thousands(int64(reg.Registered)), thousands(int64(max(reg.FirstRegistered, reg.Registered))), reg.Seconds)
	} else if reg.Registered > reg.FirstRegistered {
		measured += fmt.Sprintf("; the whole fleet: %.0f/s (%s in %.1f s)", reg.RatePerSecond, thousands(int64(reg.Registered)), reg.Seconds)
	}
	return []Target{{
		Name:      "registration rate",
		Threshold: fmt.Sprintf("≥ %s registrations/s, sustained to %s", thousands(int64(TargetRegistrationsPerSec)), thousands(TargetRegistrationFleet)),
		Measured:  measured,
		Result:    judge(reg.Registered > 0, reached && reg.FirstRegistered >= min(reg.Registered, TargetRegistrationFleet) && rate >= TargetRegistrationsPerSec),
	}, cold}
}

// referenceTargets: against the seed's literal design, same machine, same run: peak and total CPU.
func (s *Summary) referenceTargets() []Target {
	peak := Target{Name: "closed-loop peak vs the naive reference", Threshold: fmt.Sprintf("≥ %.1f×", TargetPeakVsReference), Measured: "— (no reference run)"}
	p, pOK := peakRatio(s, s.Reference)
	if pOK {
		peak.Measured = fmt.Sprintf("%.2f× (%.0f vs %.0f heartbeats/s)", p, s.Peak.RatePerSecond, s.Reference.Peak.RatePerSecond)
	}
	peak.Result = judge(pOK, p >= TargetPeakVsReference)
	cpu := Target{Name: "total CPU per heartbeat vs the naive reference", Threshold: fmt.Sprintf("≤ %.2f×", TargetCPUVsReference), Measured: "— (no reference run, or CPU not measured)"}
	c, cOK := cpuRatio(s, s.Reference)
	if cOK {
		_, _, st, _, _ := s.PerHeartbeat()
		_, _, rt, _, _ := s.Reference.PerHeartbeat()
		cpu.Measured = fmt.Sprintf("%.2f× (%.3f vs %.3f ms, service + PostgreSQL)", c, st, rt)
	}
	cpu.Result = judge(cOK, c <= TargetCPUVsReference)
	return []Target{peak, cpu}
}

func falseTransitionsText(s *Summary) string {
	t := fmt.Sprintf("%d (%d non-healthy answers, %d servers seen by sweeps)",
		s.FalseTransitions, s.Warmup.NonHealthyOnTime+s.Steady.NonHealthyOnTime, s.Sweep.OnTimeNonHealthy)
	if !s.Sweep.Done {
		t += "; sweep failed: " + s.Sweep.Error
	}
	return t
}

func rssText(s *Summary) string {
	if !s.RSS.Measured {
		if s.RSS.Error != "" {
			return "— (" + s.RSS.Error + ")"
		}
		return "— (no --service-pid)"
	}
	return fmt.Sprintf("%.2f KiB", s.RSS.PerServerKiB)
}

// WriteMarkdown renders the report: run parameters, targets, every figure with its unit, the
// comparison with the reference, the plots, errors by kind, how to read it, and notes.
func WriteMarkdown(w io.Writer, s *Summary) error {
	var b strings.Builder
	writeHeader(&b, s)
	writeTargets(&b, s)
	writeFigures(&b, s)
	writeHoldSearch(&b, s)
	if s.Reference != nil {
		fmt.Fprintf(&b, "\n## Against the naive reference\n\n")
		fmt.Fprintf(&b, "The same load, after mcpfleet, against the seed's design taken literally: a gin server with a pgx pool, one `UPDATE … SET last_heartbeat_at = now()` per heartbeat and a set-based scan every H/2 marking late servers degraded and unhealthy, on a fresh database of the same PostgreSQL, with no authentication, tenancy, audit, cascade or tracing. CPU per heartbeat is the primary figure: it depends far less on what else ran on the machine than rates and latencies do.\n\n")
		writeComparison(&b, s, s.Reference)
	}
	writePlotLinks(&b, s)
	writeErrors(&b, s)
	writeHowToRead(&b, s)
	if len(s.Notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, note := range s.Notes {
			fmt.Fprintf(&b, "- %s\n", note)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHeader writes the title, the run's parameters and the machine's load.
func writeHeader(b *strings.Builder, s *Summary) {
	c := s.Config
	fmt.Fprintf(b, "# mcpfleet load report\n\n")
	fmt.Fprintf(b, "Run started %s against `%s`: N = %s modules, H = %s, jitter ±%s, registration ramp %s, steady phase %s, %d connections per pool, peak and ceiling %d workers × %s. %s, GOMAXPROCS %d, %d CPUs.\n\n",
		s.StartedAt.Format(time.RFC3339), c.BaseURL, thousands(int64(c.N)), secs(c.IntervalSeconds), secs(c.JitterSeconds),
		rampText(c.RampPerSecond), secs(c.SteadySeconds), c.Connections, c.PeakWorkers, secs(c.PeakSeconds),
		c.GoVersion, c.GOMAXPROCS, c.NumCPU)
	if s.LoadAverage[0] != "" {
		fmt.Fprintf(b, "The machine's 1-minute load average was %s at the start and %s at the end; anything else running on it shows in every figure.\n\n",
			s.LoadAverage[0], s.LoadAverage[1])
	}
}

// writeTargets writes the verdict and the table of targets.
func writeTargets(b *strings.Builder, s *Summary) {
	verdict := "All targets met."
	if !s.AllMet {
		verdict = "Not all targets met."
	}
	fmt.Fprintf(b, "## Targets\n\n%s\n\n| target | threshold | measured | result |\n|---|---|---|---|\n", verdict)
	for _, t := range s.Targets {
		res := t.Result
		if res == ResultNotMet {
			res = "**" + res + "**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(t.Name), cell(t.Threshold), cell(t.Measured), res)
	}
}

// figures is the table of figures: a row is phase, figure, value, unit.
type figures struct{ b *strings.Builder }

func (f figures) row(ph, fig, val, unit string) {
	fmt.Fprintf(f.b, "| %s | %s | %s | %s |\n", ph, cell(fig), val, unit)
}

func f1(v float64) string             { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string             { return strconv.FormatFloat(v, 'f', 2, 64) }
func f3(v float64) string             { return strconv.FormatFloat(v, 'f', 3, 64) }
func nf(v uint64) string              { return thousands(int64(v)) }
func latencies(p PhaseSummary) string { return f2(p.P50Ms) + " / " + f2(p.P99Ms) + " / " + f2(p.MaxMs) }

// writeFigures writes every figure of the run, phase by phase.
func writeFigures(b *strings.Builder, s *Summary) {
	fmt.Fprintf(b, "\n## Figures\n\n| phase | figure | value | unit |\n|---|---|---|---|\n")
	f := figures{b}
	registrationFigures(f, s)
	steadyFigures(f, s)
	sweepFigures(f, s)
	peakFigures(f, s)
	memoryFigures(f, s)
	restartFigures(f, s)
	if s.Deregistration.Attempted > 0 {
		d := s.Deregistration
		f.row("deregistration", "modules deregistered", thousands(int64(d.Deregistered))+" of "+thousands(int64(d.Attempted)), "servers")
		f.row("deregistration", "duration", f1(d.Seconds), "s")
		f.row("deregistration", "errors", nf(d.Errors.Total), "requests")
	}
}

func registrationFigures(f figures, s *Summary) {
	r := s.Registration
	f.row("registration", "modules registered", thousands(int64(r.Registered)), "servers")
	f.row("registration", "of which new (201) / re-registered (200)", thousands(int64(r.Created))+" / "+thousands(int64(r.Reregistered)), "servers")
	f.row("registration", "duration", f1(r.Seconds), "s")
	f.row("registration", "registration rate", f1(r.RatePerSecond), "registrations/s")
	if first, ok := r.FirstRate(); ok && r.FirstRegistered < r.Registered {
		f.row("registration", "the first "+thousands(int64(r.FirstRegistered))+": duration / rate", f1(r.FirstSeconds)+" / "+f1(first), "s, registrations/s")
	}
	f.row("registration", "latency p50 / p99 / max", f2(r.P50Ms)+" / "+f2(r.P99Ms)+" / "+f2(r.MaxMs), "ms")
	f.row("registration", "errors", nf(r.Errors.Total), "requests")
	f.row("registration", "heartbeats sent meanwhile", nf(s.Warmup.OK), "heartbeats")
	f.row("registration", "heartbeat errors meanwhile", nf(s.Warmup.Errors.Total), "requests")
	c := s.RegistrationCPU
	if c.ServiceMeasured {
		db := "—"
		if c.DatabaseMeasured {
			db = f1(100 * c.DatabaseCPUSeconds / c.Seconds)
		}
		f.row("registration", "CPU meanwhile (until the backlog cleared): load generator / service / PostgreSQL backends",
			f1(c.ClientPercent)+" / "+f1(c.ServicePercent)+" / "+db, "% of one core")
	}
	if c.MachineMeasured {
		f.row("registration", "machine CPU busy meanwhile (every process)", f1(c.MachineBusyPercent), fmt.Sprintf("%% of all %d CPUs", s.Config.NumCPU))
	}
	sv, db, svOK, dbOK := s.PerRegistration()
	if svOK {
		f.row("registration", "service CPU per registration, net of the heartbeats meanwhile", f3(sv), "ms")
	}
	if dbOK {
		f.row("registration", "PostgreSQL CPU per registration, net of the heartbeats meanwhile", f3(db), "ms")
	}
}

func steadyFigures(f figures, s *Summary) {
	st := s.Steady
	f.row("steady", "wait for the registration backlog to clear first", f1(s.SettleSeconds), "s")
	f.row("steady", "duration", f1(st.Seconds), "s")
	f.row("steady", "heartbeats answered 200", nf(st.OK), "heartbeats")
	f.row("steady", "heartbeat rate achieved", f1(st.RatePerSecond), "heartbeats/s")
	f.row("steady", "heartbeat rate expected (N/H)", f1(st.ExpectedRatePerSecond), "heartbeats/s")
	f.row("steady", "latency mean", f2(st.MeanMs), "ms")
	f.row("steady", "latency p50", f2(st.P50Ms), "ms")
	f.row("steady", "latency p90", f2(st.P90Ms), "ms")
	f.row("steady", "latency p99", f2(st.P99Ms), "ms")
	f.row("steady", "latency p99.9", f2(st.P999Ms), "ms")
	f.row("steady", "latency max", f2(st.MaxMs), "ms")
	f.row("steady", "errors", nf(st.Errors.Total), "requests")
	f.row("steady", "non-healthy answers, module on time (false transitions)", nf(st.NonHealthyOnTime), "answers")
	f.row("steady", "non-healthy answers, module late", nf(st.NonHealthyLate), "answers")
	f.row("steady", "client schedule lag p99 / max", f2(st.ScheduleLagP99Ms)+" / "+f2(st.ScheduleLagMaxMs), "ms")
	f.row("steady", "load generator CPU", f1(s.CPU.ClientPercent), "% of one core")
	if s.CPU.ServiceMeasured {
		f.row("steady", "service CPU", f1(s.CPU.ServicePercent), "% of one core")
	}
	sv, db, tot, svOK, dbOK := s.PerHeartbeat()
	if svOK {
		f.row("steady", "service CPU per heartbeat", f3(sv), "ms")
	}
	if dbOK {
		f.row("steady", fmt.Sprintf("PostgreSQL CPU per heartbeat (%d backends of the service's database)", s.CPU.DatabaseBackends), f3(db), "ms")
	}
	if svOK && dbOK {
		f.row("steady", "total CPU per heartbeat", f3(tot), "ms")
	}
}

func sweepFigures(f figures, s *Summary) {
	val := func(v int) string {
		if !s.Sweep.Done {
			return "—"
		}
		return thousands(int64(v))
	}
	f.row("sweep", "on-time servers seen non-healthy (false transitions)", thousands(int64(s.Sweep.OnTimeNonHealthy)), "servers")
	f.row("sweep", "final sweep: this run's servers degraded", val(s.Sweep.Degraded), "servers")
	f.row("sweep", "final sweep: this run's servers unhealthy", val(s.Sweep.Unhealthy), "servers")
	f.row("sweep", "final sweep: of those, not heartbeated on time", val(s.Sweep.LateModules), "servers")
	f.row("sweep", "final sweep: other non-healthy servers", val(s.Sweep.Foreign), "servers")
}

func peakFigures(f figures, s *Summary) {
	if p := s.Peak; p.Sent > 0 {
		f.row("peak", "heartbeat rate (closed loop + steady underneath)", f1(p.RatePerSecond), "heartbeats/s")
		f.row("peak", "latency p50 / p99 / max", latencies(p), "ms")
		f.row("peak", "errors", nf(p.Errors.Total), "requests")
	}
	if p := s.Ceiling; p.Sent > 0 {
		f.row("ceiling", "no-op gin server rate", f1(p.RatePerSecond), "requests/s")
		f.row("ceiling", "latency p50 / p99 / max", latencies(p), "ms")
		f.row("ceiling", "errors", nf(p.Errors.Total), "requests")
	}
	if noop, ok := s.NoopPerRequest(); ok {
		f.row("ceiling", "no-op server CPU per request (closed loop)", f3(noop), "ms")
	}
	if p := s.NoopSteady; p.Sent > 0 {
		f.row("no-op at the steady rate", "requests answered / rate achieved / rate expected (N/H)", fmt.Sprintf("%s / %s / %s", nf(p.OK), f1(p.RatePerSecond), f1(p.ExpectedRatePerSecond)), "requests, requests/s")
		f.row("no-op at the steady rate", "latency p50 / p99 / max", latencies(p), "ms")
		f.row("no-op at the steady rate", "errors", nf(p.Errors.Total), "requests")
	}
	if noop, ok := s.NoopSteadyPerRequest(); ok {
		f.row("no-op at the steady rate", "no-op server CPU per request (the CPU target's divisor)", f3(noop), "ms")
	}
	if s.Peak.OK > 0 && s.Ceiling.OK > 0 {
		f.row("peak vs ceiling", "peak as a share of the no-op ceiling", f1(s.CeilingRatioPercent), "%")
	}
}

func memoryFigures(f figures, s *Summary) {
	if s.RSS.Measured {
		f.row("memory", fmt.Sprintf("service RSS before registration (pid %d)", s.RSS.PID), thousands(s.RSS.BeforeKiB), "KiB")
		f.row("memory", "service RSS after the steady phase", thousands(s.RSS.AfterKiB), "KiB")
		f.row("memory", "RSS growth per registered server", f2(s.RSS.PerServerKiB), "KiB/server")
	}
	if s.Heap.Measured {
		f.row("memory", "live heap before registration (heap profile, after a GC)", thousands(s.Heap.BeforeBytes/1024), "KiB")
		f.row("memory", "live heap after the steady phase (heap profile, after a GC)", thousands(s.Heap.AfterBytes/1024), "KiB")
		f.row("memory", "live heap per registered server", f2(s.Heap.PerServerBytes/1024), "KiB/server")
	}
}

func restartFigures(f figures, s *Summary) {
	if step := s.ColdStartStep; step != nil {
		ph := "cold-start step"
		f.row(ph, fmt.Sprintf("modules registered on a fresh database (H = %s, no heartbeats)", secs(step.IntervalSeconds)), thousands(int64(step.Servers)), "servers")
		f.row(ph, "registration time", f2(step.RegistrationSeconds), "s")
		for i, v := range step.ReadySeconds {
			f.row(ph, fmt.Sprintf("restart %d: serve to ready", i+1), f2(v), "s")
			if i < len(step.RSSAtReadyKiB) && step.RSSAtReadyKiB[i] > 0 {
				f.row(ph, fmt.Sprintf("restart %d: service RSS at ready", i+1), thousands(step.RSSAtReadyKiB[i]), "KiB")
			}
		}
		if step.Error != "" {
			f.row(ph, "stopped early", step.Error, "")
		}
	}
	if s.ColdStart.Measured {
		f.row("cold start", fmt.Sprintf("serve to ready with %s servers in PostgreSQL", thousands(int64(s.ColdStart.Servers))), f2(s.ColdStart.Seconds), "s")
		if s.ColdStart.RSSAtReadyKiB > 0 {
			f.row("cold start", "service RSS at ready (at rest)", thousands(s.ColdStart.RSSAtReadyKiB), "KiB")
		}
	}
	for i, run := range s.Tracing.Runs {
		ph := "tracing " + run.Name
		f.row(ph, "serve to ready", f2(run.ReadySeconds), "s")
		f.row(ph, "first H after ready: heartbeats answered 200 / errors", nf(run.AfterReady.OK)+" / "+nf(run.AfterReady.Errors.Total), "heartbeats")
		f.row(ph, "first H after ready: latency p50 / p99 / max", latencies(run.AfterReady), "ms")
		f.row(ph, "first H after ready: non-healthy answers, module on time", nf(run.AfterReady.NonHealthyOnTime), "answers")
		f.row(ph, "closed-loop heartbeat rate (steady underneath)", f1(run.Peak.RatePerSecond), "heartbeats/s")
		f.row(ph, "latency p50 / p99 / max", latencies(run.Peak), "ms")
		f.row(ph, "errors", nf(run.Peak.Errors.Total), "requests")
		if p, ok := s.Tracing.ThroughputVsOff(i); ok && run.Env != nil {
			f.row(ph, "throughput vs tracing off", f1(p), "%")
		}
		if c, ok := run.CPUPerHeartbeat(); ok {
			f.row(ph, "service CPU per heartbeat in the closed loop", f3(c), "ms")
		}
		if p, ok := s.Tracing.CPUVsOff(i); ok && run.Env != nil {
			f.row(ph, "service CPU per heartbeat vs tracing off", f1(p), "%")
		}
	}
	if s.Tracing.Measured {
		f.row("tracing", "exports the discard collector received", thousands(s.Tracing.Exports), "requests")
		f.row("tracing", "bytes exported", thousands(s.Tracing.ExportBytes/1024), "KiB")
	}
}

// writePlotLinks links the SVG plots written beside the report.
func writePlotLinks(b *strings.Builder, s *Summary) {
	if len(s.PlotFiles) != 2 {
		return
	}
	fmt.Fprintf(b, "\n## Plots\n\n")
	fmt.Fprintf(b, "Heartbeat latency per second of the run, p50 and p99, each phase in its colour ([%s](%s)):\n\n![heartbeat latency over time](%s)\n\n", s.PlotFiles[0], s.PlotFiles[0], s.PlotFiles[0])
	fmt.Fprintf(b, "Latency histogram of each phase ([%s](%s)):\n\n![heartbeat latency histogram per phase](%s)\n", s.PlotFiles[1], s.PlotFiles[1], s.PlotFiles[1])
}

// writeErrors writes the errors of every phase by kind, most frequent first.
func writeErrors(b *strings.Builder, s *Summary) {
	type errRow struct {
		phase, kind string
		n           uint64
	}
	var errs []errRow
	type errPhase struct {
		name string
		e    ErrorSummary
	}
	phases := []errPhase{
		{"registration", s.Registration.Errors}, {"registration, attempts tried again", s.Registration.Retried},
		{"registration heartbeats", s.Warmup.Errors}, {"steady", s.Steady.Errors},
		{"peak", s.Peak.Errors}, {"ceiling", s.Ceiling.Errors}, {"deregistration", s.Deregistration.Errors},
		{"deregistration heartbeats", s.Tail.Errors},
	}
	for _, st := range s.Hold.Steps {
		phases = append(phases,
			errPhase{"hold search, deregistration before " + thousands(int64(st.Servers)) + " servers", st.DeregisterErrors},
			errPhase{"hold search, " + thousands(int64(st.Servers)) + " servers", st.Window.Errors})
	}
	for _, run := range s.Tracing.Runs {
		phases = append(phases,
			errPhase{"first H after ready, tracing " + run.Name, run.AfterReady.Errors},
			errPhase{"peak, tracing " + run.Name, run.Peak.Errors})
	}
	for _, p := range phases {
		for _, k := range slices.Sorted(maps.Keys(p.e.ByKind)) {
			errs = append(errs, errRow{p.name, k, p.e.ByKind[k]})
		}
	}
	fmt.Fprintf(b, "\n## Errors by kind\n\n")
	if len(errs) == 0 {
		fmt.Fprintf(b, "None.\n")
		return
	}
	slices.SortStableFunc(errs, func(a, b errRow) int { return cmp.Compare(b.n, a.n) })
	fmt.Fprintf(b, "| phase | kind | count |\n|---|---|---|\n")
	for _, e := range errs {
		fmt.Fprintf(b, "| %s | %s | %s |\n", e.phase, cell(e.kind), thousands(int64(e.n)))
	}
}

// writeHowToRead states how each figure is measured.
func writeHowToRead(b *strings.Builder, s *Summary) {
	fmt.Fprintf(b, "\n## How to read it\n\n")
	fmt.Fprintf(b, "- Latency is measured by the load generator, from sending a request to reading its whole answer, for answers 2xx; it includes the client's own queueing on a machine it shares with the service.\n")
	fmt.Fprintf(b, "- A module whose registration fails with a 503, a 429 or a timeout tries again, as a module that must stay registered does (after 100 ms, 200 ms, … at most 2 s, or the answer's Retry-After up to 5 s plus up to a second at random, so that modules refused together do not come back together; registering again is idempotent, and one that committed after its module stopped waiting answers 200), until it is registered, refused for good, or the phase's time limit ends. Registration errors are the modules that did not register; the attempts tried again are listed apart in Errors by kind.\n")
	fmt.Fprintf(b, "- A false transition is a heartbeat answered with a status other than healthy, or a server a `GET /v1/mcp/servers?status=degraded|unhealthy` sweep lists (every H/2 during the steady phase, and once after it), for a module whose last 2xx heartbeat had been sent less than 2H before.\n")
	fmt.Fprintf(b, "- The peak is a closed loop of %d workers heartbeating as fast as they can, with the steady schedule still running underneath (both count). The ceiling is the same closed loop against a no-op gin server in a child process, measured first while the service is idle; the same no-op server is then driven at the steady rate (N/H requests/s, paced evenly, through %d connections, after a 1 s warm-up) — the same load as the steady phase — and its CPU per request there is what the service's CPU per steady heartbeat is divided by: at a closed loop's rate every request costs less (fewer wake-ups, more requests per read and write), so the closed loop's figure, also shown, would compare unlike loads.\n", s.Config.PeakWorkers, s.Config.Connections)
	fmt.Fprintf(b, "- RSS growth per server is (VmRSS after the steady phase − VmRSS before registration) / servers registered. The live heap per server is the same difference of the heap profile's in-use bytes (`/debug/pprof/heap?gc=1`: as of a collection the request forces, each record scaled for the sampling as pprof does; live objects only, without the garbage a collection cycle lets accumulate, stacks or runtime overhead). Runs before 2026-12-05 took the profile's HeapAlloc, which a saturated service inflated with what it allocated while the profile was written.\n")
	fmt.Fprintf(b, "- CPU per heartbeat is the CPU (user + system, from `/proc/<pid>/stat`, 10 ms resolution) that the service process, and the PostgreSQL backends serving its database (pids from `pg_stat_activity`), spent during the steady phase, divided by the heartbeats answered 200 in it; the sweeps and the monitor's work in that window count too, PostgreSQL's shared processes (WAL writer, checkpointer, autovacuum) do not. The no-op server's CPU per request is measured the same way, over its run at the steady rate (and, shown beside it, over the ceiling's closed loop), after a warm-up.\n")
	coldFigure := ""
	if s.ColdStartStep != nil {
		coldFigure = " of this run's fleet (the target is judged by the cold-start step's, below)"
	}
	fmt.Fprintf(b, "- The restart phases stop the service (SIGTERM) after the peak and start it again on the same database, with the run's fleet in it, thirteen times, each with one tracing configuration: off, 100 %% (`OTEL_TRACES_SAMPLER=always_on`) or 1 %% parent-based (`parentbased_traceidratio`, 0.01), exporting OTLP/HTTP to a discard collector in the load generator. Serve to ready is from starting the process to its first `/readyz` 200; the first (tracing off) is the cold-start figure%s. The steady schedule's heartbeats of the first H after ready are reported on their own (every module heartbeats once in it, so what the service must read again after a restart — each server's owner for the heartbeat's authorisation — is read there, not in the closed loop). Each then runs the peak's closed loop again. The configurations run in a balanced order — off, 1 %%, 100 %%, off, 100 %%, 1 %%, twice, then off — so each kind has the same mean position and follows each other kind exactly twice, never itself: a steady drift of the machine's speed, and what a run leaves behind for the next, fall on all of them alike. A tracing configuration's throughput is the mean rate of its four runs ÷ the mean of the five tracing-off runs', and each run is also shown on its own against that mean. While the service is down the steady schedule's heartbeats are dropped, not sent, as a fleet backing off would.\n", coldFigure)
	if s.ColdStartStep != nil {
		fmt.Fprintf(b, "- The cold-start step runs before the load run, on a fresh database of its own: it registers its modules through the API as the registration phase does (at H = %s, so that none has to heartbeat and every registration goes in), then stops the service (SIGTERM) and starts it again, tracing off, %d times, %s after each ready, each timed from starting the process to its first `/readyz` 200. The cold-start target is judged by the slowest of its restarts at its fleet's size, which does not depend on how large a fleet the load run could hold; the load run's own first restart is shown beside it.\n",
			secs(s.ColdStartStep.IntervalSeconds), s.ColdStartStep.Runs, secs(coldStartSettle.Seconds()))
	}
}

// comparisonRow is one line of the table against the reference.
type comparisonRow struct {
	figure, mcpfleet, reference, unit string
}

// comparisonRows lists the figures of s and of the reference run ref side by side; a figure either
// run did not measure is "—".
func comparisonRows(s, ref *Summary) []comparisonRow {
	f1 := func(v float64, ok bool) string {
		if !ok {
			return "—"
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	f2 := func(v float64, ok bool) string {
		if !ok {
			return "—"
		}
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	f3 := func(v float64, ok bool) string {
		if !ok {
			return "—"
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	sSv, sDb, sTot, sSvOK, sDbOK := s.PerHeartbeat()
	rSv, rDb, rTot, rSvOK, rDbOK := ref.PerHeartbeat()
	rows := []comparisonRow{
		{"servers registered", thousands(int64(s.Registration.Registered)), thousands(int64(ref.Registration.Registered)), "servers"},
		{"registration rate", f1(s.Registration.RatePerSecond, s.Registration.Registered > 0), f1(ref.Registration.RatePerSecond, ref.Registration.Registered > 0), "registrations/s"},
		{fmt.Sprintf("steady heartbeat rate achieved (N/H = %.0f)", s.Steady.ExpectedRatePerSecond), f1(s.Steady.RatePerSecond, s.Steady.Sent > 0), f1(ref.Steady.RatePerSecond, ref.Steady.Sent > 0), "heartbeats/s"},
		{"steady latency p50", f2(s.Steady.P50Ms, s.Steady.OK > 0), f2(ref.Steady.P50Ms, ref.Steady.OK > 0), "ms"},
		{"steady latency p99", f2(s.Steady.P99Ms, s.Steady.OK > 0), f2(ref.Steady.P99Ms, ref.Steady.OK > 0), "ms"},
		{"steady errors", thousands(int64(s.Steady.Errors.Total)), thousands(int64(ref.Steady.Errors.Total)), "requests"},
		{"false transitions", thousands(int64(s.FalseTransitions)), thousands(int64(ref.FalseTransitions)), "answers and servers"},
		{"closed-loop peak (steady underneath)", f1(s.Peak.RatePerSecond, s.Peak.OK > 0), f1(ref.Peak.RatePerSecond, ref.Peak.OK > 0), "heartbeats/s"},
		{"service CPU per heartbeat", f3(sSv, sSvOK), f3(rSv, rSvOK), "ms"},
		{"PostgreSQL CPU per heartbeat (its database's backends)", f3(sDb, sDbOK), f3(rDb, rDbOK), "ms"},
		{"total CPU per heartbeat", f3(sTot, sSvOK && sDbOK), f3(rTot, rSvOK && rDbOK), "ms"},
		{"service RSS growth per server", f2(s.RSS.PerServerKiB, s.RSS.Measured), f2(ref.RSS.PerServerKiB, ref.RSS.Measured), "KiB/server"},
	}
	return rows
}

// writeComparison writes the table of s against the reference run ref, and the ratios the issue's
// targets are stated in.
func writeComparison(b *strings.Builder, s, ref *Summary) {
	fmt.Fprintf(b, "| figure | mcpfleet | reference | unit |\n|---|---|---|---|\n")
	for _, r := range comparisonRows(s, ref) {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(r.figure), r.mcpfleet, r.reference, r.unit)
	}
	if p, ok := peakRatio(s, ref); ok {
		fmt.Fprintf(b, "\nmcpfleet's closed-loop peak is %.2f× the reference's", p)
		if c, ok := cpuRatio(s, ref); ok {
			fmt.Fprintf(b, "; its total CPU per heartbeat is %.2f× the reference's", c)
		}
		fmt.Fprintf(b, ".\n")
	}
}

// peakRatio is mcpfleet's closed-loop peak ÷ the reference's.
func peakRatio(s, ref *Summary) (float64, bool) {
	if s.Peak.OK == 0 || ref == nil || ref.Peak.OK == 0 || ref.Peak.RatePerSecond == 0 {
		return 0, false
	}
	return s.Peak.RatePerSecond / ref.Peak.RatePerSecond, true
}

// cpuRatio is mcpfleet's total CPU per heartbeat (service + PostgreSQL backends) ÷ the reference's.
func cpuRatio(s, ref *Summary) (float64, bool) {
	if ref == nil {
		return 0, false
	}
	_, _, st, sOK1, sOK2 := s.PerHeartbeat()
	_, _, rt, rOK1, rOK2 := ref.PerHeartbeat()
	if !sOK1 || !sOK2 || !rOK1 || !rOK2 || rt == 0 {
		return 0, false
	}
	return st / rt, true
}

// cell escapes a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func secs(v float64) string {
	return time.Duration(v * float64(time.Second)).String()
}

func rampText(perSecond int) string {
	if perSecond <= 0 {
		return "unlimited"
	}
	return thousands(int64(perSecond)) + "/s"
}

// thousands formats n with comma separators: 100000 → "100,000".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// plural is "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
