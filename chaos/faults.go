package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"
)

// phase is one step of the schedule: it injects its faults under the running load and returns when
// they have been undone and the fleet has had time to settle.
type phase struct {
	name string
	run  func(ctx context.Context) error
}

// phases returns one round of the schedule.
func (r *runner) phases(round int) []phase {
	H, M := r.cfg.Heartbeat, r.cfg.Monitor
	decline := 3*H + M + 2*time.Second // long enough for a silent server to be declared unhealthy
	all := []phase{
		{"server-actors", func(ctx context.Context) error {
			n := 30
			if r.cfg.Schedule == "short" {
				n = 12
			}
			modes := []string{"panic", "stop", "poison"}
			for i := range n {
				for _, m := range r.fleet.pick(1) {
					r.crashServer(ctx, m, modes[i%3])
				}
				sleep(ctx, 200*time.Millisecond)
			}
			sleep(ctx, r.settle())
			return nil
		}},
		{"server-actors-declining", func(ctx context.Context) error {
			// Kill the actors of silent servers at every step of their decline: the deadline must survive.
			mods := r.silence(ctx, 0.10, FaultDrop10)
			modes := []string{"panic", "stop", "poison"}
			var wg sync.WaitGroup
			for i, m := range mods {
				at := time.Duration(rand.Int64N(int64(3*H + M)))
				wg.Go(func() {
					sleep(ctx, at)
					r.crashServer(ctx, m, modes[i%3])
				})
			}
			wg.Wait()
			sleep(ctx, decline-3*H-M)
			r.release(mods, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
		{"writer", func(ctx context.Context) error {
			// Panic the writer while degraded and unhealthy transitions are being committed.
			mods := r.silence(ctx, 0.10, FaultDrop10)
			t0 := time.Now()
			for _, at := range []time.Duration{2*H - 100*time.Millisecond, 2*H + 300*time.Millisecond, 3*H + 100*time.Millisecond, 3*H + M} {
				sleep(ctx, time.Until(t0.Add(at)))
				r.crashSystem(ctx, "writer")
			}
			sleep(ctx, time.Until(t0.Add(decline)))
			r.release(mods, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
		{"stamper", func(ctx context.Context) error {
			r.crashSystem(ctx, "stamper")
			sleep(ctx, time.Second)
			r.crashSystem(ctx, "stamper")
			sleep(ctx, r.settle())
			return nil
		}},
		{"alerts", func(ctx context.Context) error {
			// Panic the alert actor while unhealthy alerts are going out, with a webhook that fails now and then.
			start := time.Now()
			r.hook.flaky.Store(true)
			mods := r.silence(ctx, 0.10, FaultDrop10)
			t0 := time.Now()
			for _, at := range []time.Duration{3*H + 200*time.Millisecond, 3*H + 500*time.Millisecond, 3*H + 1500*time.Millisecond} {
				sleep(ctx, time.Until(t0.Add(at)))
				r.crashSystem(ctx, "alerts")
			}
			sleep(ctx, time.Until(t0.Add(decline)))
			r.release(mods, FaultDrop10)
			sleep(ctx, 2*time.Second)
			r.hook.flaky.Store(false)
			r.rec.fault(Fault{Kind: FaultWebhookFlaky, Start: start, End: time.Now()})
			sleep(ctx, r.settle())
			return nil
		}},
		{"drop-10", func(ctx context.Context) error { return r.dropPhase(ctx, 0.10, FaultDrop10, decline, 0) }},
		{"drop-60", func(ctx context.Context) error { return r.dropPhase(ctx, 0.60, FaultDrop60, decline, 5) }},
		{"drop-100", func(ctx context.Context) error { return r.dropPhase(ctx, 1.00, FaultDrop100, decline, 0) }},
		{"kill9", func(ctx context.Context) error {
			if err := r.kill9(ctx); err != nil {
				return err
			}
			sleep(ctx, r.settle())
			return nil
		}},
		{"kill9-declining", func(ctx context.Context) error {
			// Kill the process while servers are on their way to unhealthy: restart grace restarts their
			// clock, and they still end up unhealthy.
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			if err := r.kill9(ctx); err != nil {
				return err
			}
			sleep(ctx, decline)
			r.release(mods, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
		{"db-stop", func(ctx context.Context) error {
			// PostgreSQL away for DBOutage. A tenth of the fleet goes silent during the outage and comes
			// back before it ends; another tenth goes silent just before the database returns and stays
			// silent: it must still be declared unhealthy once the database is back.
			stopAt := time.Now()
			if err := r.db.cluster.Stop(ctx); err != nil {
				return err
			}
			r.logf("PostgreSQL stopped for %s", r.cfg.DBOutage)
			back := stopAt.Add(r.cfg.DBOutage)
			sleep(ctx, min(5*time.Second, r.cfg.DBOutage/4))
			a := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, min(decline, time.Until(back.Add(-3*time.Second))))
			r.release(a, FaultDrop10)
			sleep(ctx, time.Until(back.Add(-2*time.Second)))
			b := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, time.Until(back))
			err := r.db.cluster.Start(ctx)
			r.rec.fault(Fault{Kind: FaultDBStop, Start: stopAt, End: time.Now(), Detail: r.cfg.DBOutage.String()})
			if err != nil {
				return err
			}
			r.logf("PostgreSQL is back")
			sleep(ctx, decline+3*time.Second)
			r.release(b, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
		{"db-restart", func(ctx context.Context) error {
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			start := time.Now()
			err := r.db.cluster.Restart(ctx)
			r.rec.fault(Fault{Kind: FaultDBRestart, Start: start, End: time.Now()})
			if err != nil {
				return err
			}
			sleep(ctx, decline)
			r.release(mods, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
		{"sigstop", func(ctx context.Context) error {
			// Stop the whole process for longer than 3H while a tenth of the fleet is silent: the
			// heartbeating majority must not be declared unhealthy for the process's own pause.
			mods := r.silence(ctx, 0.10, FaultDrop10)
			sleep(ctx, 3*H/2)
			if err := r.sigstop(ctx, 3*H+2*time.Second); err != nil {
				return err
			}
			sleep(ctx, decline)
			r.release(mods, FaultDrop10)
			sleep(ctx, r.settle())
			return nil
		}},
	}
	if r.cfg.Schedule == "full" {
		return all
	}
	keep := map[string]bool{"server-actors": true, "writer": true, "alerts": true, "drop-60": true,
		"kill9-declining": true, "db-stop": true, "db-restart": true, "sigstop": true}
	var out []phase
	for _, p := range all {
		if keep[p.name] {
			out = append(out, p)
		}
	}
	return out
}

// dropPhase silences frac of the modules for d (killing `crashes` of their actors meanwhile), then lets
// them heartbeat again.
func (r *runner) dropPhase(ctx context.Context, frac float64, kind string, d time.Duration, crashes int) error {
	mods := r.silence(ctx, frac, kind)
	t0 := time.Now()
	if crashes > 0 {
		modes := []string{"panic", "stop", "poison"}
		perm := rand.Perm(len(mods))
		for i := range min(crashes, len(mods)) {
			sleep(ctx, d/time.Duration(crashes+1))
			r.crashServer(ctx, mods[perm[i]], modes[i%3])
		}
	}
	sleep(ctx, time.Until(t0.Add(d)))
	r.release(mods, kind)
	sleep(ctx, r.settle())
	return nil
}

// silence stops the heartbeats of frac of the steady modules (at least one) and records the fault.
func (r *runner) silence(_ context.Context, frac float64, kind string) []*module {
	n := max(1, int(frac*float64(r.fleet.steady())+0.5))
	mods := r.fleet.pick(n)
	now := time.Now()
	for _, m := range mods {
		m.silent.Store(true)
		r.rec.silence(m.idx, true, SilenceDrop, now)
	}
	r.rec.fault(Fault{Kind: kind, Start: now, Target: fmt.Sprintf("%d modules", len(mods))})
	return mods
}

// release lets silenced modules heartbeat again and closes the fault's window.
func (r *runner) release(mods []*module, kind string) {
	now := time.Now()
	for _, m := range mods {
		m.silent.Store(false)
		r.rec.silence(m.idx, false, SilenceDrop, now)
	}
	r.rec.mu.Lock()
	for i := len(r.rec.h.Faults) - 1; i >= 0; i-- {
		if f := &r.rec.h.Faults[i]; f.Kind == kind && f.End.IsZero() {
			f.End = now
			break
		}
	}
	r.rec.mu.Unlock()
}

type crashBody struct {
	Target   string `json:"target"`
	ServerID string `json:"server_id,omitempty"`
	Mode     string `json:"mode,omitempty"`
}

// crashServer kills the actor of m's server through the chaos endpoint.
func (r *runner) crashServer(ctx context.Context, m *module, mode string) {
	kind := map[string]string{"panic": FaultServerPanic, "stop": FaultServerStop, "poison": FaultServerPoison}[mode]
	id := m.id()
	now := time.Now()
	ans, ok := r.api.call(ctx, Request{Kind: ReqChaos, Module: m.idx, ServerID: id}, http.MethodPost, "/chaos/crash", r.keys.admin,
		crashBody{Target: "server", ServerID: id, Mode: mode}, 5*time.Second)
	if !ok || ans.Code != http.StatusAccepted {
		r.rec.note("%s of %s not injected: %d %s", kind, id, ans.Code, ans.Problem)
		return
	}
	r.rec.fault(Fault{Kind: kind, Start: now, End: time.Now(), Target: id})
}

// crashSystem panics the writer, the stamper or the alert actor through the chaos endpoint.
func (r *runner) crashSystem(ctx context.Context, target string) {
	kind := map[string]string{"writer": FaultWriterPanic, "stamper": FaultStamperPanic, "alerts": FaultAlertsPanic}[target]
	now := time.Now()
	ans, ok := r.api.call(ctx, Request{Kind: ReqChaos, Module: -1}, http.MethodPost, "/chaos/crash", r.keys.admin,
		crashBody{Target: target, Mode: "panic"}, 5*time.Second)
	if !ok || ans.Code != http.StatusAccepted {
		r.rec.note("%s not injected: %d %s", kind, ans.Code, ans.Problem)
		return
	}
	r.rec.fault(Fault{Kind: kind, Start: now, End: time.Now()})
}

// kill9 kills the process with SIGKILL and starts a new one; the fault's window ends when it is ready.
func (r *runner) kill9(ctx context.Context) error {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	start := time.Now()
	if _, err := r.svc.stop(syscall.SIGKILL, 10*time.Second); err != nil {
		return fmt.Errorf("kill -9: %w", err)
	}
	_, err := r.svc.start(ctx, time.Minute)
	r.rec.fault(Fault{Kind: FaultKill9, Start: start, End: time.Now()})
	if err != nil {
		return fmt.Errorf("restart after kill -9: %w", err)
	}
	r.logf("kill -9: the new process was ready after %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// sigstop stops the process for d and continues it.
func (r *runner) sigstop(ctx context.Context, d time.Duration) error {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	start := time.Now()
	if err := r.svc.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP: %w", err)
	}
	sleep(ctx, d)
	err := r.svc.signal(syscall.SIGCONT)
	r.rec.fault(Fault{Kind: FaultSigstop, Start: start, End: time.Now(), Detail: d.String()})
	if err != nil {
		return fmt.Errorf("SIGCONT: %w", err)
	}
	return nil
}

// churn has a churn module deregister and register again every few seconds.
func (r *runner) churn(ctx context.Context) {
	var churners []*module
	for _, m := range r.fleet.mods {
		if m.churn {
			churners = append(churners, m)
		}
	}
	sort.Slice(churners, func(i, j int) bool { return churners[i].idx < churners[j].idx })
	t := time.NewTicker(2 * r.cfg.Heartbeat)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := churners[i%len(churners)]
		select {
		case m.churns <- 2 * r.cfg.Heartbeat:
			r.rec.fault(Fault{Kind: FaultChurn, Start: time.Now(), End: time.Now(), Target: m.name})
		default:
		}
	}
}
