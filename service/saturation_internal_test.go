package service

import (
	"testing"
	"time"
)

// MCPFLEET_SATURATION_LATENCY=0 turns the shedding off; the actors' threshold for that is negative
// (their 0 is "the default").
func TestSaturationZeroMeansNever(t *testing.T) {
	for _, c := range []struct{ env, want time.Duration }{{0, -1}, {25 * time.Millisecond, 25 * time.Millisecond}} {
		if got := saturationLatency(c.env); got != c.want {
			t.Errorf("MCPFLEET_SATURATION_LATENCY=%v: actors threshold %v, want %v", c.env, got, c.want)
		}
	}
}
