package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// ErrTargetsMissed is returned by Run with Config.Strict when the run
// completed but a target was not met (or could not be measured).
var ErrTargetsMissed = errors.New("targets not met")

const (
	stateNew int32 = iota
	stateRegistered
	stateDeregistered
)

// module is one simulated module.
type module struct {
	id    string
	body  []byte       // pre-encoded heartbeat body
	state atomic.Int32 // stateNew, stateRegistered, stateDeregistered
	// ok holds the latest requests the service answered 2xx for this
	// module (registration or heartbeat), sent and answered.
	ok evidence
}

// phase collects the figures of one phase. Safe for concurrent use.
type phase struct {
	name string
	lat  Histogram // latency of 2xx answers
	lag  Histogram // schedule lag of wheel beats: sent − due
	// series is the latency of 2xx answers per second of the run, for the plots.
	series series
	sent   atomic.Uint64
	ok     atomic.Uint64
	errs   errorCounts
	// retried counts the failed attempts that were tried again (registration only; see registerRetry).
	retried errorCounts
	// Non-healthy heartbeat answers, split by whether the module had been
	// heartbeating on time (previous 2xx sent less than 2H before).
	nonHealthyOnTime atomic.Uint64
	nonHealthyLate   atomic.Uint64
	// inflight is how many beats attributed to the phase are sent and not yet answered.
	inflight atomic.Int64

	mu         sync.Mutex
	start, end time.Time
}

func newPhase(name string) *phase { return &phase{name: name, start: time.Now()} }

// restart sets the phase's start to now.
func (p *phase) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
}

// finish sets the phase's end to now.
func (p *phase) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end = time.Now()
}

// closeWindow ends the window ph: beats sent from now on count in next, and closeWindow then waits,
// at most the request timeout and a second, for the beats ph sent that are still in flight, so that
// the window's rate and latency hold every beat it sent, the slow ones last. (A beat whose worker
// read ph just before the switch may still start after the wait; it is counted in ph or not at all.)
func (r *runner) closeWindow(ph, next *phase) {
	r.cur.Store(next)
	ph.finish()
	deadline := time.Now().Add(r.cfg.RequestTimeout + time.Second)
	for ph.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// elapsed is the phase's length so far, or its whole length once finished.
func (p *phase) elapsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.IsZero() {
		return time.Since(p.start)
	}
	return p.end.Sub(p.start)
}

// workItem is one heartbeat due: module index and due tick.
type workItem struct {
	idx int32
	due int64
}

type runner struct {
	cfg   Config
	log   io.Writer
	logMu sync.Mutex
	t0    time.Time
	slot  time.Duration

	mods []module
	byID map[string]int32

	regHC      *http.Client
	hb         *target // where heartbeats go
	fc, readFC *fleetclient.Client
	auth       string // the Authorization header of every request

	cur     atomic.Pointer[phase] // the phase wheel beats are counted in
	work    chan workItem         // due beats, from the dispatcher to the workers
	lastLag atomic.Int64          // schedule lag of the latest wheel beat, ns

	notesMu sync.Mutex
	notes   []string

	sweepMu    sync.Mutex
	sweepFalse map[string]fleetclient.Status // on-time modules a sweep saw non-healthy
	sweepErr   error

	progress atomic.Pointer[func() string]

	// pg reads pg_stat_activity for the CPU of ServiceDatabase's backends; nil when not measured.
	pg *pgx.Conn

	// child is the service started by the restart phases (nil before them); childExited closes when it exits.
	child       *exec.Cmd
	childExited chan struct{}
	// paused drops the wheel's beats while the service restarts: a fleet backs off while its service is
	// down, and the restart's time to ready is measured without thousands of refused connections a second
	// competing with it for the machine.
	paused atomic.Bool
}

