package actors

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// saturation tells whether this process's goroutines wait too long for a CPU: the 99th percentile of
// the time goroutines spent ready to run before running (runtime/metrics "/sched/latencies:seconds")
// over the last saturationWindow, while at least saturationFloor goroutines per P are ready on average
// ("/sched/goroutines/runnable:goroutines" ÷ "/sched/gomaxprocs:threads"), both sampled every
// saturationSample.
//
// The fleet refuses a module's first registration while the node is saturated (refusal): registering
// is new work, and on a node whose goroutines already queue for a CPU, admitting more servers makes the
// registered fleet's heartbeats late — a load run at 250,000 servers on two cores went on registering
// past what the node could hold and pushed 161,331 servers whose modules were alive into unhealthy.
// A heartbeat, a re-registration and every other request of a registered server are never refused
// for it.
//
// The latency is what a heartbeat feels: each goroutine it passes through (the connection's, the
// server actor's, the reply's) waits that long for a CPU. A count of ready goroutines alone does not
// say it: a burst of a thousand requests of a few microseconds each is many goroutines and little
// waiting. The floor keeps a machine busy with other processes from counting: the operating system
// then delays this process's threads and so its goroutines, but few of them are ready at once.
//
// A refused first registration is held first (hold): it waits, at most saturationHold, for the node to
// stop being saturated and then goes in, so that a fleet re-registering at once goes in as the node's
// lulls allow rather than after each module's Retry-After (measured, README "Benchmark": at 100,000 the
// modules' waits, not the CPU, bounded the registration rate). At most saturationHolders wait at once;
// the others are refused at once. Held registrations go in at most saturationReleases per sample that
// finds the node not saturated — the target rate of a fleet re-registering, 5,000/s — not all at once:
// on a node at its knee, where lulls are short, a lull of one sample lets in 50 new servers, not every
// held one.
//
// The window is short (100 ms) because it is also the lag between the node's queue emptying and the held
// registrations going in: a mass re-registration's own work saturates the node, the held registrations
// drain its queue, and the node idles until the slow waits have left the window. With 500 ms a fleet of
// 100,000 re-registering through 500 connections flipped the verdict about once a second and left the
// machine's CPUs ~27 % idle: 1,808–2,441 registrations/s against ~3,600 with no gate; with 100 ms,
// 2,261–3,807 (README "Benchmark").
//
// What it does not do (measured, README "Benchmark", 250,000): keep a margin. It refuses at the knee,
// once the registered fleet's heartbeats alone make goroutines wait; servers admitted in the lulls
// between registration waves before that add their heartbeats for good.
type saturation struct {
	latency time.Duration // the p99 scheduling latency from which the node is saturated; ≤ 0: never
	log     *slog.Logger
	metrics *telemetry.Metrics // where each sample's figures are published; nil: nowhere

	// p99 is the window's p99 scheduling latency, runnable its mean ready goroutines per P
	// (math.Float64bits), saturated the verdict. The sampler writes them; anybody reads them.
	p99       atomic.Int64
	runnable  atomic.Uint64
	saturated atomic.Bool

	// permits holds the releases: each sample that finds the node open tops it up to
	// saturationReleases (so at most that many go in per sample, however many were left unused), each
	// that finds it saturated empties it. A held registration waits on it alone, so a sample wakes only
	// the registrations it lets in, in the order they came (a channel's receivers are served first in,
	// first out) — not every held one each 10 ms to find the node still saturated: goroutines made
	// ready only to wait again, on a node whose verdict counts the ready goroutines
	// (BenchmarkSaturatedHold, 512 held: ~1,100 µs of CPU per sample, 11 % of a core, above what a
	// sample costs with none held; ~40 µs now). holding counts the registrations holding; holdFor is how
	// long one may (saturationHold; tests shorten it).
	permits chan struct{}
	holding atomic.Int64
	holdFor time.Duration

	// The verdict's log, the sampler's own: a change is logged at most once per
	// telemetry.BurstLogInterval, so a verdict at its threshold, which can flip from one sample to the next,
	// writes a line per interval rather than per change (a fleet of 100,000 re-registering through 1,250
	// connections changed it 181 times in 42 s: 5 lines). logged is the verdict last logged, at loggedAt
	// (by now; tests replace it); a verdict that differs from it is logged as soon as the interval
	// allows, with changes, how often the verdict changed since the line before — so the log always ends
	// on the verdict the node settled in.
	now      func() time.Time
	logged   bool
	loggedAt time.Time
	changes  int

	// The sampler's own: the last samples, rings of window+1 cumulative latency histograms (the
	// window's latencies are the newest minus the oldest) and of window ready counts.
	hists   [][]uint64
	counts  []float64
	next    int // samples taken
	buckets []float64
	samples [3]metrics.Sample
}

