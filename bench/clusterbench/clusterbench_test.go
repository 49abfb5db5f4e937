package main

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every module is due exactly once per period, at its own phase, whatever n and the period.
func TestDueRangeSpreadsEveryModuleOncePerPeriod(t *testing.T) {
	for _, c := range []struct {
		n int
		p int64
	}{{1, 1000}, {7, 3}, {5000, 1000}, {100_000, 1000}, {999, 1000}, {1000, 1000}, {3, 2}} {
		seen := make([]int, c.n)
		next := 0
		for tick := 3 * c.p; tick < 4*c.p; tick++ { // any period: the schedule repeats
			lo, hi := dueRange(c.n, c.p, tick)
			if lo != next {
				t.Fatalf("n=%d p=%d tick %d: modules %d..%d due, want to start at %d", c.n, c.p, tick, lo, hi, next)
			}
			for i := lo; i < hi; i++ {
				seen[i]++
			}
			next = hi
		}
		for i, k := range seen {
			if k != 1 {
				t.Fatalf("n=%d p=%d: module %d due %d times in a period", c.n, c.p, i, k)
			}
		}
		// No tick holds more than its share, rounded up.
		for tick := int64(0); tick < c.p; tick++ {
			lo, hi := dueRange(c.n, c.p, tick)
			if hi-lo > (c.n+int(c.p)-1)/int(c.p) {
				t.Fatalf("n=%d p=%d tick %d: %d modules due", c.n, c.p, tick, hi-lo)
			}
		}
	}
}

func TestQuantileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {0.999, 100 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := quantile(d, c.q); got != c.want {
			t.Errorf("quantile(1..100 ms, %v) = %s, want %s", c.q, got, c.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %s", got)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 150, stime 50 ticks.
	stat := "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 8 0 100 1000 200"
	got, err := parseStatCPU(stat)
	if err != nil || got != 2*time.Second {
		t.Fatalf("parseStatCPU = %s, %v; want 2s", got, err)
	}
	if _, err := parseStatCPU("1234 no parenthesis"); err == nil {
		t.Fatal("a stat line without a command name parsed")
	}
}

func TestBackendCPUSince(t *testing.T) {
	before := backendCPU{1: time.Second, 2: 2 * time.Second, 3: time.Second}
	after := backendCPU{1: 3 * time.Second, 2: 2 * time.Second, 4: 500 * time.Millisecond}
	cpu, exited := after.since(before)
	if cpu != 2500*time.Millisecond || exited != 1 {
		t.Fatalf("since = %s, %d exited; want 2.5s (growth of 1, all of new 4), 1 exited (3)", cpu, exited)
	}
}

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		err    error
		want   string
	}{
		{503, `{"type":"https://mcpfleet.dev/problems/unavailable","title":"x"}`, nil, "HTTP 503 unavailable"},
		{500, `oops`, nil, "HTTP 500"},
		{0, "", syscall.ECONNREFUSED, "connection refused"},
		{0, "", errors.New("weird"), "transport"},
	} {
		if got := errorKind(c.status, []byte(c.body), c.err); got != c.want {
			t.Errorf("errorKind(%d, %q, %v) = %q, want %q", c.status, c.body, c.err, got, c.want)
		}
	}
}

func TestCount64(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567"} {
		if got := count64(n); got != want {
			t.Errorf("count64(%d) = %q, want %q", n, got, want)
		}
	}
}

// A forwarded heartbeat's extra cost is derived from the cluster and the baseline; with M nodes (M−1)/M
// of heartbeats are forwarded.
func TestPaperNodeCost(t *testing.T) {
	r := &results{cpus: 2, interval: 10 * time.Second, nodes: 3, baselineDone: true}
	r.steady = phaseFigures{sent: 300, forwarded: 200}
	r.steadyCPU = cpuFigures{nodeSeconds: []float64{0.1, 0.1, 0.1}, heartbeats: 1000} // 0.3 ms per heartbeat
	r.baselineCPU = cpuFigures{nodeSeconds: []float64{0.1}, heartbeats: 1000}         // 0.1 ms
	p := r.paper()
	if diff(p.fwdExtra, 0.3) > 1e-9 { // (0.3 − 0.1) / (2/3)
		t.Fatalf("forwarding costs %v ms more, want 0.3", p.fwdExtra)
	}
	if got := p.nodeCost(1); diff(got, 0.1) > 1e-9 {
		t.Errorf("one node: %v ms per heartbeat, want the baseline's 0.1", got)
	}
	if got := p.nodeCost(3); diff(got, 0.3) > 1e-9 {
		t.Errorf("three nodes: %v ms per heartbeat, want the measured 0.3", got)
	}
	held, _ := p.servers(1) // 2 cores × 1000 ms × 50 % / 0.1 ms = 10,000/s × 10 s
	if diff(held, 100_000) > 1e-6 {
		t.Errorf("one node holds %v servers, want 100,000", held)
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

// A run smaller than the benchmark says so at the top; a missed target is marked.
func TestReportMarksSmokeRunsAndShortfalls(t *testing.T) {
	r := &results{started: time.Now(), n: 5000, nodes: 3, interval: 10 * time.Second, duration: 15 * time.Second, cpus: 2,
		load: [2]string{"9.50 8.00 7.00", "10.00 9.00 8.00"}}
	r.reg.registered = 5000
	r.steady = phaseFigures{name: "steady", seconds: 15, sent: 7500, ok: 7400, rate: 493, expected: 500, p99: 80 * time.Millisecond,
		errs: map[string]uint64{"HTTP 503 unavailable": 100}}
	md := r.markdown()
	head := md[:min(len(md), 400)]
	if !strings.Contains(head, "SMOKE RUN") {
		t.Errorf("a run of N = 5,000 for 15 s does not say it is a smoke run at the top:\n%s", head)
	}
	for _, want := range []string{"| steady heartbeat errors | 0 | 100 | **NOT met** |", "9.50 8.00 7.00", "It was loaded",
		"HTTP 503 unavailable × 100", "## On paper", "## What fell short", "- 100 steady heartbeat errors."} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "fell behind its schedule") {
		t.Error("a run whose client kept its schedule is said to have fallen behind")
	}
	r.steady.lagP99 = 5 * time.Second // H/2: modules heartbeat late, their transitions are no false alarm
	if md := r.markdown(); !strings.Contains(md, "fell behind its schedule") {
		t.Error("a run whose client lagged 5 s at H = 10 s does not say so")
	}
	r.n, r.duration, r.kill.done, r.baselineDone = fullN, fullDuration, true, true
	if smoke, why := r.smoke(); smoke {
		t.Errorf("a full run is called a smoke run: %s", why)
	}
}