// Run performs a whole load run and returns its summary. Progress goes to
// log. It returns an error if the run could not be made (bad config, the
// service refusing every registration, ctx ending); a completed run whose
// targets were missed returns its summary and, with cfg.Strict,
// ErrTargetsMissed.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Summary, error) {
	var coldStep *ColdStartStep
	if cfg.ColdStartFile != "" {
		step, err := ReadColdStartStep(cfg.ColdStartFile)
		if err != nil {
			return nil, err
		}
		coldStep = step
	}
	r, ctx, end, err := begin(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer end()
	cfg = r.cfg
	if cfg.PGURL != "" && cfg.ServiceDatabase != "" {
		conn, err := pgx.Connect(ctx, cfg.PGURL)
		if err != nil {
			r.note("PostgreSQL CPU not measured: %v", err)
		} else {
			r.pg = conn
			defer conn.Close(context.WithoutCancel(ctx))
		}
	}

	s := &Summary{StartedAt: time.Now().UTC(), Config: summarizeConfig(cfg), ColdStartStep: coldStep}
	s.LoadAverage[0] = loadAverage()

	// (d) The ceiling first, while the service is idle and before any
	// module exists, so that nothing else competes with the no-op server.
	if cfg.Ceiling && cfg.PeakDuration > 0 {
		r.measureCeiling(ctx, s)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("load run: %w", ctx.Err())
	}

	// (e) RSS and live heap before registration.
	r.readRSSBefore(s)
	r.readHeap(ctx, s, 0)

	// (a) Registration; the wheel starts heartbeating each module as soon
	// as it is registered, as a real module would.
	wheelCtx, stopWheel := context.WithCancel(ctx)
	defer stopWheel()
	warm := newPhase("registration heartbeats")
	r.cur.Store(warm)
	addCh := make(chan int32, 8192)
	wheelDone := r.startWheel(wheelCtx, addCh)

	regCPU := r.startCPU(ctx)
	reg := r.register(ctx, addCh)
	s.Registration = reg.summary
	r.logf("registration: %d of %d modules in %s (%.0f/s), %d errors",
		reg.summary.Registered, cfg.N, reg.ph.elapsed().Round(time.Millisecond), reg.summary.RatePerSecond, reg.summary.Errors.Total)
	if reg.summary.Registered == 0 {
		stopWheel()
		<-wheelDone
		return s, fmt.Errorf("load run: no module registered (%v)", reg.summary.Errors.ByKind)
	}
	r.indexRegistered(reg.summary.Registered)

	// Registration may have left heartbeats queued behind schedule (a busy
	// service answers slowly): let the backlog clear so that the steady
	// window measures the steady state.
	settled, settle := r.settle(ctx)
	s.SettleSeconds = settle.Seconds()
	if !settled {
		r.note("the heartbeat backlog left by registration had not cleared after %s; the steady phase starts anyway", settle.Round(time.Millisecond))
	}
	// The registration window's CPU: registration, the heartbeats of the modules already registered and
	// the backlog's settling, which are the warm phase's (s.Warmup) heartbeats.
	s.RegistrationCPU = r.stopCPU(ctx, regCPU, warm.elapsed(), "registration")

	// (b) Steady phase, with sweeps every H/2 for non-healthy servers.
	steady := newPhase("steady")
	r.cur.Store(steady)
	warm.finish()
	if cfg.Duration > 0 {
		r.runSteady(ctx, s, steady, reg.summary.Registered)
	}
	r.closeWindow(steady, newPhase("after steady")) // beats until the next phase count nowhere
	s.Steady = summarizePhase(steady, float64(reg.summary.Registered)/cfg.Interval.Seconds())
	s.Warmup = summarizePhase(warm, 0)
	s.Plots = append(s.Plots, plotOf(warm), plotOf(steady))

	// Final sweep, while every module is still heartbeating; then RSS.
	r.finalSweep(ctx, s)
	if cfg.ServicePID > 0 && s.RSS.Error == "" {
		r.readRSSAfter(s, reg.summary.Registered)
	}
	r.readHeap(ctx, s, reg.summary.Registered)
	r.logf("steady: %.0f heartbeats/s, p50 %s, p99 %s, max %s, %d errors, %d non-healthy answers on time, sweeps: %d on-time servers non-healthy; CPU: load generator %.0f %%, service %.0f %% of a core",
		s.Steady.RatePerSecond, ms(s.Steady.P50Ms), ms(s.Steady.P99Ms), ms(s.Steady.MaxMs), s.Steady.Errors.Total,
		s.Steady.NonHealthyOnTime, s.Sweep.OnTimeNonHealthy, s.CPU.ClientPercent, s.CPU.ServicePercent)

	// (c) Peak: closed loop over the registered modules, the wheel still
	// beating underneath; both count.
	if cfg.PeakDuration > 0 && ctx.Err() == nil {
		r.runPeak(ctx, s)
	}
	// Restarts: cold start, and the peak again with each tracing configuration.
	if cfg.ServiceCommand != "" && cfg.PeakDuration > 0 && ctx.Err() == nil {
		r.runRestarts(ctx, s, reg.summary.Registered)
		defer func() {
			if r.child != nil {
				_ = r.stopService()
			}
		}()
	}

	// The largest fleet held, if the steady phase did not hold the whole fleet.
	if ctx.Err() == nil {
		r.searchHeld(ctx, s)
	}

	// Deregistration; the wheel keeps the rest alive meanwhile.
	tail := newPhase("deregistration heartbeats")
	r.cur.Store(tail)
	if cfg.Deregister {
		r.deregisterAll(ctx, s)
	} else {
		r.note("modules were left registered (--deregister=false); they will go unhealthy")
	}
	stopWheel()
	<-wheelDone
	tail.finish()
	s.Tail = summarizePhase(tail, 0)
	s.Plots = append(s.Plots, plotOf(tail))

	if cfg.ReferenceDatabaseURL != "" && ctx.Err() == nil {
		s.Reference = r.runReference(ctx, reg.summary.Registered)
	}
	return s, r.conclude(ctx, s)
}

