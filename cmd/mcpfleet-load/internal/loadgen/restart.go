package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The restart phases (Config.ServiceCommand): after the peak, the service is stopped (SIGTERM) and
// started again from Config.ServiceCommand with each tracing configuration in turn, on the same
// database, with the run's fleet in it. Each start measures the cold start (serve to /readyz 200),
// then the same closed-loop peak as the peak phase, steady heartbeats underneath. The first start has
// tracing off: its time to ready is the cold-start figure, and the throughput every tracing
// configuration is compared with. Traces go to a discard collector in this process (OTLP/HTTP, every
// export answered 200 and dropped), so the service pays for sampling, recording and exporting spans,
// and no collector competes with it for the machine.

// TracingSummary compares the closed-loop heartbeat throughput of the service restarted with each
// tracing configuration.
type TracingSummary struct {
	Measured bool         `json:"measured"`
	Error    string       `json:"error,omitempty"`
	Runs     []TracingRun `json:"runs,omitempty"`
	// Exports and ExportBytes are what the discard collector received (proof that spans went out).
	Exports     int64 `json:"exports"`
	ExportBytes int64 `json:"export_bytes"`
}

// TracingRun is one restart of the service with one tracing configuration.
type TracingRun struct {
	Name         string   `json:"name"`
	Env          []string `json:"env,omitempty"`
	ReadySeconds float64  `json:"ready_seconds"`
	// AfterReady is the steady schedule's heartbeats in the first H after ready, before the closed loop:
	// every module heartbeats once, so the service's per-server caches are warm when the loop starts.
	AfterReady PhaseSummary `json:"after_ready"`
	Peak       PhaseSummary `json:"peak"`
	// ServiceCPUSeconds is the CPU the service spent during Peak (the closed loop and the steady
	// heartbeats underneath): per heartbeat, the cost of the configuration whatever rate the load
	// generator reached.
	ServiceCPUMeasured bool    `json:"service_cpu_measured"`
	ServiceCPUSeconds  float64 `json:"service_cpu_seconds"`
}

// CPUPerHeartbeat is the service's CPU per heartbeat answered 200 during the run's closed loop, in ms.
func (t TracingRun) CPUPerHeartbeat() (float64, bool) {
	if !t.ServiceCPUMeasured || t.Peak.OK == 0 {
		return 0, false
	}
	return 1000 * t.ServiceCPUSeconds / float64(t.Peak.OK), true
}