const (
	saturationSample = 10 * time.Millisecond  // how often the scheduler is read
	saturationWindow = 100 * time.Millisecond // the samples a verdict takes in, and the lag of its opening
	saturationFloor  = 4.0                    // mean ready goroutines per P below which a node is never saturated
	saturationP      = 0.99                   // the latency percentile compared with the threshold

	saturationHold     = 2 * time.Second // how long a refused first registration waits for the node to open
	saturationHolders  = 512             // how many wait at once, at most; past it they are refused at once
	saturationReleases = 50              // held registrations let in per open sample: 5,000/s, the target rate
)

// newSaturation returns a gauge that reports saturation from a p99 scheduling latency of latency;
// latency ≤ 0 gives one that never does. It measures nothing until sampled (start or observe).
func newSaturation(latency time.Duration, log *slog.Logger, metrics *telemetry.Metrics) *saturation {
	n := int(saturationWindow / saturationSample)
	s := &saturation{latency: latency, log: log, metrics: metrics, hists: make([][]uint64, n+1), counts: make([]float64, n), holdFor: saturationHold,
		now: time.Now}
	s.permits = make(chan struct{}, saturationReleases)
	s.release() // open until a sample says otherwise
	s.samples[0].Name = "/sched/latencies:seconds"
	s.samples[1].Name = "/sched/goroutines/runnable:goroutines"
	s.samples[2].Name = "/sched/gomaxprocs:threads"
	return s
}

// start samples the runtime every saturationSample until stop is called (stop waits for the sampling
// goroutine to end). A gauge with no threshold samples nothing.
func (s *saturation) start() (stop func()) {
	if s.latency <= 0 {
		return func() {}
	}
	return repeat(saturationSample, func() {
		metrics.Read(s.samples[:])
		procs := max(1, s.samples[2].Value.Uint64())
		s.observe(s.samples[0].Value.Float64Histogram(), float64(s.samples[1].Value.Uint64())/float64(procs))
	})
}

// observe takes one sample into the window — the runtime's cumulative scheduling-latency histogram
// and the ready goroutines per P — and updates the verdict, logging when it changes. Only the sampler
// calls it (tests call it instead of the sampler); it copies hist's counts and keeps its Buckets (the
// runtime's bucket boundaries, which never change).
func (s *saturation) observe(hist *metrics.Float64Histogram, perP float64) {
	slot := s.hists[s.next%len(s.hists)]
	if len(slot) != len(hist.Counts) {
		slot = make([]uint64, len(hist.Counts))
		s.hists[s.next%len(s.hists)] = slot
	}
	copy(slot, hist.Counts)
	s.buckets = hist.Buckets
	s.counts[s.next%len(s.counts)] = perP
	s.next++

	var sum float64
	for _, v := range s.counts {
		sum += v
	}
	mean := sum / float64(len(s.counts)) // a window not yet full counts its missing samples as idle
	oldest := s.hists[(s.next-min(s.next, len(s.hists)))%len(s.hists)]
	p99 := s.percentile(slot, oldest)
	s.runnable.Store(math.Float64bits(mean))
	s.p99.Store(int64(p99))

	now := s.latency > 0 && mean >= saturationFloor && p99 >= s.latency
	s.metrics.NodeLoad(p99, mean, now)
	if s.saturated.Swap(now) != now {
		s.changes++
	}
	if now {
		s.withhold()
	} else {
		s.release()
	}
	s.logVerdict(now, p99, mean)
}

