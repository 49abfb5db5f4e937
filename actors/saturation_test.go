package actors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/internal/wait"
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

// TestSaturatedNodeRefusesFirstRegistrations: while the process's goroutines wait for a CPU (goroutines
// that each compute for a millisecond stand in for a node's queued requests), a module's first registration
// is refused with ErrSaturated and starts nothing; registered servers' heartbeats (of both tenants) and a
// re-registration are served. Once the spinning ends, the module registers.
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

	stop.Store(true)
	spinners.Wait()
	wait.For(t, "the first registration taken once the node is not saturated", 30*time.Second, func() bool {
		_, err := h.fleet.Register(ctx, RegisterRequest{TenantID: h.tenant, ModuleName: fmt.Sprintf("b%d", taken), Version: "1"})
		return err == nil
	})
}
