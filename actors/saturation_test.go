package actors

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// The verdict is the mean of the last saturationWindow of samples against the threshold: one busy
// sample does not saturate a node, a window at the threshold does, and one idle sample in it ends it.
func TestSaturationVerdict(t *testing.T) {
	n := int(saturationWindow / saturationSample)
	repeat := func(v float64, k int) []float64 {
		out := make([]float64, k)
		for i := range out {
			out[i] = v
		}
		return out
	}
	cases := []struct {
		name      string
		threshold float64
		samples   []float64
		want      bool
	}{
		{"no sample", 32, nil, false},
		{"one burst in an empty window", 32, []float64{1000}, false},
		{"a window not yet full counts the rest as idle", 32, repeat(32, n-1), false},
		{"a full window at the threshold", 32, repeat(32, n), true},
		{"a full window just under it", 32, repeat(31.9, n), false},
		{"a burst that lifts the mean", 32, append(repeat(0, n-1), 32*float64(n)), true},
		{"one idle sample ends a window at the threshold", 32, append(repeat(32, n), 0), false},
		{"the oldest sample leaves the window", 32, append(append([]float64{1000}, repeat(31, n-1)...), 31), false},
		{"threshold 0: never", 0, repeat(1e6, n), false},
		{"negative threshold: never", -1, repeat(1e6, n), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSaturation(c.threshold, nil)
			for _, v := range c.samples {
				s.observe(v)
			}
			err := s.refusal()
			if got := s.saturated.Load(); got != c.want || (err != nil) != c.want {
				t.Fatalf("saturated %v, refusal %v; want saturated %v", got, err, c.want)
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

// TestSaturatedNodeRefusesFirstRegistrations: while the process has many more goroutines ready to run
// than CPUs (spinning goroutines stand in for a node's queued requests), a module's first registration
// is refused with ErrSaturated and starts nothing; a registered server's heartbeat and re-registration
// are served. Once the spinning ends, the module registers.
func TestSaturatedNodeRefusesFirstRegistrations(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Saturation = 2 })
	a := h.register("a")

	var stop atomic.Bool
	var spinners sync.WaitGroup
	defer func() { stop.Store(true); spinners.Wait() }()
	for range 6 * runtime.GOMAXPROCS(0) {
		spinners.Go(func() {
			for !stop.Load() {
				runtime.Gosched() // stays runnable, but lets the fleet's goroutines run between turns
			}
		})
	}
	ctx := context.Background()
	var refused error
	taken := 1 // servers registered: "a", and those registered before the node was saturated
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
	if _, err := h.fleet.Heartbeat(ctx, h.tenant, a, carrier{}); err != nil {
		t.Fatalf("a registered server's heartbeat on a saturated node: %v", err)
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
