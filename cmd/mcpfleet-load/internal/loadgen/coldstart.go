package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// The cold-start step (Config.ColdStartRuns) measures serve → ready with a fleet of its own size in
// PostgreSQL, whatever the load run's size: the load run's own restarts can only measure the fleet it
// registered, which at 250,000 on this machine stops at the knee (the service refuses registrations
// past it), so the target "≤ 2 s at 250,000" was judged at ~238,000. The step registers cfg.N modules
// through the API exactly as the registration phase does, on a fresh database and at a heartbeat
// interval long enough that no module has to heartbeat (bench/run.sh: 10 min), then restarts the
// service ColdStartRuns times with tracing off. Its summary (JSON) is handed to the load run
// (Config.ColdStartFile), whose report shows it and judges the cold-start target by it.

// ColdStartStep is the cold-start step's summary.
type ColdStartStep struct {
	// Servers is how many modules the step registered: the servers in PostgreSQL at each restart.
	Servers int `json:"servers"`
	// Runs is how many restarts the step was to make (ReadySeconds has fewer if it stopped early).
	Runs                int     `json:"runs"`
	IntervalSeconds     float64 `json:"interval_seconds"`
	RegistrationSeconds float64 `json:"registration_seconds"`
	// ReadySeconds is each restart's time from starting the process to its first /readyz 200, in order;
	// RSSAtReadyKiB the service's RSS at that moment (0: not read).
	ReadySeconds  []float64 `json:"ready_seconds"`
	RSSAtReadyKiB []int64   `json:"rss_at_ready_kib"`
	// Error is what stopped the step early (its figures are what it measured before).
	Error string `json:"error,omitempty"`
}

// Slowest is the slowest restart's time to ready, in seconds: the figure the target is judged by (a
// restart or failover is as slow as it happens to be, not as its median). ok is false when no restart
// was measured.
func (c ColdStartStep) Slowest() (seconds float64, ok bool) {
	if len(c.ReadySeconds) == 0 {
		return 0, false
	}
	return slices.Max(c.ReadySeconds), true
}

// coldStartSettle is how long the step lets a restarted service run before it stops it again: what it
// does right after ready (the owners' read, the first collections) is done, as in a real restart.
const coldStartSettle = 5 * time.Second

// RunColdStart is the cold-start step: it registers cfg.N modules, sends no heartbeat, then stops the
// service (Config.ServicePID) and starts Config.ServiceCommand serve cfg.ColdStartRuns times, tracing
// off, each time measuring the time to /readyz 200 and the RSS at ready, and stops the last one. The
// summary holds what was measured even when an error stopped the step.
func RunColdStart(ctx context.Context, cfg Config, log io.Writer) (*ColdStartStep, error) {
	if cfg.ColdStartRuns < 1 {
		return nil, errors.New("the cold-start step needs --cold-start-runs")
	}
	r, ctx, end, err := begin(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer end()
	r.cur.Store(newPhase("cold start")) // the registration's heartbeat window: none is sent
	step := &ColdStartStep{Runs: cfg.ColdStartRuns, IntervalSeconds: cfg.Interval.Seconds()}

	addCh := make(chan int32, cfg.Connections)
	drained := make(chan struct{})
	go func() { // no wheel: registered modules are not heartbeated
		for range addCh {
		}
		close(drained)
	}()
	reg := r.register(ctx, addCh)
	close(addCh)
	<-drained
	step.Servers, step.RegistrationSeconds = reg.summary.Registered, reg.summary.Seconds
	r.logf("cold start: %d of %d modules registered in %s, %d errors", reg.summary.Registered, cfg.N,
		reg.ph.elapsed().Round(time.Millisecond), reg.summary.Errors.Total)
	if reg.summary.Registered == 0 {
		step.Error = fmt.Sprintf("no module registered (%v)", reg.summary.Errors.ByKind)
		return step, errors.New("cold start: " + step.Error)
	}
	defer func() {
		if r.child != nil {
			_ = r.stopService()
		}
	}()
	for i := range cfg.ColdStartRuns {
		ready, err := r.restartService(ctx, nil, fmt.Sprintf("%s-%d.log", cfg.ServiceLog, i))
		if err != nil {
			step.Error = fmt.Sprintf("restart %d: %v", i+1, err)
			return step, errors.New("cold start: " + step.Error)
		}
		kib, _ := ReadRSS(r.child.Process.Pid)
		step.ReadySeconds = append(step.ReadySeconds, ready.Seconds())
		step.RSSAtReadyKiB = append(step.RSSAtReadyKiB, kib)
		r.logf("cold start: restart %d of %d ready in %s with %d servers in PostgreSQL, RSS %d KiB", i+1, cfg.ColdStartRuns,
			ready.Round(time.Millisecond), step.Servers, kib)
		select {
		case <-ctx.Done():
			step.Error = ctx.Err().Error()
			return step, fmt.Errorf("cold start: %w", ctx.Err())
		case <-time.After(coldStartSettle):
		}
	}
	return step, nil
}

// ReadColdStartStep reads a cold-start step's JSON summary (what RunColdStart printed with --json).
func ReadColdStartStep(path string) (*ColdStartStep, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--cold-start-file: %w", err)
	}
	var step ColdStartStep
	if err := json.Unmarshal(b, &step); err != nil {
		return nil, fmt.Errorf("--cold-start-file %s: not a cold-start summary: %w", path, err)
	}
	if step.Servers <= 0 && step.Error == "" {
		return nil, fmt.Errorf("--cold-start-file %s: no servers and no error: not a cold-start summary", path)
	}
	return &step, nil
}

// coldStartText is the cold-start target's measured cell and whether it is met, from the step if it
// measured a restart, else from the run's own first restart (ColdStartSummary).
func (s *Summary) coldStartText() (measured string, ok, met bool) {
	own := ""
	if s.ColdStart.Measured {
		own = fmt.Sprintf("%.2f s at %s servers", s.ColdStart.Seconds, thousands(int64(s.ColdStart.Servers)))
	}
	if step := s.ColdStartStep; step != nil {
		if slowest, measured := step.Slowest(); measured {
			runs := make([]string, len(step.ReadySeconds))
			for i, v := range step.ReadySeconds {
				runs[i] = fmt.Sprintf("%.2f", v)
			}
			text := fmt.Sprintf("%.2f s at %s servers (the slowest of %d restarts: %s s)", slowest,
				thousands(int64(step.Servers)), len(runs), strings.Join(runs, ", "))
			if own != "" {
				text += "; this run's fleet: " + own
			}
			return text, true, step.Servers >= TargetServers && slowest <= TargetColdStart.Seconds()
		}
		if own == "" {
			return "— (cold-start step: " + step.Error + ")", false, false
		}
		own += " (cold-start step: " + step.Error + ")"
	}
	switch {
	case own != "":
		return own, true, s.ColdStart.Servers >= TargetServers && s.ColdStart.Seconds <= TargetColdStart.Seconds()
	case s.ColdStart.Error != "":
		return "— (" + s.ColdStart.Error + ")", false, false
	}
	return "— (this run does not restart the service: --service-command)", false, false
}
