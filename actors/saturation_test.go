package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// latencies is a cumulative scheduling-latency histogram as the runtime gives it, over a few buckets.
type latencies struct{ counts []uint64 }

var latencyBuckets = []float64{math.Inf(-1), 0, 0.001, 0.010, 0.025, 0.050, 0.100, math.Inf(1)}

// add counts n more goroutines that waited d (the bucket d falls in) and returns the histogram now.
func (l *latencies) add(n uint64, d time.Duration) *metrics.Float64Histogram {
	if l.counts == nil {
		l.counts = make([]uint64, len(latencyBuckets)-1)
	}
	for i := len(latencyBuckets) - 2; i >= 0; i-- {
		if d.Seconds() >= latencyBuckets[i] {
			l.counts[i] += n
			break
		}
	}
	return &metrics.Float64Histogram{Counts: slices.Clone(l.counts), Buckets: latencyBuckets}
}

// The verdict: the p99 of the waits counted in the window reaches the threshold while, on average, at
// least saturationFloor goroutines per P are ready. Waits older than the window do not count, and
// neither does a long wait of few goroutines (a machine busy with other processes).
func TestSaturationVerdict(t *testing.T) {
	n := int(saturationWindow / saturationSample)
	type sample struct {
		fast, slow uint64  // goroutines that waited 1 ms, and 50 ms, since the last sample
		perP       float64 // ready goroutines per P
	}
	repeat := func(k int, s sample) []sample { return slices.Repeat([]sample{s}, k) }
	cases := []struct {
		name    string
		latency time.Duration
		samples []sample
		want    bool
	}{
		{"no sample", 25 * time.Millisecond, nil, false},
		{"one sample is no window", 25 * time.Millisecond, []sample{{0, 100, 100}}, false},
		{"slow waits of many ready goroutines", 25 * time.Millisecond, repeat(n+1, sample{0, 100, 8}), true},
		{"fast waits of many ready goroutines", 25 * time.Millisecond, repeat(n+1, sample{100, 0, 100}), false},
		{"slow waits of few ready goroutines", 25 * time.Millisecond, repeat(n+1, sample{0, 100, saturationFloor - 0.1}), false},
		{"the floor is a mean over the window", 25 * time.Millisecond, append(repeat(n-1, sample{0, 100, 0}), sample{0, 100, saturationFloor * float64(n)}), true},
		{"2 in 100 slow: the p99 is slow", 25 * time.Millisecond, append([]sample{{}}, sample{98, 2, 8 * float64(n)}), true},
		{"1 in 100 slow: the p99 is fast", 25 * time.Millisecond, append([]sample{{}}, sample{99, 1, 8 * float64(n)}), false},
		{"slow waits still in the window", 25 * time.Millisecond, append(repeat(n, sample{0, 100, 8}), repeat(n-1, sample{100, 0, 8})...), true},
		{"slow waits that left the window", 25 * time.Millisecond, append(repeat(n, sample{0, 100, 8}), repeat(n, sample{100, 0, 8})...), false},
		{"a threshold above the waits", 100 * time.Millisecond, repeat(n+1, sample{0, 100, 8}), false},
		{"threshold 0: never", 0, repeat(n+1, sample{0, 100, 100}), false},
		{"negative threshold: never", -1, repeat(n+1, sample{0, 100, 100}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSaturation(c.latency, nil, nil)
			var h latencies
			h.add(0, 0)
			for _, v := range c.samples {
				h.add(v.fast, time.Millisecond)
				s.observe(h.add(v.slow, 50*time.Millisecond), v.perP)
			}
			err := s.refusal()
			if got := s.saturated.Load(); got != c.want || (err != nil) != c.want {
				t.Fatalf("saturated %v (p99 %v, %.1f ready per P), refusal %v; want saturated %v",
					got, time.Duration(s.p99.Load()), math.Float64frombits(s.runnable.Load()), err, c.want)
			}
			if c.want && (!errors.Is(err, ErrSaturated) || !errors.Is(err, ErrUnavailable)) {
				t.Fatalf("refusal %v is not ErrSaturated and ErrUnavailable", err)
			}
		})
	}
	var none *saturation
	if err := none.refusal(); err != nil {
		t.Fatalf("a nil gauge refused: %v", err)
	}
}