// begin validates cfg and returns the runner of a run with it (ReadKey defaulted), its progress lines
// started, ctx bounded by cfg.MaxRuntime, and end, which stops them all when the run is over.
func begin(ctx context.Context, cfg Config, log io.Writer) (r *runner, _ context.Context, end func(), _ error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if cfg.ReadKey == "" {
		cfg.ReadKey = cfg.APIKey
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxRuntime)
	r, err := newRunner(cfg, log)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	stopProgress := r.startProgress(ctx)
	return r, ctx, func() {
		stopProgress()
		r.regHC.CloseIdleConnections()
		cancel()
	}, nil
}

// newRunner returns the runner of a run with cfg (validated, ReadKey set), its HTTP clients built.
func newRunner(cfg Config, log io.Writer) (*runner, error) {
	r := &runner{
		cfg:        cfg,
		log:        log,
		t0:         time.Now(),
		slot:       min(10*time.Millisecond, cfg.Interval/20),
		mods:       make([]module, cfg.N),
		regHC:      newTransportClient(cfg.Connections, cfg.RequestTimeout),
		auth:       "Bearer " + cfg.APIKey,
		sweepFalse: map[string]fleetclient.Status{},
	}
	r.fc = fleetclient.New(cfg.BaseURL, cfg.APIKey, fleetclient.WithHTTPClient(r.regHC), fleetclient.WithUserAgent("mcpfleet-load/1"))
	r.readFC = fleetclient.New(cfg.BaseURL, cfg.ReadKey, fleetclient.WithHTTPClient(r.regHC), fleetclient.WithUserAgent("mcpfleet-load/1"))
	hb, err := newTarget(r.fc.BaseURL()+"/v1/mcp/servers/heartbeat", r.auth, cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	r.hb = hb
	return r, nil
}

// readRSSBefore reads the service's RSS before registration into s (a note if it cannot).
func (r *runner) readRSSBefore(s *Summary) {
	if r.cfg.ServicePID <= 0 {
		return
	}
	s.RSS.PID = r.cfg.ServicePID
	kib, err := ReadRSS(r.cfg.ServicePID)
	if err != nil {
		s.RSS.Error = err.Error()
		r.note("RSS not measured: %v", err)
	}
	s.RSS.BeforeKiB = kib
}

// indexRegistered maps the server_id of every registered module to its index.
func (r *runner) indexRegistered(registered int) {
	r.byID = make(map[string]int32, registered)
	for i := range r.mods {
		if r.mods[i].state.Load() == stateRegistered {
			r.byID[r.mods[i].id] = int32(i)
		}
	}
}

// conclude adds the run's notes to s and evaluates its targets. It returns why the run stopped early,
// or, with cfg.Strict, ErrTargetsMissed when a target was missed.
func (r *runner) conclude(ctx context.Context, s *Summary) error {
	if lag := s.Steady.ScheduleLagP99Ms; lag > float64(r.cfg.Interval.Milliseconds())/10 {
		r.note("steady heartbeats left up to %s late (p99): the %d heartbeat workers were all busy, waiting on slow answers "+
			"or starved of CPU; latency figures then understate what an unbounded fleet would see", ms(lag), r.cfg.Connections)
	}
	s.LoadAverage[1] = loadAverage()
	r.notesMu.Lock()
	s.Notes = append(s.Notes, r.notes...)
	r.notesMu.Unlock()
	s.evaluate()
	if ctx.Err() != nil {
		return fmt.Errorf("load run stopped early: %w", ctx.Err())
	}
	if r.cfg.Strict && !s.AllMet {
		return ErrTargetsMissed
	}
	return nil
}

// measureCeiling measures the no-op server's closed-loop rate into s.Ceiling and its cost at the
// steady rate into s.NoopSteady (a note if it cannot).
func (r *runner) measureCeiling(ctx context.Context, s *Summary) {
	r.logf("ceiling: no-op gin server in a child process, %d workers for %s", r.cfg.PeakWorkers, r.cfg.PeakDuration)
	if err := r.ceiling(ctx, s); err != nil {
		r.note("ceiling not measured: %v", err)
		return
	}
	r.logf("ceiling: %.0f requests/s, p99 %s; at the steady rate: %.0f requests/s, p99 %s", s.Ceiling.RatePerSecond, ms(s.Ceiling.P99Ms),
		s.NoopSteady.RatePerSecond, ms(s.NoopSteady.P99Ms))
}

// runSteady runs the steady phase for cfg.Duration, sweeping for non-healthy servers meanwhile, and
// records the CPU the load generator and the service spent in s.CPU.
func (r *runner) runSteady(ctx context.Context, s *Summary, steady *phase, registered int) {
	r.logf("steady: %d modules heartbeating every %s ±%s for %s (%.0f heartbeats/s expected)",
		registered, r.cfg.Interval, r.cfg.Jitter, r.cfg.Duration, float64(registered)/r.cfg.Interval.Seconds())
	r.setProgress(func() string { return r.phaseProgress(steady, r.cfg.Duration) })
	mark := r.startCPU(ctx)
	sctx, sdone := context.WithTimeout(ctx, r.cfg.Duration)
	swept := r.sweepLoop(sctx)
	profiled := r.profileService(ctx, r.cfg.Duration)
	<-sctx.Done()
	sdone()
	<-swept
	<-profiled
	r.setProgress(nil)
	s.CPU = r.stopCPU(ctx, mark, steady.elapsed(), "steady phase")
}

// finalSweep lists the fleet once more into s.Sweep, with what the sweeps of the steady phase found.
func (r *runner) finalSweep(ctx context.Context, s *Summary) {
	final, err := r.sweep(ctx)
	if err != nil {
		s.Sweep.Error = err.Error()
		r.note("final sweep failed: %v", err)
	} else {
		s.Sweep.Done = true
		s.Sweep.Degraded, s.Sweep.Unhealthy, s.Sweep.Foreign = final.degraded, final.unhealthy, final.foreign
		s.Sweep.LateModules = final.late
	}
	r.sweepMu.Lock()
	s.Sweep.OnTimeNonHealthy = len(r.sweepFalse)
	if r.sweepErr != nil && s.Sweep.Error == "" {
		s.Sweep.Error = r.sweepErr.Error()
	}
	r.sweepMu.Unlock()
}

// readRSSAfter reads the service's RSS after the steady phase into s.RSS.
func (r *runner) readRSSAfter(s *Summary, registered int) {
	kib, err := ReadRSS(r.cfg.ServicePID)
	if err != nil {
		s.RSS.Error = err.Error()
		r.note("RSS after the steady phase not read: %v", err)
	} else {
		s.RSS.AfterKiB = kib
		s.RSS.Measured = true
		s.RSS.PerServerKiB = float64(kib-s.RSS.BeforeKiB) / float64(registered)
	}
}

// runPeak runs the closed-loop peak over the registered modules into s.Peak.
func (r *runner) runPeak(ctx context.Context, s *Summary) {
	r.logf("peak: %d closed-loop workers for %s (steady heartbeats continue underneath)", r.cfg.PeakWorkers, r.cfg.PeakDuration)
	ph := newPhase("peak")
	r.cur.Store(ph)
	registered := make([]int32, 0, len(r.byID))
	for i := range r.mods {
		if r.mods[i].state.Load() == stateRegistered {
			registered = append(registered, int32(i))
		}
	}
	r.warmAndRun(ctx, ph, r.hb, len(registered), func(k int) (*module, []byte) {
		m := &r.mods[registered[k]]
		return m, m.body
	}, 0)
	s.Peak = summarizePhase(ph, 0)
	s.Plots = append(s.Plots, plotOf(ph))
	r.logf("peak: %.0f heartbeats/s, p99 %s, %d errors", s.Peak.RatePerSecond, ms(s.Peak.P99Ms), s.Peak.Errors.Total)
	if s.Ceiling.RatePerSecond > 0 {
		s.CeilingRatioPercent = 100 * s.Peak.RatePerSecond / s.Ceiling.RatePerSecond
		r.logf("peak is %.1f %% of the no-op ceiling", s.CeilingRatioPercent)
	}
}

// deregisterAll deregisters the registered modules into s.Deregistration; if ctx is already done, it
// still cleans up, within a minute.
func (r *runner) deregisterAll(ctx context.Context, s *Summary) {
	dctx := ctx
	if ctx.Err() != nil {
		// Interrupted or out of time: still clean up, within a minute, so
		// that the service is not left with a fleet going unhealthy.
		r.logf("stopping early: deregistering the registered modules (at most 1m)")
		var dcancel context.CancelFunc
		dctx, dcancel = context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer dcancel()
	}
	s.Deregistration = r.deregister(dctx, r.registeredIndexes())
	r.logf("deregistration: %d modules in %.1fs, %d errors",
		s.Deregistration.Deregistered, s.Deregistration.Seconds, s.Deregistration.Errors.Total)
}

func (r *runner) now() int64 { return int64(time.Since(r.t0)) }

func (r *runner) logf(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.log, "%s "+format+"\n", append([]any{time.Since(r.t0).Truncate(100 * time.Millisecond)}, args...)...)
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.notesMu.Lock()
	r.notes = append(r.notes, msg)
	r.notesMu.Unlock()
	r.logf("note: %s", msg)
}

