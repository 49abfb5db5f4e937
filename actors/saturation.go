package actors

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// saturation tells whether this process has more work ready to run than its CPUs run: the mean number
// of runnable goroutines per P (runtime/metrics "/sched/goroutines/runnable:goroutines" ÷
// "/sched/gomaxprocs:threads"), sampled every saturationSample over the last saturationWindow. It is
// the signal CockroachDB's admission control sheds work on (runnable goroutines per P, overload at 32).
//
// The fleet refuses a module's first registration while the node is saturated (refusal): registering
// is new work, and on a node whose request goroutines already queue, admitting more servers makes the
// registered fleet's heartbeats late — a load run at 250,000 servers on two cores went on registering
// past what the node could hold and pushed 161,331 servers whose modules were alive into unhealthy.
// A heartbeat, a re-registration and every other request of a registered server are never refused
// for it. A machine busy with other processes does not count: the goroutines this process runs wait
// for a CPU then, but few of them are runnable at once.
type saturation struct {
	threshold float64 // runnable goroutines per P from which the node is saturated; ≤ 0: never
	log       *slog.Logger

	// mean is the window's mean runnable goroutines per P (math.Float64bits); saturated is whether
	// it reached threshold. The sampler writes both; anybody reads them.
	mean      atomic.Uint64
	saturated atomic.Bool

	window  []float64 // the last samples, a ring
	next    int
	samples [2]metrics.Sample
}

const (
	saturationSample = 10 * time.Millisecond  // how often the run queues are counted
	saturationWindow = 500 * time.Millisecond // the samples a verdict averages
)

// newSaturation returns a gauge that reports saturation from threshold runnable goroutines per P;
// threshold ≤ 0 gives one that never does. It measures nothing until sampled (start or observe).
func newSaturation(threshold float64, log *slog.Logger) *saturation {
	s := &saturation{threshold: threshold, log: log, window: make([]float64, 0, int(saturationWindow/saturationSample))}
	s.samples[0].Name = "/sched/goroutines/runnable:goroutines"
	s.samples[1].Name = "/sched/gomaxprocs:threads"
	return s
}

// start samples the runtime every saturationSample until stop is called (stop waits for the sampling
// goroutine to end). A gauge with no threshold samples nothing.
func (s *saturation) start() (stop func()) {
	if s.threshold <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(saturationSample)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				metrics.Read(s.samples[:])
				procs := max(1, s.samples[1].Value.Uint64())
				s.observe(float64(s.samples[0].Value.Uint64()) / float64(procs))
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// observe takes one sample (runnable goroutines per P) into the window and updates the verdict,
// logging when it changes. Only the sampler calls it (tests call it instead of the sampler).
func (s *saturation) observe(perP float64) {
	if len(s.window) < cap(s.window) {
		s.window = append(s.window, perP)
	} else {
		s.window[s.next] = perP
		s.next = (s.next + 1) % len(s.window)
	}
	var sum float64
	for _, v := range s.window {
		sum += v
	}
	mean := sum / float64(cap(s.window)) // a window not yet full counts its missing samples as idle
	s.mean.Store(math.Float64bits(mean))
	now := s.threshold > 0 && mean >= s.threshold
	if s.saturated.Swap(now) != now && s.log != nil {
		if now {
			s.log.Warn("node saturated: first registrations are refused (503) until it is not", "runnable_goroutines_per_cpu", math.Round(mean*10)/10, "threshold", s.threshold)
		} else {
			s.log.Warn("node no longer saturated: first registrations are taken again", "runnable_goroutines_per_cpu", math.Round(mean*10)/10)
		}
	}
}

// refusal is the answer to new work (a module's first registration) arriving now: nil, or
// ErrSaturated while the node is saturated. A nil gauge never refuses.
func (s *saturation) refusal() error {
	if s == nil || !s.saturated.Load() {
		return nil
	}
	return fmt.Errorf("%w (%.0f runnable goroutines per CPU)", ErrSaturated, math.Float64frombits(s.mean.Load()))
}
