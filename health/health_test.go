package health_test

import (
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/health"
)

func TestForLagBoundaries(t *testing.T) {
	th := health.Thresholds{Interval: 10 * time.Second}
	for _, tc := range []struct {
		lag  time.Duration
		want health.Status
	}{
		{0, health.Healthy},
		{10 * time.Second, health.Healthy}, // one miss
		{20*time.Second - time.Nanosecond, health.Healthy},
		{20 * time.Second, health.Degraded}, // two misses
		{30*time.Second - time.Nanosecond, health.Degraded},
		{30 * time.Second, health.Unhealthy}, // three misses
		{time.Hour, health.Unhealthy},
	} {
		if got := th.ForLag(tc.lag); got != tc.want {
			t.Errorf("ForLag(%v) = %s, want %s", tc.lag, got, tc.want)
		}
	}
}

func TestMonitorOnlyDegrades(t *testing.T) {
	th := health.Thresholds{Interval: time.Second}
	if s, ch := th.MonitorVerdict(health.Unhealthy, 0); ch || s != health.Unhealthy {
		t.Fatalf("monitor recovered an unhealthy server without evidence: %s %v", s, ch)
	}
	if s, ch := th.MonitorVerdict(health.Degraded, 0); ch || s != health.Degraded {
		t.Fatalf("monitor recovered a degraded server without evidence: %s %v", s, ch)
	}
	if s, ch := th.MonitorVerdict(health.Deregistered, time.Hour); ch || s != health.Deregistered {
		t.Fatalf("monitor touched a deregistered server: %s %v", s, ch)
	}
	if s, ch := th.MonitorVerdict(health.Healthy, 3*time.Second); !ch || s != health.Unhealthy {
		t.Fatalf("healthy at 3H: got %s %v", s, ch)
	}
}

func TestParseClosedEnum(t *testing.T) {
	if len(health.Statuses()) != 4 {
		t.Fatalf("status enum has %d values, want 4", len(health.Statuses()))
	}
	for _, s := range health.Statuses() {
		if _, err := health.Parse(string(s)); err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		}
	}
	for _, bad := range []string{"", "HEALTHY", "down", "importing"} {
		if _, err := health.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a value outside the enum", bad)
		}
	}
	mine := health.Statuses()
	mine[0] = "down"
	if got := health.Statuses()[0]; got != health.Healthy {
		t.Fatalf("a caller's edit reached the enum: first status is now %q", got)
	}
}