// saturate drives s's verdict with a full window of slow waits (hot) or of fast ones, as the sampler would.
func saturate(s *saturation, h *latencies, hot bool) {
	for range int(saturationWindow/saturationSample) + 1 {
		if hot {
			s.observe(h.add(100, 50*time.Millisecond), 8)
		} else {
			s.observe(h.add(100, time.Millisecond), 8)
		}
	}
}

// The node opens at most 100 ms after its goroutines stop waiting: the window is also how long held
// registrations wait once the node's queue has emptied (its CPUs idle meanwhile). With the 500 ms window
// it had, a fleet re-registering at once left the machine's CPUs about a quarter idle.
func TestSaturationOpensWithin100ms(t *testing.T) {
	s := newSaturation(25*time.Millisecond, nil, nil)
	var h latencies
	h.add(0, 0)
	saturate(s, &h, true)
	if s.refusal() == nil {
		t.Fatal("the node is not saturated: the test proves nothing")
	}
	samples := 0
	for s.saturated.Load() && samples < 1000 {
		s.observe(h.add(100, time.Millisecond), 8) // many ready goroutines, none waiting long
		samples++
	}
	if waited := time.Duration(samples) * saturationSample; waited > 100*time.Millisecond {
		t.Fatalf("the node opened %v of samples after its goroutines stopped waiting; want ≤ 100ms", waited)
	}
}

// The verdict's log: a change is logged at once, then at most once per interval however often the verdict
// flips, with how often it changed; once the interval has passed, a verdict that differs from the one
// last logged is logged at the next sample, so the log ends on the verdict the node settled in.
func TestSaturationLogsAChangeAtMostOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	s := newSaturation(25*time.Millisecond, slog.New(slog.NewJSONHandler(&buf, nil)), nil)
	clock := time.Unix(1_000_000, 0)
	s.now = func() time.Time { return clock }
	var h latencies
	h.add(0, 0)
	type line struct {
		Msg     string `json:"msg"`
		Changes int    `json:"verdict_changes"`
	}
	lines := func() []line {
		var out []line
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			var v line
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			out = append(out, v)
		}
		return out
	}
	check := func(when string, want ...line) {
		t.Helper()
		if got := lines(); !slices.Equal(got, want) {
			t.Fatalf("%s: logged %+v, want %+v", when, got, want)
		}
	}
	const saturated, open = "node saturated: first registrations are held, then refused (503), until it is not", "node no longer saturated: first registrations are taken again"

	saturate(s, &h, true)
	check("the first change", line{saturated, 1})
	for range 5 {
		saturate(s, &h, false)
		saturate(s, &h, true)
	}
	saturate(s, &h, false)
	if s.saturated.Load() {
		t.Fatal("the node is still saturated: the test proves nothing")
	}
	check("eleven changes within the interval", line{saturated, 1})

	clock = clock.Add(telemetry.BurstLogInterval)
	s.observe(h.add(100, time.Millisecond), 8) // no change at this sample: the verdict it settled in
	check("a sample after the interval", line{saturated, 1}, line{open, 11})

	clock = clock.Add(telemetry.BurstLogInterval)
	saturate(s, &h, false)
	check("no change since", line{saturated, 1}, line{open, 11})
}

