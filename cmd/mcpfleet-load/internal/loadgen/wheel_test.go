package loadgen_test

import (
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

// runWheel adds n modules at tick 0 and advances the wheel for the given
// number of ticks, returning per tick the modules due and per module the
// ticks it was due at.
func runWheel(n int, period, jitter int64, ticks int64) (perTick [][]int32, perModule [][]int64) {
	w := loadgen.NewWheel(n, period, jitter, 42)
	for i := range n {
		w.Add(int32(i), 0)
	}
	perTick = make([][]int32, ticks+1)
	perModule = make([][]int64, n)
	for tick := int64(1); tick <= ticks; tick++ {
		w.Advance(tick, func(i int32) {
			perTick[tick] = append(perTick[tick], i)
			perModule[i] = append(perModule[i], tick)
		})
	}
	return perTick, perModule
}

func TestWheelSpreadsEvenlyWithoutJitter(t *testing.T) {
	const n, period = 10_000, 100
	perTick, perModule := runWheel(n, period, 0, 5*period)
	for tick := 1; tick < len(perTick); tick++ {
		if got := len(perTick[tick]); got != n/period {
			t.Fatalf("tick %d has %d beats, want exactly %d", tick, got, n/period)
		}
	}
	for i, ticks := range perModule {
		if len(ticks) != 5 {
			t.Fatalf("module %d beat %d times in 5 periods, want 5", i, len(ticks))
		}
		for k := 1; k < len(ticks); k++ {
			if d := ticks[k] - ticks[k-1]; d != period {
				t.Fatalf("module %d: interval %d ticks, want %d", i, d, period)
			}
		}
	}
}

func TestWheelJitterIsBoundedAndDoesNotDrift(t *testing.T) {
	const n, period, jitter, periods = 5000, 100, 10, 20
	perTick, perModule := runWheel(n, period, jitter, periods*period)
	for i, ticks := range perModule {
		// Jitter at either end can move one beat in or out of the window.
		if len(ticks) < periods-1 || len(ticks) > periods+1 {
			t.Fatalf("module %d beat %d times in %d periods", i, len(ticks), periods)
		}
		if ticks[0] < 1 || ticks[0] > period+jitter {
			t.Errorf("module %d: first beat at tick %d, want within one period plus jitter", i, ticks[0])
		}
		for k := 1; k < len(ticks); k++ {
			if d := ticks[k] - ticks[k-1]; d < period-2*jitter || d > period+2*jitter {
				t.Fatalf("module %d: interval %d ticks, want %d ± %d", i, d, period, 2*jitter)
			}
		}
		// Jitter does not accumulate: beat k stays within J of its nominal tick.
		first, last := ticks[0], ticks[len(ticks)-1]
		if span := last - first; span < int64(len(ticks)-1)*period-2*jitter || span > int64(len(ticks)-1)*period+2*jitter {
			t.Errorf("module %d drifted: %d beats span %d ticks", i, len(ticks), span)
		}
	}
	// Once the first period has passed, load per tick stays near the mean.
	mean := float64(n) / period
	for tick := period + jitter; tick < len(perTick)-jitter; tick++ {
		if got := float64(len(perTick[tick])); got > 1.6*mean || got < 0.4*mean {
			t.Errorf("tick %d has %v beats, mean %v: spread too uneven", tick, got, mean)
		}
	}
}

func TestWheelFewModulesAndLateAdds(t *testing.T) {
	const period = 50
	w := loadgen.NewWheel(3, period, 0, 1)
	w.Add(0, 0)
	due := map[int32][]int64{}
	for tick := int64(1); tick <= 300; tick++ {
		if tick == 120 {
			w.Add(1, 119)
			w.Add(2, 119)
		}
		w.Advance(tick, func(i int32) { due[i] = append(due[i], tick) })
	}
	if len(due[0]) != 6 {
		t.Errorf("module 0 beat %d times in 300 ticks, want 6: %v", len(due[0]), due[0])
	}
	for _, i := range []int32{1, 2} {
		if len(due[i]) == 0 || due[i][0] <= 119 || due[i][0] > 119+period {
			t.Errorf("module %d added at 119: first beat %v, want within one period", i, due[i])
		}
	}
	if p := loadgen.NewWheel(1, 1, 5, 1).Period(); p != 2 {
		t.Errorf("Period = %d, want the minimum of 2", p)
	}
}
