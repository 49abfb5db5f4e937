package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// The registration every simulated module sends, apart from its name.
var (
	loadProtocols = []string{"2025-11-25"}
	loadAdvert    = fleetclient.CapabilityAdvertisement{Tools: []fleetclient.Tool{{
		Name:        "ping",
		Description: "mcpfleet-load simulated module: answers pong",
		InputSchema: []byte(`{"type":"object"}`),
	}}}
)

func (r *runner) moduleName(i int32) string {
	return r.cfg.ModulePrefix + "-" + fmt.Sprintf("%07d", i+1)
}

// bulkTimeout bounds a registration or deregistration pass: three times
// what the ramp predicts or what 1,000 a second would take, whichever is
// longer, plus a minute — so a service slower than the ramp is still
// measured over (nearly) the whole fleet, and a run still stops by itself.
func (r *runner) bulkTimeout() time.Duration {
	const floorRate = 1000
	rate := float64(r.cfg.Ramp)
	if rate <= 0 {
		rate = floorRate
	}
	secs := max(3*float64(r.cfg.N)/rate, float64(r.cfg.N)/floorRate)
	return time.Duration(secs*float64(time.Second)) + time.Minute
}

// pace sends items to out at rate per second (rate ≤ 0: as fast as out is
// read), then closes out. It stops early when ctx ends.
func pace(ctx context.Context, items []int32, rate int, out chan<- int32) {
	defer close(out)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	next := 0
	for next < len(items) {
		allowed := len(items)
		if rate > 0 {
			allowed = min(allowed, int(time.Since(start).Seconds()*float64(rate))+1)
		}
		for ; next < allowed; next++ {
			select {
			case out <- items[next]:
			case <-ctx.Done():
				return
			}
		}
		if next >= len(items) {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// A retryPolicy says which failed requests retry calls again, and how many times.
type retryPolicy struct {
	// attempts is the most f is called; 0: until it succeeds, fails for good, or ctx ends.
	attempts int
	// timeouts: a request that timed out (the client's per-request timeout, not ctx's end) is retried
	// too. Only for an idempotent request: the timed-out one may have taken effect.
	timeouts bool
	// retried, if set, is told of each failed attempt that is retried.
	retried func(error)
}

// registerRetry is how a simulated module registers: as a module that must stay registered does,
// it tries again after every retryable failure — a 503 or 429 after its Retry-After, and a timeout,
// since registering again is idempotent (a registration that committed after the module stopped
// waiting answers 200 the next time) — until it is registered, refused for good (a 4xx), or the
// phase's time limit ends. Failed attempts are counted apart from the errors (ErrorSummary Retried).
func registerRetry(retried func(error)) retryPolicy {
	return retryPolicy{timeouts: true, retried: retried}
}

// deregisterRetry gives a deregistration 4 attempts, timeouts not retried.
var deregisterRetry = retryPolicy{attempts: 4}

// retry calls f while it fails with an error p retries, at most p.attempts times, waiting 100 ms,
// 200 ms, … (at most 2 s) or the answer's Retry-After (at most 5 s, plus up to a second at random:
// fleetclient.RetryWait) in between. It returns f's last
// error when it stops without success (ctx's end included).
func retry[T any](ctx context.Context, p retryPolicy, f func(context.Context) (T, error)) (T, error) {
	var zero T
	for a := 0; ; a++ {
		v, err := f(ctx)
		if err == nil {
			return v, nil
		}
		if !p.retries(ctx, err) || (p.attempts > 0 && a >= p.attempts-1) {
			return zero, err
		}
		if p.retried != nil {
			p.retried(err)
		}
		d := 2 * time.Second
		if a < 5 {
			d = min(100*time.Millisecond<<a, d)
		}
		d = fleetclient.RetryWait(err, d, 5*time.Second)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, err
		case <-t.C:
		}
	}
}

// retries reports whether p retries a request that failed with err while ctx is live.
func (p retryPolicy) retries(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return fleetclient.IsRetryable(err) || (p.timeouts && isTimeout(err))
}

// kindOf names a fleetclient error like errorKind does.
func kindOf(err error) string {
	if pe, ok := fleetclient.AsProblem(err); ok {
		k := "HTTP " + strconv.Itoa(pe.Status)
		if s := pe.Slug(); s != "" {
			k += " " + s
		}
		return k
	}
	var de *fleetclient.DecodeError
	if errors.As(err, &de) {
		return "bad answer"
	}
	return errorKind(0, nil, err)
}

type serverIDBody struct {
	ServerID string `json:"server_id"`
}

type regResult struct {
	ph      *phase
	summary RegistrationSummary
}

// register registers cfg.N modules through cfg.Connections workers at
// cfg.Ramp per second, and hands each registered module to the wheel.
func (r *runner) register(ctx context.Context, addCh chan<- int32) regResult {
	ph := newPhase("registration")
	ctx, cancel := context.WithTimeout(ctx, r.bulkTimeout())
	defer cancel()
	items := make([]int32, r.cfg.N)
	for i := range items {
		items[i] = int32(i)
	}
	idx := make(chan int32, r.cfg.Connections)
	go pace(ctx, items, r.cfg.Ramp, idx)

	var created, registered atomic.Int64
	first := min(r.cfg.N, TargetRegistrationFleet)
	var firstAt atomic.Int64 // the phase's elapsed time at the first-th registration, ns
	var warnOnce sync.Once
	r.setProgress(func() string {
		el := ph.elapsed()
		return fmt.Sprintf("[registration %s] %d/%d registered (%.0f/s), %d errors, latency p99 %s",
			el.Truncate(time.Second), registered.Load(), r.cfg.N, float64(registered.Load())/el.Seconds(),
			ph.errs.total(), ph.lat.Quantile(0.99).Round(10*time.Microsecond))
	})
	defer r.setProgress(nil)

	retryReg := registerRetry(func(err error) { ph.retried.add(kindOf(err)) })
	var wg sync.WaitGroup
	for range r.cfg.Connections {
		wg.Go(func() {
			for i := range idx {
				req := fleetclient.RegisterRequest{
					ModuleName:              r.moduleName(i),
					Version:                 "1.0.0",
					SupportedProtocols:      loadProtocols,
					CapabilityAdvertisement: loadAdvert,
				}
				var sent int64
				resp, err := retry(ctx, retryReg, func(ctx context.Context) (*fleetclient.RegisterResponse, error) {
					ph.sent.Add(1)
					sent = r.now()
					start := time.Now()
					resp, err := r.fc.Register(ctx, req)
					if err == nil {
						ph.lat.Record(time.Since(start))
					}
					return resp, err
				})
				if err != nil {
					if ctx.Err() == nil {
						ph.errs.add(kindOf(err))
					}
					continue
				}
				ph.ok.Add(1)
				if resp.Created {
					created.Add(1)
				}
				if iv := resp.HeartbeatInterval(); iv > 0 && iv != r.cfg.Interval {
					warnOnce.Do(func() {
						r.note("the service announced H = %s but this run heartbeats every --interval %s", iv, r.cfg.Interval)
					})
				}
				m := &r.mods[i]
				m.id = resp.ServerID
				m.body, _ = json.Marshal(serverIDBody{resp.ServerID}) // cannot fail for a struct of a string
				m.ok.add(okMark{sent: sent, answered: r.now()})
				m.state.Store(stateRegistered)
				if registered.Add(1) == int64(first) {
					firstAt.Store(int64(ph.elapsed()))
				}
				select {
				case addCh <- i:
				case <-ctx.Done():
				}
			}
		})
	}
	wg.Wait()
	ph.finish()
	n := registered.Load()
	s := RegistrationSummary{
		Attempted:       int(ph.sent.Load()),
		Registered:      int(n),
		Created:         int(created.Load()),
		Reregistered:    int(n - created.Load()),
		Seconds:         ph.elapsed().Seconds(),
		RatePerSecond:   float64(n) / ph.elapsed().Seconds(),
		FirstRegistered: first,
		FirstSeconds:    time.Duration(firstAt.Load()).Seconds(),
		P50Ms:           msOf(ph.lat.Quantile(0.50)),
		P99Ms:           msOf(ph.lat.Quantile(0.99)),
		MaxMs:           msOf(ph.lat.Max()),
		Errors:          summarizeErrors(&ph.errs),
		Retried:         summarizeErrors(&ph.retried),
	}
	if missing := r.cfg.N - int(n) - int(s.Errors.Total); missing > 0 {
		// Stopped by the bound on the phase, not by an error: modules never tried, and modules still
		// trying again (registerRetry) when it ended.
		if s.Errors.ByKind == nil {
			s.Errors.ByKind = map[string]uint64{}
		}
		s.Errors.ByKind["not registered when the phase's time limit ended"] += uint64(missing)
		s.Errors.Total += uint64(missing)
	}
	return regResult{ph: ph, summary: s}
}

// deregister deregisters the modules items at cfg.Ramp per second.
func (r *runner) deregister(ctx context.Context, items []int32) DeregistrationSummary {
	ph := newPhase("deregistration")
	ctx, cancel := context.WithTimeout(ctx, r.bulkTimeout())
	defer cancel()
	idx := make(chan int32, r.cfg.Connections)
	go pace(ctx, items, r.cfg.Ramp, idx)
	var done atomic.Int64
	r.setProgress(func() string {
		return fmt.Sprintf("[deregistration %s] %d/%d deregistered, %d errors",
			ph.elapsed().Truncate(time.Second), done.Load(), len(items), ph.errs.total())
	})
	defer r.setProgress(nil)
	var wg sync.WaitGroup
	for range r.cfg.Connections {
		wg.Go(func() {
			for i := range idx {
				m := &r.mods[i]
				m.state.Store(stateDeregistered) // the wheel stops beating it
				_, err := retry(ctx, deregisterRetry, func(ctx context.Context) (*fleetclient.Server, error) {
					ph.sent.Add(1)
					return r.fc.Deregister(ctx, m.id)
				})
				if err != nil {
					if ctx.Err() == nil {
						ph.errs.add(kindOf(err))
					}
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	ph.finish()
	return DeregistrationSummary{
		Attempted:    len(items),
		Deregistered: int(done.Load()),
		Seconds:      ph.elapsed().Seconds(),
		Errors:       summarizeErrors(&ph.errs),
	}
}

type sweepResult struct {
	degraded, unhealthy int // our registered modules in each status
	foreign             int // non-healthy servers that are not this run's
	late                int // ours, non-healthy, and the page does not prove the service wrong
}

// sweep lists the degraded and unhealthy servers, page by page. Each of
// this run's modules on a page that the page proves wrong (evidence.
// wronglyLate: a 2xx request answered before the page was asked for, sent
// less than 2H before its answer) is recorded in r.sweepFalse.
func (r *runner) sweep(ctx context.Context) (sweepResult, error) {
	var res sweepResult
	maxPages := r.cfg.N/1000 + 10
	late := int64(2 * r.cfg.Interval)
	for _, st := range []fleetclient.Status{fleetclient.StatusDegraded, fleetclient.StatusUnhealthy} {
		asked := r.now() // ServerPages asks for the next page when the loop's body returns
		for page, err := range r.readFC.ServerPages(ctx, fleetclient.ListOptions{Status: st, Limit: 1000, MaxPages: maxPages}) {
			if err != nil {
				return res, fmt.Errorf("sweep %s servers: %w", st, err)
			}
			answered := r.now()
			for _, srv := range page.Servers {
				i, ours := r.byID[srv.ServerID]
				if !ours {
					res.foreign++
					continue
				}
				m := &r.mods[i]
				if m.state.Load() != stateRegistered {
					continue
				}
				if srv.Status == fleetclient.StatusUnhealthy {
					res.unhealthy++
				} else {
					res.degraded++
				}
				if m.ok.wronglyLate(asked, answered, late) {
					r.sweepMu.Lock()
					r.sweepFalse[srv.ServerID] = srv.Status
					r.sweepMu.Unlock()
				} else {
					res.late++
				}
			}
			asked = r.now()
		}
	}
	return res, nil
}

// sweepLoop sweeps every H/2 (at least 100 ms) until ctx ends, so that a
// server wrongly degraded for a moment is seen even if it recovers. The
// first error stops it and is kept in r.sweepErr. The returned channel
// closes when it has stopped.
func (r *runner) sweepLoop(ctx context.Context) <-chan struct{} {
	every := max(r.cfg.Interval/2, 100*time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := r.sweep(ctx); err != nil {
				if ctx.Err() == nil {
					r.sweepMu.Lock()
					r.sweepErr = err
					r.sweepMu.Unlock()
					r.note("sweeps during the steady phase stopped: %v", err)
				}
				return
			}
		}
	}()
	return done
}