// A refused registration's hold: it waits while the node is saturated and ends, true, when a sample finds
// the node open (at once when it is open); at most saturationReleases go per open sample, the others wait
// for the next; it ends false when its time is up, its caller goes away or too many wait.
func TestSaturationHold(t *testing.T) {
	far := func() time.Time { return time.Now().Add(time.Minute) }
	s := newSaturation(25*time.Millisecond, nil, nil)
	var h latencies
	h.add(0, 0)
	if !s.hold(context.Background(), far()) {
		t.Fatal("a hold on an open node did not end at once, true")
	}

	saturate(s, &h, true)
	if s.refusal() == nil {
		t.Fatal("the node is not saturated: the test proves nothing")
	}
	const held = saturationReleases + 1
	done := make(chan bool, held)
	for range held {
		go func() { done <- s.hold(context.Background(), far()) }()
	}
	wait.For(t, "the registrations held", 10*time.Second, func() bool { return s.holding.Load() == held })
	if len(done) != 0 {
		t.Fatalf("%d holds ended while the node was saturated", len(done))
	}
	s.observe(h.add(100, time.Millisecond), 8) // slow waits still in the window: saturated
	if len(done) != 0 || s.holding.Load() != held {
		t.Fatalf("a sample that found the node saturated released %d holds", len(done))
	}
	for s.saturated.Load() { // fast waits until a sample finds the node open: one sample's releases
		s.observe(h.add(100, time.Millisecond), 8)
	}
	for range saturationReleases {
		if !<-done {
			t.Fatal("a hold ended false when the node opened")
		}
	}
	if n := s.holding.Load(); n != 1 || len(done) != 0 {
		t.Fatalf("one open sample released %d holds, want saturationReleases (%d)", held-n, saturationReleases)
	}
	s.observe(h.add(100, time.Millisecond), 8) // the next open sample
	if !<-done {
		t.Fatal("the last hold ended false at the next open sample")
	}
	// Releases left unused do not add up: the next open samples let in saturationReleases, not more.
	s.observe(h.add(100, time.Millisecond), 8)
	for range saturationReleases + 1 {
		go func() { done <- s.hold(context.Background(), far()) }()
	}
	for range saturationReleases {
		if !<-done {
			t.Fatal("a hold on an open node with releases left ended false")
		}
	}
	wait.For(t, "the hold past the sample's releases", 10*time.Second, func() bool { return s.holding.Load() == 1 })
	if len(done) != 0 {
		t.Fatalf("one sample's unused releases, kept over two open samples, let in %d more than saturationReleases", len(done))
	}
	s.observe(h.add(100, time.Millisecond), 8)
	if !<-done {
		t.Fatal("the hold past the releases ended false at the next open sample")
	}

	saturate(s, &h, true)
	if s.hold(context.Background(), time.Now().Add(20*time.Millisecond)) {
		t.Fatal("a hold on a saturated node ended true at its time limit")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := make(chan bool, 1)
	go func() { gone <- s.hold(ctx, far()) }() // without the caller's end it would wait its minute
	wait.For(t, "the hold of a caller that went away to end", 10*time.Second, func() bool { return len(gone) == 1 })
	if <-gone {
		t.Fatal("the hold of a caller that went away ended true")
	}

	// The two refusals before any wait hold on an open node too, where a wait would end true at once.
	saturate(s, &h, false)
	if s.hold(context.Background(), time.Now().Add(-time.Millisecond)) {
		t.Fatal("a hold whose time had passed ended true")
	}
	s.holding.Store(saturationHolders) // as many as may wait are waiting
	if s.hold(context.Background(), far()) {
		t.Fatal("a hold past saturationHolders ended true")
	}
	if n := s.holding.Load(); n != saturationHolders {
		t.Fatalf("a refused hold left %d holding, want %d", n, saturationHolders)
	}
	s.holding.Store(0)

	var none *saturation
	if !none.hold(context.Background(), far()) {
		t.Fatal("a nil gauge's hold ended false")
	}
}

// A hold leaves a caller with a deadline half its time for the registration (a forwarded request's
// sender gives up at cluster.ForwardTimeout), and is holdFor otherwise.
func TestSaturationHoldUntil(t *testing.T) {
	s := newSaturation(25*time.Millisecond, nil, nil)
	before := time.Now()
	if got := s.holdUntil(context.Background()); got.Before(before.Add(saturationHold)) || got.After(time.Now().Add(saturationHold)) {
		t.Fatalf("without a deadline the hold ends in %v, want %v", got.Sub(before), saturationHold)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	dl, _ := ctx.Deadline()
	if got := s.holdUntil(ctx); dl.Sub(got) < 1400*time.Millisecond {
		t.Fatalf("with 3 s left the hold leaves %v for the registration, want 1.5 s", dl.Sub(got))
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	if got := s.holdUntil(long); got.After(time.Now().Add(saturationHold)) {
		t.Fatalf("with an hour left the hold ends in %v, past %v", time.Until(got), saturationHold)
	}
}

// TestSaturatedNodeRefusesFirstRegistrations: while the process's goroutines wait for a CPU (goroutines
// that each compute for a millisecond stand in for a node's queued requests), a module's first registration
// is held and then refused with ErrSaturated, and starts nothing; registered servers' heartbeats (of both
// tenants) and a re-registration are served. A first registration held when the spinning ends goes in.
func TestSaturatedNodeRefusesFirstRegistrations(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SaturationLatency = 2 * time.Millisecond })
	a := h.register("a")

	var stop atomic.Bool
	var spinners sync.WaitGroup
	defer func() { stop.Store(true); spinners.Wait() }()
	for range 10 * runtime.GOMAXPROCS(0) {
		spinners.Go(func() {
			for !stop.Load() {
				for start := time.Now(); time.Since(start) < time.Millisecond; {
				}
				runtime.Gosched() // stays ready, and the others wait a turn of a millisecond each
			}
		})
	}
	ctx := context.Background()
	other := uuid.New() // another tenant's registered server is served as well
	res, err := h.fleet.Register(ctx, RegisterRequest{TenantID: other, ModuleName: "a", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	otherA := res.Server.ServerID
	h.fleet.sdeps.load.holdFor = 10 * time.Millisecond // refused after a short hold, which ends with the node still saturated
	var refused error
	taken := 2 // servers registered: both "a", and those registered before the node was saturated
	wait.For(t, "a first registration refused on a saturated node", 30*time.Second, func() bool {
		_, refused = h.fleet.Register(ctx, RegisterRequest{TenantID: h.tenant, ModuleName: fmt.Sprintf("b%d", taken), Version: "1"})
		if refused == nil {
			taken++
		}
		return errors.Is(refused, ErrSaturated)
	})
	if !errors.Is(refused, ErrUnavailable) {
		t.Fatalf("refused with %v, which is not ErrUnavailable (a 503 to retry)", refused)
	}
	if got := serverActors(h.fleet); len(got) != taken {
		t.Fatalf("%d server actors after a refused registration, want %d", len(got), taken)
	}
	for _, s := range []struct{ tenant, id uuid.UUID }{{h.tenant, a}, {other, otherA}} {
		if _, err := h.fleet.Heartbeat(ctx, s.tenant, s.id, carrier{}); err != nil {
			t.Fatalf("a registered server's heartbeat on a saturated node (tenant %v): %v", s.tenant, err)
		}
	}
	if res, err := h.fleet.Register(ctx, RegisterRequest{TenantID: h.tenant, ModuleName: "a", Version: "1"}); err != nil || res.Server.ServerID != a {
		t.Fatalf("a registered server's re-registration on a saturated node: %+v, %v", res, err)
	}
	if !h.fleet.sdeps.load.saturated.Load() {
		t.Fatal("the node stopped being saturated before the registered server was served: the test proved nothing")
	}

	// A first registration refused now is held: it goes in once the node opens, its caller never asked again.
	load := h.fleet.sdeps.load
	load.holdFor = time.Minute
	var held chan error
	for try := 0; ; try++ {
		held = make(chan error, 1)
		module := fmt.Sprintf("held%d", try)
		go func() {
			_, err := h.fleet.Register(ctx, RegisterRequest{TenantID: h.tenant, ModuleName: module, Version: "1"})
			held <- err
		}()
		wait.For(t, "the registration held, or answered", 30*time.Second, func() bool { return load.holding.Load() == 1 || len(held) == 1 })
		if load.holding.Load() == 1 {
			break
		}
		if err := <-held; err != nil { // not held: refused at once, or taken in a lull of the spinning
			t.Fatalf("a first registration on a saturated node was answered %v, not held", err)
		}
		if try == 10 {
			t.Fatal("ten first registrations taken in lulls: the node is not saturated, the test proves nothing")
		}
	}
	stop.Store(true)
	spinners.Wait()
	if err := <-held; err != nil {
		t.Fatalf("the held registration, once the node opened: %v", err)
	}
}

// BenchmarkSaturatedHold is what saturationHolders held registrations cost a saturated node: the
// process's CPU per saturated sample, the samples taken every saturationSample as the sampler does
// (cpu-µs/sample). It includes what the process spends per sample with nobody held — the sample, the
// sleep, the runtime's own work: ~150 µs on the 2-core VM, 2026-12-07 — so read it against that.
func BenchmarkSaturatedHold(b *testing.B) {
	s := newSaturation(25*time.Millisecond, nil, nil)
	var h latencies
	saturate(s, &h, true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range saturationHolders {
		wg.Go(func() { s.hold(ctx, time.Now().Add(time.Hour)) })
	}
	wait.For(b, "the registrations held", 10*time.Second, func() bool { return s.holding.Load() == saturationHolders })
	before := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		s.observe(h.add(100, 50*time.Millisecond), 8)
		time.Sleep(saturationSample)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-before).Microseconds())/float64(b.N), "cpu-µs/sample")
	if n := s.holding.Load(); n != saturationHolders {
		b.Fatalf("%d of %d held registrations went in on a saturated node", saturationHolders-n, saturationHolders)
	}
	cancel()
	wg.Wait()
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