// setProgress sets what the progress line shows; nil shows nothing.
func (r *runner) setProgress(f func() string) {
	if f == nil {
		r.progress.Store(nil)
		return
	}
	r.progress.Store(&f)
}

// startProgress prints the current progress line every cfg.Progress.
func (r *runner) startProgress(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.Progress)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if f := r.progress.Load(); f != nil {
				r.logf("%s", (*f)())
			}
		}
	}()
	return func() { cancel(); <-done }
}

// phaseProgress describes a running phase: rate since the last call would
// need state; the phase average is enough for a progress line.
func (r *runner) phaseProgress(ph *phase, total time.Duration) string {
	el := ph.elapsed()
	return fmt.Sprintf("[%s %s/%s] %.0f heartbeats/s, p99 %s, %d errors, %d non-healthy on time, schedule lag p99 %s",
		ph.name, el.Truncate(time.Second), total, float64(ph.ok.Load())/el.Seconds(),
		ph.lat.Quantile(0.99).Round(10*time.Microsecond), ph.errs.total(), ph.nonHealthyOnTime.Load(),
		ph.lag.Quantile(0.99).Round(100*time.Microsecond))
}

// startWheel runs the heartbeat schedule: one dispatcher goroutine owns the
// wheel and hands due beats to cfg.Connections workers. It stops when ctx
// ends; the returned channel closes when every goroutine has returned.
func (r *runner) startWheel(ctx context.Context, addCh <-chan int32) <-chan struct{} {
	period := int64(r.cfg.Interval / r.slot)
	w := NewWheel(r.cfg.N, period, int64(r.cfg.Jitter/r.slot), r.cfg.Seed)
	work := make(chan workItem, 4*r.cfg.Connections)
	r.work = work
	var wg sync.WaitGroup
	for range r.cfg.Connections {
		b := newBeater(r.hb)
		wg.Go(func() {
			defer b.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case it := <-work:
					m := &r.mods[it.idx]
					if m.state.Load() != stateRegistered {
						continue
					}
					ph := r.cur.Load()
					sent := r.now()
					lag := sent - it.due*int64(r.slot)
					r.lastLag.Store(lag)
					ph.lag.Record(time.Duration(lag))
					r.beatOnce(ctx, ph, b, m, m.body)
				}
			}
		})
	}
	wg.Go(func() {
		t := time.NewTicker(r.slot)
		defer t.Stop()
		last := int64(time.Since(r.t0) / r.slot)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := int64(time.Since(r.t0) / r.slot)
		drain:
			for range 1 << 20 {
				select {
				case i := <-addCh:
					w.Add(i, last)
				default:
					break drain
				}
			}
			for tick := last + 1; tick <= now; tick++ {
				w.Advance(tick, func(i int32) {
					select {
					case work <- workItem{idx: i, due: tick}:
					case <-ctx.Done():
					}
				})
				if ctx.Err() != nil {
					return
				}
			}
			last = now
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

var healthy = []byte(fleetclient.StatusHealthy)

// beatOnce sends one heartbeat and records it in ph. m may be nil (the
// ceiling's synthetic modules). A request cut short because ctx ended is not
// counted.
func (r *runner) beatOnce(ctx context.Context, ph *phase, b *beater, m *module, body []byte) {
	if r.paused.Load() {
		return
	}
	ph.inflight.Add(1)
	defer ph.inflight.Add(-1)
	sent := r.now()
	start := time.Now()
	status, answer, err := b.beat(ctx, body)
	lat := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return
	}
	ph.sent.Add(1)
	if err != nil || status != http.StatusOK {
		if status == http.StatusConflict && m != nil && m.state.Load() == stateDeregistered {
			return // raced with our own deregistration
		}
		ph.errs.add(errorKind(status, answer, err))
		return
	}
	st, ok := answerStatus(answer)
	if !ok {
		ph.errs.add("bad answer")
		return
	}
	ph.lat.Record(lat)
	ph.series.record(time.Duration(sent), lat)
	ph.ok.Add(1)
	if m == nil {
		return
	}
	prev := m.ok.add(okMark{sent: sent, answered: r.now()})
	if !bytes.Equal(st, healthy) {
		if prev > 0 && sent-prev < int64(2*r.cfg.Interval) {
			ph.nonHealthyOnTime.Add(1)
		} else {
			ph.nonHealthyLate.Add(1)
		}
	}
}

// settle waits, at most 6H, until no beat is queued and the latest beat
// left less than H/20 (at least 50 ms) after its due time. It reports
// whether that happened and how long it waited. (With 2H, a 250,000 run's
// steady phase started 15 s behind its schedule, and its latency was the
// generator's own backlog.)
func (r *runner) settle(ctx context.Context) (bool, time.Duration) {
	start := time.Now()
	limit := 6 * r.cfg.Interval
	threshold := int64(max(r.cfg.Interval/20, 50*time.Millisecond))
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for time.Since(start) < limit {
		if len(r.work) == 0 && r.lastLag.Load() < threshold {
			return true, time.Since(start)
		}
		select {
		case <-ctx.Done():
			return false, time.Since(start)
		case <-t.C:
		}
	}
	return false, time.Since(start)
}

// warmAndRun runs the closed loop for a short warm-up (a fifth of
// cfg.PeakDuration, at most 1 s) whose figures are dropped — connections
// open, heaps and pools grow — then for cfg.PeakDuration into ph. If pid is
// not 0, it returns the CPU process pid spent in that second part (ok false
// if it could not be read).
func (r *runner) warmAndRun(ctx context.Context, ph *phase, t *target, n int, pick func(k int) (*module, []byte), pid int) (cpu time.Duration, ok bool) {
	warm := newPhase(ph.name + " warm-up")
	if r.cur.Load() == ph {
		r.cur.Store(warm)
	}
	r.closedLoop(ctx, warm, t, n, min(r.cfg.PeakDuration/5, time.Second), pick)
	if r.cur.Load() == warm {
		r.cur.Store(ph)
	}
	var c0 time.Duration
	err := errors.New("no pid")
	if pid != 0 {
		c0, err = ReadCPUTime(pid)
	}
	r.closedLoop(ctx, ph, t, n, r.cfg.PeakDuration, pick)
	if err != nil {
		return 0, false
	}
	c1, err := ReadCPUTime(pid)
	return c1 - c0, err == nil
}

// closedLoop runs cfg.PeakWorkers workers that each heartbeat as fast as
// they can for d, over n modules picked round-robin by pick.
func (r *runner) closedLoop(ctx context.Context, ph *phase, t *target, n int, d time.Duration, pick func(k int) (*module, []byte)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ph.restart()
	var wg sync.WaitGroup
	// A bound on requests per worker well above what one can send in time.
	maxPerWorker := int(min(d.Seconds()*200_000, math.MaxInt32))
	workers := r.cfg.PeakWorkers
	r.setProgress(func() string { return r.phaseProgress(ph, d) })
	for w := range workers {
		b := newBeater(t)
		wg.Go(func() {
			defer b.Close()
			k := w
			for range maxPerWorker {
				if ctx.Err() != nil {
					return
				}
				m, body := pick(k % n)
				r.beatOnce(ctx, ph, b, m, body)
				k += workers
			}
		})
	}
	wg.Wait()
	ph.finish()
	r.setProgress(nil)
}

// ceiling measures the closed loop against a no-op gin server run as a child process, and the CPU that
// process spent on it (after the warm-up), into s.Ceiling; then the same server at the steady rate (N/H,
// paced, through cfg.Connections connections, for cfg.Duration but at most noopSteadyMax) and its CPU on
// that into s.NoopSteady: the same load as the steady phase, the divisor of the CPU target.
func (r *runner) ceiling(ctx context.Context, s *Summary) error {
	addr, pid, stop, err := startChild(ctx, "no-op server", r.cfg.SelfExe, []string{NoopCommand, "--addr", "127.0.0.1:0", "--max-lifetime", "30m"}, r.log)
	if err != nil {
		return err
	}
	defer stop()
	n := min(r.cfg.N, 10_000)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"server_id":"00000000-0000-4000-8000-%012d"}`, i)
	}
	t, err := newTarget("http://"+addr+"/v1/mcp/servers/heartbeat", r.auth, r.cfg.RequestTimeout)
	if err != nil {
		return err
	}
	pick := func(k int) (*module, []byte) { return nil, bodies[k] }
	ph := newPhase("ceiling")
	r.closedLoop(ctx, newPhase("ceiling warm-up"), t, n, min(r.cfg.PeakDuration/5, time.Second), pick)
	c0, err0 := ReadCPUTime(pid)
	r.closedLoop(ctx, ph, t, n, r.cfg.PeakDuration, pick)
	c1, err1 := ReadCPUTime(pid)
	if ph.ok.Load() == 0 {
		return fmt.Errorf("no request to the no-op server succeeded (%v)", ph.errs.snapshot())
	}
	s.Ceiling = summarizePhase(ph, 0)
	s.CeilingCPU = CeilingCPU{Measured: err0 == nil && err1 == nil, Seconds: (c1 - c0).Seconds()}

	rate := float64(r.cfg.N) / r.cfg.Interval.Seconds()
	r.openLoop(ctx, newPhase("no-op steady warm-up"), t, n, rate, time.Second, pick)
	steady := newPhase("no-op steady")
	c0, err0 = ReadCPUTime(pid)
	r.openLoop(ctx, steady, t, n, rate, min(r.cfg.Duration, noopSteadyMax), pick)
	c1, err1 = ReadCPUTime(pid)
	s.NoopSteady = summarizePhase(steady, rate)
	s.NoopSteadyCPU = CeilingCPU{Measured: err0 == nil && err1 == nil, Seconds: (c1 - c0).Seconds()}
	return nil
}

// noopSteadyMax bounds the no-op server's run at the steady rate: 20 s at 10,000 requests/s is 200,000
// requests, enough CPU (seconds of it) for /proc's 10 ms resolution to be far below a percent.
const noopSteadyMax = 20 * time.Second

// openLoop sends rate requests per second for d, paced evenly (a request falls due every 1/rate, as the
// steady phase's wheel spreads N modules over H), through cfg.Connections workers, over n modules
// picked round-robin by pick. A request due while every worker is busy waits for one (the no-op server
// keeps up at any steady rate the service is driven at).
func (r *runner) openLoop(ctx context.Context, ph *phase, t *target, n int, rate float64, d time.Duration, pick func(k int) (*module, []byte)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ph.restart()
	r.setProgress(func() string { return r.phaseProgress(ph, d) })
	defer r.setProgress(nil)
	due := make(chan int, r.cfg.Connections)
	var wg sync.WaitGroup
	for range r.cfg.Connections {
		b := newBeater(t)
		wg.Go(func() {
			defer b.Close()
			for k := range due {
				m, body := pick(k)
				r.beatOnce(ctx, ph, b, m, body)
			}
		})
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
pace:
	for {
		select {
		case <-ctx.Done():
			break pace
		case now := <-tick.C:
			for want := int(rate * now.Sub(start).Seconds()); sent < want; sent++ {
				select {
				case due <- sent % n:
				case <-ctx.Done():
					break pace
				}
			}
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	ph.finish()
}

func ms(v float64) string { return fmt.Sprintf("%.2fms", v) }

func summarizeConfig(cfg Config) RunConfig {
	return RunConfig{
		BaseURL:              cfg.BaseURL,
		N:                    cfg.N,
		IntervalSeconds:      cfg.Interval.Seconds(),
		JitterSeconds:        cfg.Jitter.Seconds(),
		RampPerSecond:        cfg.Ramp,
		SteadySeconds:        cfg.Duration.Seconds(),
		Connections:          cfg.Connections,
		PeakWorkers:          cfg.PeakWorkers,
		PeakSeconds:          cfg.PeakDuration.Seconds(),
		ServicePID:           cfg.ServicePID,
		GoVersion:            runtime.Version(),
		GOMAXPROCS:           runtime.GOMAXPROCS(0),
		NumCPU:               runtime.NumCPU(),
		LoadGeneratorPID:     os.Getpid(),
		CeilingMeasured:      cfg.Ceiling && cfg.PeakDuration > 0,
		DeregisteredAtTheEnd: cfg.Deregister,
	}
}

// runReference starts the reference server on cfg.ReferenceDatabaseURL as a child process and drives it
// with the same configuration (no ceiling) and the fleet the service held (held modules, if fewer than
// cfg.N registered), counting its CPU and that of its database's backends. It returns the reference
// run's summary (partial if the run stopped early), or nil with a note if the reference could not start.
func (r *runner) runReference(ctx context.Context, held int) *Summary {
	pc, err := pgx.ParseConfig(r.cfg.ReferenceDatabaseURL)
	if err != nil {
		r.note("reference not run: --reference-database-url: %v", err)
		return nil
	}
	pool := r.cfg.ReferencePool
	if pool == 0 {
		pool = 32
	}
	addr, pid, stop, err := startChild(ctx, "reference server", r.cfg.SelfExe, []string{ReferenceCommand, "--addr", "127.0.0.1:0",
		"--database-url", r.cfg.ReferenceDatabaseURL, "--pool", strconv.Itoa(pool), "--interval", r.cfg.Interval.String()}, r.log)
	if err != nil {
		r.note("reference not run: %v", err)
		return nil
	}
	defer stop()
	rc := referenceConfig(r.cfg, "http://"+addr, pid, pc.Database)
	if held < rc.N {
		r.note("the service held %d of the %d modules: the reference is driven with %d, the same load", held, rc.N, held)
		rc.N = held
	}
	if rc.PGURL == "" {
		rc.PGURL = r.cfg.ReferenceDatabaseURL // its own backend is left out of the count
	}
	r.logf("reference: the seed's design taken literally (gin + pgx pool of %d, one UPDATE per heartbeat, a scan every %s), pid %d on %s, database %s",
		pool, r.cfg.Interval/2, pid, addr, pc.Database)
	rs, err := Run(ctx, rc, prefixWriter{"reference: ", r.log})
	if err != nil {
		r.note("reference run: %v", err)
	}
	return rs
}

// referenceConfig is the configuration of the run against the reference server at baseURL (process pid,
// database db): the run's load, without what only the service has or what the first run already did —
// no ceiling, no second reference, no report, no restarts (they would stop the reference and start the
// service's command in its place), no profiles of the service.
func referenceConfig(cfg Config, baseURL string, pid int, db string) Config {
	rc := cfg
	rc.BaseURL, rc.ServicePID, rc.ServiceDatabase = baseURL, pid, db
	rc.Ceiling, rc.ReferenceDatabaseURL, rc.ReportPath, rc.Strict, rc.CPUProfile = false, "", "", false, ""
	rc.ServiceCommand, rc.ServicePprof, rc.ServiceCPUProfile = "", "", ""
	rc.HoldSearch = false // the comparison is at N; the step-down is mcpfleet's figure
	return rc
}

// prefixWriter writes prefix before each Write to w: the reference run's progress lines (one Write
// each) are marked as its own.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