// ColdStartSummary is serve → ready with the run's fleet in PostgreSQL (a restart, a failover).
type ColdStartSummary struct {
	Measured      bool    `json:"measured"`
	Servers       int     `json:"servers"`
	Seconds       float64 `json:"seconds"`
	RSSAtReadyKiB int64   `json:"rss_at_ready_kib,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// The kinds of tracing configuration: each ran more than once, interleaved.
const (
	kindOff   = "off"
	kindFull  = "full"
	kindRatio = "ratio"
)

var (
	fullEnv  = []string{"OTEL_TRACES_SAMPLER=always_on"}
	ratioEnv = []string{"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.01"}
)

// tracingConfigs are the configurations compared, in the order they run: off, 1 %, 100 %, off, 100 %,
// 1 %, twice, and off once more — thirteen runs, off five times and each tracing kind four. On a shared
// virtual machine two identical 10 s loops differ by tens of per cent, so the order is balanced two
// ways. Every kind has the same mean position (6), so a steady drift of the machine's speed falls on
// each kind alike and cancels out of the comparison. And it is balanced for carry-over: every kind
// follows each other kind exactly twice and never itself, so what a run leaves behind for the next
// (a run right after a 100 % one was measured slower, bench/REPORT.md of 2026-12-05) falls on every
// kind alike too. The earlier orders did not: off, 1 %, 100 %, 100 %, 1 %, off put 1 % after 100 % twice
// and off never, and off, 100 %, 1 %, … put every 1 % run after a 100 % one. The spread of one kind's
// runs shows how far a single run can be trusted.
var tracingConfigs = carryoverBalanced(2,
	tracingKind{"off", kindOff, nil},
	tracingKind{"1 % parent-based", kindRatio, ratioEnv},
	tracingKind{"100 % (always_on)", kindFull, fullEnv})

// tracingKind is one tracing configuration.
type tracingKind struct {
	name string
	kind string
	env  []string // with the discard collector's endpoint added when not empty
}

// carryoverBalanced returns rounds × (base, a, b, base, b, a), then base: each of the three kinds
// follows each other kind rounds times and never itself, and each kind's mean position is 3 × rounds.
// Each run is named with its kind's count: "off (1)", "1 % parent-based (1)", …
func carryoverBalanced(rounds int, base, a, b tracingKind) []tracingKind {
	var out []tracingKind
	seen := map[string]int{}
	add := func(k tracingKind) {
		seen[k.kind]++
		k.name = fmt.Sprintf("%s (%d)", k.name, seen[k.kind])
		out = append(out, k)
	}
	for range rounds {
		for _, k := range []tracingKind{base, a, b, base, b, a} {
			add(k)
		}
	}
	add(base)
	return out
}

// kindMean is the mean of value over the runs of kind for which value is known, and how many those
// are; 0, 0 if none.
func (t *TracingSummary) kindMean(kind string, value func(TracingRun) (float64, bool)) (float64, int) {
	var sum float64
	n := 0
	for _, run := range t.runsOf(kind) {
		if v, ok := value(run); ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

// runsOf yields the runs of kind with their indexes.
func (t *TracingSummary) runsOf(kind string) iter.Seq2[int, TracingRun] {
	return func(yield func(int, TracingRun) bool) {
		for j, run := range t.Runs {
			if j < len(tracingConfigs) && tracingConfigs[j].kind == kind && !yield(j, run) {
				return
			}
		}
	}
}

// offMean is the mean of value over the tracing-off runs for which value is known; 0 if none.
func (t *TracingSummary) offMean(value func(TracingRun) (float64, bool)) float64 {
	m, _ := t.kindMean(kindOff, value)
	return m
}

func peakRate(run TracingRun) (float64, bool) { return run.Peak.RatePerSecond, run.Peak.OK > 0 }

// offRate is the mean closed-loop rate of the tracing-off runs that answered heartbeats.
func (t *TracingSummary) offRate() float64 { return t.offMean(peakRate) }

// vsOff is v as a percentage of value's mean over the tracing-off runs; ok is false until the
// comparison is complete or when that mean is unknown.
func (t *TracingSummary) vsOff(value func(TracingRun) (float64, bool), v float64) (float64, bool) {
	off := t.offMean(value)
	if !t.Measured || off == 0 {
		return 0, false
	}
	return 100 * v / off, true
}

// ThroughputVsOff returns run i's closed-loop rate ÷ the tracing-off runs' mean rate, in percent.
func (t *TracingSummary) ThroughputVsOff(i int) (float64, bool) {
	if len(t.Runs) <= i {
		return 0, false
	}
	rate, ok := peakRate(t.Runs[i])
	if !ok {
		return 0, false
	}
	return t.vsOff(peakRate, rate)
}

// CPUVsOff returns run i's service CPU per heartbeat ÷ the tracing-off runs' mean, in percent (100: tracing
// costs the service nothing).
func (t *TracingSummary) CPUVsOff(i int) (float64, bool) {
	if len(t.Runs) <= i {
		return 0, false
	}
	c, ok := t.Runs[i].CPUPerHeartbeat()
	if !ok {
		return 0, false
	}
	return t.vsOff(TracingRun.CPUPerHeartbeat, c)
}

// KindVsOff compares a kind of tracing configuration with tracing off over all their runs: the mean
// closed-loop rate of kind's runs ÷ the tracing-off runs' mean, in percent, with that mean rate and how
// many of kind's runs it averages; ok is false until the comparison is complete or when either side
// answered nothing.
func (t *TracingSummary) KindVsOff(kind string) (percent, rate float64, runs int, ok bool) {
	rate, runs = t.kindMean(kind, peakRate)
	if runs == 0 {
		return 0, 0, 0, false
	}
	if percent, ok = t.vsOff(peakRate, rate); !ok {
		return 0, 0, 0, false
	}
	return percent, rate, runs, true
}

// KindSpread is the lowest and highest ThroughputVsOff of kind's runs (kindOff's too: how far the
// baseline's own runs stray from their mean), and how many runs that is; ok is false until the
// comparison is complete or when no run of kind answered. It says how far one run can be trusted: a
// kind's mean whose distance from 100 % is within off's own spread is within the machine's noise.
func (t *TracingSummary) KindSpread(kind string) (lo, hi float64, runs int, ok bool) {
	for j := range t.runsOf(kind) {
		p, known := t.ThroughputVsOff(j)
		if !known {
			continue
		}
		if runs == 0 || p < lo {
			lo = p
		}
		if runs == 0 || p > hi {
			hi = p
		}
		runs++
	}
	return lo, hi, runs, runs > 0
}

// KindCPUVsOff is the mean service CPU per heartbeat of kind's runs ÷ the tracing-off runs' mean, in
// percent.
func (t *TracingSummary) KindCPUVsOff(kind string) (float64, bool) {
	c, n := t.kindMean(kind, TracingRun.CPUPerHeartbeat)
	if n == 0 {
		return 0, false
	}
	return t.vsOff(TracingRun.CPUPerHeartbeat, c)
}

// runRestarts runs the restart phases into s.Tracing and s.ColdStart (see above). registered is the
// fleet's size.
func (r *runner) runRestarts(ctx context.Context, s *Summary, registered int) {
	s.ColdStart.Servers = registered
	collector, err := startDiscardCollector()
	if err != nil {
		s.Tracing.Error = err.Error()
		s.ColdStart.Error = err.Error()
		r.note("restart phases not run: %v", err)
		return
	}
	defer collector.close()
	idle := newPhase("restarts")
	r.cur.Store(idle) // heartbeats failing while the service restarts count nowhere
	for i, c := range tracingConfigs {
		env := c.env
		if env != nil {
			env = append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.url}, env...)
		}
		r.logf("restart: the service with tracing %s (%d servers in PostgreSQL)", c.name, registered)
		ready, err := r.restartService(ctx, env, fmt.Sprintf("%s-%d.log", r.cfg.ServiceLog, i))
		if err != nil {
			s.Tracing.Error = fmt.Sprintf("restart with tracing %s: %v", c.name, err)
			if i == 0 {
				s.ColdStart.Error = s.Tracing.Error
			}
			r.note("restart phases stopped: %s", s.Tracing.Error)
			return
		}
		r.logf("restart: ready in %s", ready.Round(time.Millisecond))
		if i == 0 {
			s.ColdStart.Measured, s.ColdStart.Seconds = true, ready.Seconds()
			if kib, err := ReadRSS(r.child.Process.Pid); err == nil {
				s.ColdStart.RSSAtReadyKiB = kib
			}
		}
		after := newPhase("first H after ready, tracing " + c.name)
		r.cur.Store(after)
		select {
		case <-ctx.Done():
		case <-time.After(r.cfg.Interval):
		}
		after.finish()
		ph := newPhase("peak, tracing " + c.name)
		r.cur.Store(ph)
		cpu, cpuOK := r.warmAndRun(ctx, ph, r.hb, len(r.registeredIndexes()), r.pickRegistered(), r.child.Process.Pid)
		r.cur.Store(idle)
		s.Tracing.Runs = append(s.Tracing.Runs, TracingRun{Name: c.name, Env: c.env, ReadySeconds: ready.Seconds(),
			AfterReady: summarizePhase(after, float64(registered)/r.cfg.Interval.Seconds()), Peak: summarizePhase(ph, 0),
			ServiceCPUMeasured: cpuOK, ServiceCPUSeconds: cpu.Seconds()})
		s.Plots = append(s.Plots, plotOf(after), plotOf(ph))
		r.logf("restart: tracing %s: first H after ready %d errors, p99 %s; closed loop %.0f heartbeats/s", c.name,
			s.Tracing.Runs[i].AfterReady.Errors.Total, ms(s.Tracing.Runs[i].AfterReady.P99Ms), s.Tracing.Runs[i].Peak.RatePerSecond)
		if ctx.Err() != nil {
			s.Tracing.Error = ctx.Err().Error()
			return
		}
	}
	s.Tracing.Measured = true
	s.Tracing.Exports, s.Tracing.ExportBytes = collector.requests.Load(), collector.bytes.Load()
}

// restartService stops the running service (the one of Config.ServicePID, or the child of an earlier
// restart) and starts Config.ServiceCommand serve with this process's environment, less any OTEL
// tracing variable, plus env; its output goes to logPath. It returns how long the new process took
// from its start to answering /readyz 200.
func (r *runner) restartService(ctx context.Context, env []string, logPath string) (time.Duration, error) {
	r.paused.Store(true)
	defer r.paused.Store(false)
	if err := r.stopService(); err != nil {
		return 0, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(r.cfg.ServiceCommand, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_TRACES_SAMPLER") && !strings.HasPrefix(kv, "OTEL_EXPORTER_OTLP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlive the load generator
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	r.child = cmd
	exited := make(chan struct{})
	r.childExited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	ready := r.cfg.BaseURL + "/readyz"
	deadline := time.After(5 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
		if res, err := r.regHC.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("the service exited before it was ready; see %s", logPath)
		case <-deadline:
			return 0, fmt.Errorf("the service was not ready after 5 min; see %s", logPath)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stopService stops the running service with SIGTERM and waits (at most 2 min) for it to exit.
func (r *runner) stopService() error {
	if r.child != nil {
		_ = r.child.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.childExited:
		case <-time.After(2 * time.Minute):
			_ = r.child.Process.Kill()
			<-r.childExited
		}
		r.child = nil
		return nil
	}
	pid := r.cfg.ServicePID
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop the service (pid %d): %w", pid, err)
	}
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if gone(pid) {
			return nil
		}
	}
	return fmt.Errorf("the service (pid %d) did not exit within 2 min of SIGTERM", pid)
}

// gone reports whether process pid has exited (no such process, or a zombie its parent has not reaped).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses: "pid (comm) S …".
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// registeredIndexes returns the indexes of the modules registered now.
func (r *runner) registeredIndexes() []int32 {
	out := make([]int32, 0, len(r.byID))
	for i := range r.mods {
		if r.mods[i].state.Load() == stateRegistered {
			out = append(out, int32(i))
		}
	}
	return out
}

// pickRegistered returns a closed-loop pick over the modules registered now.
func (r *runner) pickRegistered() func(k int) (*module, []byte) {
	registered := r.registeredIndexes()
	return func(k int) (*module, []byte) {
		m := &r.mods[registered[k%len(registered)]]
		return m, m.body
	}
}

// discardCollector is an OTLP/HTTP trace endpoint that reads every export, answers 200 and drops it.
type discardCollector struct {
	url      string
	srv      *http.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

func startDiscardCollector() (*discardCollector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("discard collector: %w", err)
	}
	c := &discardCollector{url: "http://" + ln.Addr().String()}
	c.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := io.Copy(io.Discard, req.Body)
		c.requests.Add(1)
		c.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse: all accepted
	})}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

func (c *discardCollector) close() { _ = c.srv.Close() }

// HeapSummary is the service's live heap, from its heap profile (Config.ServicePprof, after a GC),
// before registration and after the steady phase.
type HeapSummary struct {
	Measured       bool    `json:"measured"`
	BeforeBytes    int64   `json:"before_bytes"`
	AfterBytes     int64   `json:"after_bytes"`
	PerServerBytes float64 `json:"per_server_bytes"`
	Error          string  `json:"error,omitempty"`
}

// profileService takes the service's CPU profile for d (whole seconds, at least 1) into
// Config.ServiceCPUProfile, if set with Config.ServicePprof; the channel closes when it is written (or
// failed, with a note).
func (r *runner) profileService(ctx context.Context, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if r.cfg.ServicePprof == "" || r.cfg.ServiceCPUProfile == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		secs := max(1, int(d/time.Second))
		ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
		defer cancel()
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(r.cfg.ServicePprof, "/"), secs)
		err := func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			res, err := (&http.Client{}).Do(req)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %d", res.StatusCode)
			}
			f, err := os.Create(r.cfg.ServiceCPUProfile)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, res.Body); err != nil {
				_ = f.Close()
				return err
			}
			return f.Close()
		}()
		if err != nil {
			r.note("the service's CPU profile of the steady phase was not taken: %v", err)
			return
		}
		r.note("the service's CPU profile of the steady phase is in %s (`go tool pprof -top %s`)", r.cfg.ServiceCPUProfile, r.cfg.ServiceCPUProfile)
	}()
	return done
}

// readHeap reads the service's live heap into s.Heap: before registration (registered = 0) or after the
// steady phase with registered servers (then the figure per server).
func (r *runner) readHeap(ctx context.Context, s *Summary, registered int) {
	if r.cfg.ServicePprof == "" || s.Heap.Error != "" {
		return
	}
	b, err := r.readLiveHeap(ctx)
	if err != nil {
		s.Heap.Error = err.Error()
		r.note("live heap not measured: %v", err)
		return
	}
	if registered == 0 {
		s.Heap.BeforeBytes = b
		return
	}
	s.Heap.AfterBytes, s.Heap.Measured = b, true
	s.Heap.PerServerBytes = float64(b-s.Heap.BeforeBytes) / float64(registered)
}

// readLiveHeap reads the live heap from the service's heap profile (?gc=1: as of a collection it
// forces), in its text form.
func (r *runner) readLiveHeap(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.cfg.ServicePprof, "/")+"/debug/pprof/heap?debug=1&gc=1", nil)
	if err != nil {
		return 0, err
	}
	hc := &http.Client{Timeout: time.Minute}
	res, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile: HTTP %d", res.StatusCode)
	}
	return parseInUse(res.Body)
}

// parseInUse sums the in-use bytes of a heap profile's text form (debug=1), each record scaled for the
// sampling as pprof scales it: the live heap as of the last collection. (The profile's "# HeapAlloc"
// is read after the profile is written; on a saturated service the profiling goroutine waits its turn
// behind every runnable request, and HeapAlloc then also counted what they allocated meanwhile — twice
// the live heap at 190,000 servers.)
func parseInUse(body io.Reader) (int64, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	rate := 0.0 // MemProfileRate: the header's heap/N is twice it
	var total float64
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "heap profile: "); ok {
			_, r, found := strings.Cut(v, "@ heap/")
			n, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if !found || err != nil || n <= 0 {
				return 0, fmt.Errorf("heap profile: header %q", line)
			}
			rate = n / 2
			continue
		}
		if rate == 0 || line == "" || line[0] < '0' || line[0] > '9' {
			continue
		}
		// "objects: bytes [allocated objects: allocated bytes] @ stack"
		objects, rest, ok1 := strings.Cut(line, ": ")
		size, _, ok2 := strings.Cut(rest, " [")
		count, err1 := strconv.ParseFloat(objects, 64)
		bytes, err2 := strconv.ParseFloat(size, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			return 0, fmt.Errorf("heap profile: record %q", line)
		}
		total += scaleInUse(count, bytes, rate)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	if rate == 0 {
		return 0, errors.New("heap profile: no header")
	}
	return int64(total), nil
}

// scaleInUse is the bytes a heap profile record of count sampled objects totalling size stands for,
// sampled on average once every rate bytes (runtime/pprof's scaleHeapSample).
func scaleInUse(count, size, rate float64) float64 {
	if count == 0 || size == 0 {
		return 0
	}
	if rate <= 1 {
		return size
	}
	return size / (1 - math.Exp(-size/count/rate))
}
