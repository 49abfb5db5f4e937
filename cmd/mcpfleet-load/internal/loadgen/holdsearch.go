package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The step-down search for the largest fleet held (issue 14: "250,000, or the largest N it holds, with
// what breaks next"). When the steady phase did not hold the whole fleet, the run takes an evenly
// spread tenth of the registered fleet out at a time (deregistering it: the wheel stops beating those modules, and
// the rest keep their phases, so the load stays even over H) and runs the steady schedule for a window
// at each size, until one size is held or the next step would leave less than a step. It runs last, after the restarts,
// so that every other figure is the whole fleet's; and first it vacuums the service's database (vacuumForHold), as
// autovacuum would have after the restarts' heartbeats.

// HoldStep is one fleet size of the step-down search.
type HoldStep struct {
	Servers      int `json:"servers"`      // heartbeating during the window (a failed deregistration: registered, silent)
	Deregistered int `json:"deregistered"` // taken out before it
	// DeregisterErrors are the deregistrations of the modules taken out before it that failed: those
	// modules stop heartbeating all the same and stay registered in the service, silent.
	DeregisterErrors ErrorSummary `json:"deregister_errors"`
	Window           PhaseSummary `json:"window"`
	// FalseSwept is the on-time modules a sweep at the window's end saw non-healthy.
	FalseSwept int        `json:"false_swept"`
	CPU        CPUSummary `json:"cpu"`
	Held       bool       `json:"held"`
}

// HoldSearch is the step-down search's outcome: Ran is false when the steady phase held the fleet
// (or the search is off), Largest the largest size held (0: none down to the last step).
type HoldSearch struct {
	Ran           bool       `json:"ran"`
	LimitP99Ms    float64    `json:"p99_limit_ms,omitempty"`   // the p99 a size had to stay under (Config.HoldP99)
	WindowSeconds float64    `json:"window_seconds,omitempty"` // how long each size ran (holdWindow)
	Steps         []HoldStep `json:"steps,omitempty"`
	Largest       int        `json:"largest_held,omitempty"`
	// The VACUUM (ANALYZE) of the service's database before the first step (vacuumForHold): how long it
	// took, or why it failed, and the server's autovacuum setting; all empty when it was not attempted
	// (no --pg-url and --service-database).
	VacuumSeconds float64 `json:"vacuum_seconds,omitempty"`
	VacuumError   string  `json:"vacuum_error,omitempty"`
	Autovacuum    string  `json:"autovacuum,omitempty"`
	// Before the first step, the search waits (recoverForHold) for this run's heartbeating modules to be
	// healthy again: RecoverySeconds is how long it waited, NonHealthyLeft how many were still degraded
	// or unhealthy when it stopped (the wait's limit reached), RecoveryError why a sweep failed.
	RecoverySeconds float64 `json:"recovery_seconds"`
	NonHealthyLeft  int     `json:"non_healthy_left"`
	RecoveryError   string  `json:"recovery_error,omitempty"`
}

// windowHeld is the rule a window of the steady schedule is held by: at least heldShare of the expected
// rate answered, p99 under limitMs (the fleet-size target's: TargetP99), no error, no false transition
// (answered or swept).
func windowHeld(w PhaseSummary, falseSwept int, limitMs float64) bool {
	return w.ExpectedRatePerSecond > 0 && w.RatePerSecond >= heldShare*w.ExpectedRatePerSecond &&
		w.P99Ms < limitMs && w.Errors.Total == 0 && w.NonHealthyOnTime == 0 && falseSwept == 0
}

// holdStep is how many servers a step takes out of a fleet of n: a tenth, in whole thousands from
// 10,000 on, at least one.
func holdStep(n int) int {
	step := n / 10
	if n >= 10_000 {
		step = step / 1000 * 1000
	}
	return max(step, 1)
}

// stepsOn says whether the step-down takes step more out of registered servers: while at least a step
// would be left, so a search that starts from the fleet registered (a tenth of it a step) goes down to
// a tenth of it. (A floor at half the fleet ended a 250,000 run at 125,000, p99 61 ms, with no size
// held: the search is for the largest fleet held, however far down that is.)
func stepsOn(registered, step int) bool { return registered-step >= step }

// evenlySpread returns k of items (k ≤ len(items)) spread evenly over them, so that taking them out of
// the wheel leaves every stretch of H with the same share of beats.
func evenlySpread(items []int32, k int) []int32 {
	n := len(items)
	k = min(k, n)
	out := make([]int32, 0, k)
	for j := range n {
		if (j+1)*k/n > j*k/n {
			out = append(out, items[j])
		}
	}
	return out
}

// holdWindow is how long each step runs the steady schedule: the steady phase's length, at most 30 s.
func (r *runner) holdWindow() time.Duration { return min(r.cfg.Duration, 30*time.Second) }

// searchHeld runs the step-down search into s.Hold, if the steady phase did not hold the fleet.
func (r *runner) searchHeld(ctx context.Context, s *Summary) {
	limit := msOf(r.cfg.HoldP99)
	if !r.cfg.HoldSearch || r.cfg.Duration <= 0 || windowHeld(s.Steady, s.Sweep.OnTimeNonHealthy, limit) {
		return
	}
	window := r.holdWindow()
	s.Hold.Ran, s.Hold.LimitP99Ms, s.Hold.WindowSeconds = true, limit, window.Seconds()
	from := len(r.registeredIndexes())
	step := holdStep(from)
	r.logf("hold search: the steady phase did not hold %d servers; taking %d out at a time, %s at each size",
		from, step, window)
	r.vacuumForHold(ctx, &s.Hold)
	r.recoverForHold(ctx, &s.Hold)
	idle := newPhase("hold search") // beats between the windows count nowhere
	r.cur.Store(idle)
	for ctx.Err() == nil {
		reg := r.registeredIndexes()
		if !stepsOn(len(reg), step) {
			break
		}
		out := evenlySpread(reg, step)
		d := r.deregister(ctx, out)
		st := HoldStep{Servers: len(reg) - len(out), Deregistered: d.Deregistered, DeregisterErrors: d.Errors}
		r.settle(ctx)
		ph := newPhase(fmt.Sprintf("hold %d", st.Servers))
		r.cur.Store(ph)
		mark := r.startCPU(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(window):
		}
		r.closeWindow(ph, idle)
		st.CPU = r.stopCPU(ctx, mark, ph.elapsed(), ph.name)
		st.Window = summarizePhase(ph, float64(st.Servers)/r.cfg.Interval.Seconds())
		st.FalseSwept = r.sweepFalseDelta(ctx)
		st.Held = ctx.Err() == nil && windowHeld(st.Window, st.FalseSwept, limit)
		s.Hold.Steps = append(s.Hold.Steps, st)
		r.logf("hold search: %d servers: %.0f of %.0f heartbeats/s, p99 %s, %d errors, %d false; held: %v", st.Servers,
			st.Window.RatePerSecond, st.Window.ExpectedRatePerSecond, ms(st.Window.P99Ms), st.Window.Errors.Total,
			st.Window.NonHealthyOnTime+uint64(st.FalseSwept), st.Held)
		if st.Held {
			s.Hold.Largest = st.Servers
			return
		}
	}
}

// vacuumForHold runs VACUUM (ANALYZE) on the service's database (Config.ServiceDatabase, through
// Config.PGURL's server and role) into h, if both are set. The restarts before the step-down make the
// whole fleet heartbeat again and again (fourteen services' worth of stamps), and every stamp leaves a
// dead row version in mcp_servers; a PostgreSQL that runs autovacuum clears them as they pile up, one
// that does not (this project's machines: autovacuum = off) carries them into every window of the
// step-down, whose stamps then cost more at each size for reasons that have nothing to do with the
// size. Vacuuming once here stands in for the autovacuum an operator runs; the report says it did.
func (r *runner) vacuumForHold(ctx context.Context, h *HoldSearch) {
	if r.cfg.PGURL == "" || r.cfg.ServiceDatabase == "" {
		return
	}
	fail := func(err error) {
		h.VacuumError = err.Error()
		r.note("hold search: the service's database was not vacuumed before the step-down: %v", err)
	}
	pc, err := pgx.ParseConfig(r.cfg.PGURL)
	if err != nil {
		fail(err)
		return
	}
	pc.Database = r.cfg.ServiceDatabase
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		fail(err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, "SHOW autovacuum").Scan(&h.Autovacuum); err != nil {
		fail(err)
		return
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM (ANALYZE)"); err != nil {
		fail(err)
		return
	}
	took := time.Since(start)
	h.VacuumSeconds = took.Seconds()
	r.logf("hold search: vacuumed and analyzed %s in %s (the server's autovacuum: %s)", r.cfg.ServiceDatabase,
		took.Round(time.Millisecond), h.Autovacuum)
}

// recoverLimit is how long recoverForHold waits, in heartbeat intervals: every heartbeating module
// sends six heartbeats in it, and one accepted heartbeat recovers a server.
const recoverLimit = 6

// recoverForHold waits, sweeping every H/2, until none of this run's heartbeating modules is degraded or
// unhealthy, at most recoverLimit H, and records the wait in h. The restarts before the step-down end
// with closed loops that can put the load generator's own schedule seconds behind, so that modules miss
// heartbeats and the service rightly judges them; a first step that starts while they recover measures
// the writer's backlog of transitions and recoveries (which once refused a step's deregistrations by
// the ten thousand), not the fleet size. A sweep that fails (a list timing out on a busy service) is
// tried again; if the last one failed, h.RecoveryError says why and NonHealthyLeft is the last count.
func (r *runner) recoverForHold(ctx context.Context, h *HoldSearch) {
	start := time.Now()
	every := max(r.cfg.Interval/2, 100*time.Millisecond)
	for ctx.Err() == nil {
		res, err := r.sweep(ctx)
		h.RecoveryError = ""
		if err != nil {
			h.RecoveryError = err.Error()
		} else if h.NonHealthyLeft = res.degraded + res.unhealthy; h.NonHealthyLeft == 0 {
			break
		}
		if time.Since(start) >= recoverLimit*r.cfg.Interval {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
	h.RecoverySeconds = time.Since(start).Seconds()
	if h.RecoveryError != "" {
		r.note("hold search: waiting for the fleet to recover: %s", h.RecoveryError)
	}
	r.logf("hold search: waited %s for the fleet to recover: %d heartbeating modules still degraded or unhealthy",
		time.Since(start).Round(time.Millisecond), h.NonHealthyLeft)
}

// sweepFalseDelta sweeps once and returns how many on-time modules it newly found non-healthy.
func (r *runner) sweepFalseDelta(ctx context.Context) int {
	r.sweepMu.Lock()
	before := len(r.sweepFalse)
	r.sweepMu.Unlock()
	if _, err := r.sweep(ctx); err != nil {
		r.note("hold search: sweep: %v", err)
	}
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	return len(r.sweepFalse) - before
}