// release tops permits up to saturationReleases. It counts what it adds before adding it: a permit
// sent while registrations wait goes straight to one of them, so "until the channel is full" would
// let in every held registration and then fill it.
func (s *saturation) release() {
	for range saturationReleases - len(s.permits) {
		select {
		case s.permits <- struct{}{}:
		default:
			return
		}
	}
}

// withhold takes back every permit left: none goes in while the node is saturated.
func (s *saturation) withhold() {
	for {
		select {
		case <-s.permits:
		default:
			return
		}
	}
}

// logVerdict logs the verdict now if it differs from the one last logged and the last line is at least
// telemetry.BurstLogInterval old (see the fields).
func (s *saturation) logVerdict(now bool, p99 time.Duration, mean float64) {
	if s.log == nil || now == s.logged {
		return
	}
	t := s.now()
	if !s.loggedAt.IsZero() && t.Sub(s.loggedAt) < telemetry.BurstLogInterval {
		return
	}
	changes := s.changes
	s.logged, s.loggedAt, s.changes = now, t, 0
	msg := "node no longer saturated: first registrations are taken again"
	args := []any{"sched_latency_p99", p99, "runnable_goroutines_per_cpu", math.Round(mean*10) / 10, "verdict_changes", changes}
	if now {
		msg = "node saturated: first registrations are held, then refused (503), until it is not"
		args = append(args, "threshold", s.latency)
	}
	s.log.Warn(msg, args...)
}

// percentile is the saturationP latency of the events counted in newest but not in oldest (two
// cumulative histograms over s.buckets): the lower bound of the bucket it falls in, 0 with no event.
func (s *saturation) percentile(newest, oldest []uint64) time.Duration {
	if len(oldest) != len(newest) {
		oldest = nil // the oldest sample is this one, or of another shape: the window starts here
	}
	count := func(i int) uint64 {
		if oldest == nil {
			return newest[i]
		}
		return newest[i] - oldest[i]
	}
	var total uint64
	for i := range newest {
		total += count(i)
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(saturationP * float64(total)))
	var seen uint64
	for i := range newest {
		if seen += count(i); seen >= want {
			return time.Duration(max(0, s.buckets[i]) * float64(time.Second))
		}
	}
	return 0
}

// holdUntil is when a registration refused now, for a caller waiting until ctx's deadline, stops being
// held: s.holdFor from now, or sooner to leave the caller half the time it has left for the registration
// itself (a forwarded one has cluster.ForwardTimeout in all; past it, its sender takes the owner for
// silent).
func (s *saturation) holdUntil(ctx context.Context) time.Time {
	now := time.Now()
	until := now.Add(s.holdFor)
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < 2*s.holdFor {
		until = now.Add(dl.Sub(now) / 2)
	}
	return until
}

// hold waits for one of the releases of a sample that found the node open, at most until until, and
// reports whether it got one (the refused registration may then try again); false also when ctx ends,
// until has passed or saturationHolders already wait. A nil gauge, or one whose last sample found the
// node open with a release left, returns true at once.
func (s *saturation) hold(ctx context.Context, until time.Time) bool {
	if s == nil {
		return true
	}
	left := time.Until(until)
	if left <= 0 {
		return false
	}
	if s.holding.Add(1) > saturationHolders {
		s.holding.Add(-1)
		return false
	}
	defer s.holding.Add(-1)
	select {
	case <-s.permits:
		return true
	default:
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-s.permits:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// refusal is the answer to new work (a module's first registration) arriving now: nil, or
// ErrSaturated while the node is saturated. A nil gauge never refuses.
func (s *saturation) refusal() error {
	if s == nil || !s.saturated.Load() {
		return nil
	}
	return fmt.Errorf("%w (goroutines wait %v for a CPU at p99)", ErrSaturated, time.Duration(s.p99.Load()).Round(time.Millisecond))
}
