package loadgen

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

func TestParseInUse(t *testing.T) {
	// Two records at MemProfileRate 512 KiB (heap/1048576): 1,000 objects of 512 KiB, each sampled with
	// probability 1-e^-1, and 4 objects of 64 bytes standing for 256/(1-e^-(64/524288)) bytes.
	profile := "heap profile: 1004: 524288256 [2000: 1048576512] @ heap/1048576\n" +
		"1000: 524288000 [2000: 1048576000] @ 0x1 0x2\n#\t0x1\tmain.f+0x1\n\n" +
		"4: 256 [4: 256] @ 0x3\n\n# runtime.MemStats\n# HeapAlloc = 99999999999\n"
	want := 524288000/(1-math.Exp(-1)) + 256/(1-math.Exp(-64.0/524288))
	if n, err := parseInUse(strings.NewReader(profile)); err != nil || math.Abs(float64(n)-want) > 1 {
		t.Fatalf("parseInUse = %d, %v; want %.0f (the records scaled, not HeapAlloc)", n, err, want)
	}
	for _, bad := range []string{"no header\n", "heap profile: 1: 2 [3: 4] @ heap/x\n", "heap profile: 1: 2 [3: 4] @ heap/2\n1: x [1: 1] @ 0x1\n"} {
		if _, err := parseInUse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestGone(t *testing.T) {
	if gone(os.Getpid()) {
		t.Fatal("this process is gone")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	_, _ = cmd.Process.Wait()
	if !gone(pid) {
		t.Fatalf("pid %d is not gone after it exited", pid)
	}
}

func TestDiscardCollector(t *testing.T) {
	c, err := startDiscardCollector()
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	res, err := http.Post(c.url+"/v1/traces", "application/x-protobuf", strings.NewReader("spans"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || c.requests.Load() != 1 || c.bytes.Load() != 5 {
		t.Fatalf("answered %d, counted %d requests, %d bytes", res.StatusCode, c.requests.Load(), c.bytes.Load())
	}
}

func TestThroughputVsOff(t *testing.T) {
	s := TracingSummary{Measured: true, Runs: []TracingRun{{Peak: PhaseSummary{OK: 1, RatePerSecond: 200}}, {Peak: PhaseSummary{OK: 1, RatePerSecond: 170}}}}
	if p, ok := s.ThroughputVsOff(1); !ok || p != 85 {
		t.Fatalf("ThroughputVsOff(1) = %v, %v", p, ok)
	}
	if _, ok := s.ThroughputVsOff(2); ok {
		t.Fatal("a run not made is measured")
	}
	// With the next tracing-off run (off, 1 %, 100 %, off, 100 %, 1 %), the comparison is with the mean of both.
	rate := func(r float64) TracingRun { return TracingRun{Peak: PhaseSummary{OK: 1, RatePerSecond: r}} }
	s.Runs = append(s.Runs, rate(190), rate(180), rate(150), rate(150))
	if p, ok := s.ThroughputVsOff(2); !ok || p != 100 {
		t.Fatalf("ThroughputVsOff(2) against off 200 and 180 = %v, %v", p, ok)
	}
	s.Measured = false
	if _, ok := s.ThroughputVsOff(1); ok {
		t.Fatal("an unfinished comparison is measured")
	}
}

func TestCPUVsOff(t *testing.T) {
	run := func(ok uint64, cpu float64) TracingRun {
		return TracingRun{Peak: PhaseSummary{OK: ok}, ServiceCPUMeasured: true, ServiceCPUSeconds: cpu}
	}
	// off: 0.1 ms per heartbeat; 100 %: 0.13 ms.
	s := TracingSummary{Measured: true, Runs: []TracingRun{run(10_000, 1), run(10_000, 1.3)}}
	if c, ok := s.Runs[1].CPUPerHeartbeat(); !ok || !near(c, 0.13) {
		t.Fatalf("CPUPerHeartbeat = %v, %v, want 0.13 ms", c, ok)
	}
	if p, ok := s.CPUVsOff(1); !ok || !near(p, 130) {
		t.Fatalf("CPUVsOff(1) = %v, %v, want 130 %%", p, ok)
	}
	// With the next tracing-off run (0.12 ms; off, 1 %, 100 %, off, 100 %, 1 %), the comparison is with
	// the mean of both off runs, 0.11 ms.
	s.Runs = append(s.Runs, run(10_000, 1.1), run(10_000, 1.2), run(10_000, 1.5), run(10_000, 1.0))
	if p, ok := s.CPUVsOff(2); !ok || !near(p, 100) {
		t.Fatalf("CPUVsOff(2) against off 0.10 and 0.12 ms = %v, %v, want 100 %%", p, ok)
	}
	s.Runs[2].ServiceCPUMeasured = false
	if _, ok := s.CPUVsOff(2); ok {
		t.Fatal("a run whose CPU was not read is compared")
	}
	if _, ok := s.CPUVsOff(6); ok {
		t.Fatal("a run not made is compared")
	}
	s.Runs[0].ServiceCPUMeasured, s.Runs[3].ServiceCPUMeasured = false, false
	if _, ok := s.CPUVsOff(1); ok {
		t.Fatal("compared with no tracing-off CPU")
	}
}

// Counterbalanced runs: each tracing kind is judged on the mean of its runs against the mean of the
// tracing-off runs; before the second runs, on the one that ran.
func TestKindVsOff(t *testing.T) {
	run := func(rate, cpu float64) TracingRun {
		return TracingRun{Peak: PhaseSummary{OK: 10_000, RatePerSecond: rate}, ServiceCPUMeasured: true, ServiceCPUSeconds: cpu}
	}
	// off, 1 %, 100 %, off, 100 %, 1 %, …
	s := TracingSummary{Measured: true, Runs: []TracingRun{run(200, 1), run(185, 1.0), run(150, 1.8)}}
	if p, rate, n, ok := s.KindVsOff(kindFull); !ok || p != 75 || rate != 150 || n != 1 {
		t.Fatalf("after one run of each: KindVsOff(full) = %v %%, %v/s, %d runs, %v; want 75 %%, 150/s, 1", p, rate, n, ok)
	}
	s.Runs = append(s.Runs, run(180, 1.2), run(170, 2.2), run(195, 1.2))
	if p, rate, n, ok := s.KindVsOff(kindFull); !ok || !near(p, 100*160.0/190) || rate != 160 || n != 2 {
		t.Fatalf("KindVsOff(full) = %v %%, %v/s, %d runs, %v; want 84.2 %%, 160/s, 2", p, rate, n, ok)
	}
	if p, _, _, ok := s.KindVsOff(kindRatio); !ok || !near(p, 100) {
		t.Fatalf("KindVsOff(ratio) = %v, %v; want 100 %%", p, ok)
	}
	// CPU per heartbeat: off 0.10 and 0.12 ms (mean 0.11); 100 %: 0.18 and 0.22 (mean 0.20).
	if c, ok := s.KindCPUVsOff(kindFull); !ok || !near(c, 100*0.20/0.11) {
		t.Fatalf("KindCPUVsOff(full) = %v, %v; want 181.8 %%", c, ok)
	}
	if _, _, _, ok := s.KindVsOff("nothing"); ok {
		t.Fatal("a kind that never ran is compared")
	}
	s.Measured = false
	if _, _, _, ok := s.KindVsOff(kindFull); ok {
		t.Fatal("an unfinished comparison is judged")
	}
}

// KindSpread: each kind's lowest and highest run as a share of off's mean, and off's own runs against
// their mean; nothing for a kind that did not run or before the comparison is complete.
func TestKindSpread(t *testing.T) {
	rate := func(r float64) TracingRun { return TracingRun{Peak: PhaseSummary{OK: 1, RatePerSecond: r}} }
	// off, 1 %, 100 %, off, 100 %, 1 %, off: off's mean 200.
	s := TracingSummary{Measured: true, Runs: []TracingRun{rate(180), rate(190), rate(150), rate(220), rate(170), rate(210), rate(200)}}
	for _, tc := range []struct {
		kind   string
		lo, hi float64
		runs   int
	}{{kindOff, 90, 110, 3}, {kindRatio, 95, 105, 2}, {kindFull, 75, 85, 2}} {
		if lo, hi, n, ok := s.KindSpread(tc.kind); !ok || !near(lo, tc.lo) || !near(hi, tc.hi) || n != tc.runs {
			t.Errorf("KindSpread(%s) = %v–%v %%, %d runs, %v; want %v–%v %%, %d", tc.kind, lo, hi, n, ok, tc.lo, tc.hi, tc.runs)
		}
	}
	s.Runs[5].Peak.OK = 0 // a run that answered nothing is left out
	if lo, hi, n, ok := s.KindSpread(kindRatio); !ok || !near(lo, 95) || !near(hi, 95) || n != 1 {
		t.Errorf("KindSpread(ratio) without its silent run = %v–%v %%, %d runs, %v", lo, hi, n, ok)
	}
	if _, _, _, ok := s.KindSpread("nothing"); ok {
		t.Error("a kind that never ran has a spread")
	}
	s.Measured = false
	if _, _, _, ok := s.KindSpread(kindFull); ok {
		t.Error("an unfinished comparison has a spread")
	}
}

// The tracing runs are balanced: each tracing kind runs as often as the other, off begins (the cold
// start) and ends, every kind has the same mean position (a steady drift of the machine's speed cancels
// out of every comparison), and every kind follows each other kind equally often and never itself (what a
// run leaves behind for the next falls on all alike).
func TestTracingConfigsBalanced(t *testing.T) {
	pos, n := map[string]int{}, map[string]int{}
	follows := map[[2]string]int{}
	for i, c := range tracingConfigs {
		pos[c.kind] += i
		n[c.kind]++
		if i > 0 {
			follows[[2]string{tracingConfigs[i-1].kind, c.kind}]++
		}
	}
	last := len(tracingConfigs) - 1
	if len(n) != 3 || n[kindFull] != n[kindRatio] || tracingConfigs[0].kind != kindOff || tracingConfigs[last].kind != kindOff {
		t.Fatalf("runs per kind %v (want 1 %% as often as 100 %%; the first, the cold start, and the last off)", n)
	}
	for k := range n {
		// Equal mean positions: pos[k]/n[k] the same for every kind.
		if pos[k]*n[kindOff] != pos[kindOff]*n[k] {
			t.Fatalf("mean positions differ: summed %v over %v runs", pos, n)
		}
	}
	kinds := []string{kindOff, kindRatio, kindFull}
	for _, a := range kinds {
		for _, b := range kinds {
			if want := follows[[2]string{kindOff, kindRatio}]; (a == b && follows[[2]string{a, b}] != 0) || (a != b && follows[[2]string{a, b}] != want) {
				t.Fatalf("%s follows %s %d times; kinds follow one another %v", b, a, follows[[2]string{a, b}], follows)
			}
		}
	}
	if tracingConfigs[0].name != "off (1)" || tracingConfigs[last].name != "off (5)" {
		t.Fatalf("names %q … %q", tracingConfigs[0].name, tracingConfigs[last].name)
	}
}

// parseInUse on this process's own heap profile finds what it keeps live: 64 MiB in 1 KiB objects,
// sampled every 16 KiB on average (4,096 samples: a standard deviation of 1.6 %).
func TestParseInUseOfALiveHeap(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 16 << 10
	profile := func() int64 {
		runtime.GC()
		var b bytes.Buffer
		if err := pprof.Lookup("heap").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		n, err := parseInUse(&b)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := profile()
	keep := make([][]byte, 64<<10)
	for i := range keep {
		keep[i] = make([]byte, 1024)
	}
	grown := profile() - before
	runtime.KeepAlive(keep)
	if want := int64(64 << 20); grown < want*9/10 || grown > want*11/10 {
		t.Fatalf("live heap grew by %d bytes, want %d ± 10 %%", grown, want)
	}
}
