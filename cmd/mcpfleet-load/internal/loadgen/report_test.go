package loadgen_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

// goodSummary returns the figures of a run that meets every target it can measure, against a
// reference run.
func goodSummary() *loadgen.Summary {
	s := baseSummary()
	ref := baseSummary()
	ref.Peak.RatePerSecond = 10_000
	ref.CPU = loadgen.CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 120, DatabaseMeasured: true, DatabaseCPUSeconds: 240} // 0.6 ms per heartbeat
	s.Reference = ref
	return s
}

// baseSummary: 250,000 servers, 0.15 ms of service and 0.025 ms of PostgreSQL CPU per heartbeat, the
// no-op server at 0.075 ms per request.
func baseSummary() *loadgen.Summary {
	return &loadgen.Summary{
		Config: loadgen.RunConfig{BaseURL: "http://127.0.0.1:8080", N: 250_000, IntervalSeconds: 10, JitterSeconds: 1,
			RampPerSecond: 5000, SteadySeconds: 60, Connections: 128, PeakWorkers: 64, PeakSeconds: 10, GoVersion: "go1.26", GOMAXPROCS: 2, NumCPU: 2},
		Registration: loadgen.RegistrationSummary{Attempted: 250_000, Registered: 250_000, Created: 250_000, Seconds: 50,
			RatePerSecond: 5000, FirstRegistered: 100_000, FirstSeconds: 20, P50Ms: 1.2, P99Ms: 8.5, MaxMs: 30},
		Steady: loadgen.PhaseSummary{Seconds: 60, Sent: 600_000, OK: 600_000, RatePerSecond: 10_000, ExpectedRatePerSecond: 10_000,
			P50Ms: 0.8, P90Ms: 1.5, P99Ms: 4.2, P999Ms: 12, MaxMs: 40, ScheduleLagP99Ms: 1, ScheduleLagMaxMs: 9},
		Sweep:               loadgen.SweepSummary{Done: true},
		Peak:                loadgen.PhaseSummary{Seconds: 10, Sent: 300_000, OK: 300_000, RatePerSecond: 30_000, P99Ms: 9},
		Ceiling:             loadgen.PhaseSummary{Seconds: 10, Sent: 400_000, OK: 400_000, RatePerSecond: 40_000, P99Ms: 5},
		CeilingCPU:          loadgen.CeilingCPU{Measured: true, Seconds: 30},
		NoopSteady:          loadgen.PhaseSummary{Seconds: 20, Sent: 200_000, OK: 200_000, RatePerSecond: 10_000, ExpectedRatePerSecond: 10_000, P99Ms: 2},
		NoopSteadyCPU:       loadgen.CeilingCPU{Measured: true, Seconds: 15},
		CeilingRatioPercent: 75,
		CPU:                 loadgen.CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 90, DatabaseMeasured: true, DatabaseCPUSeconds: 15},
		RSS:                 loadgen.RSSSummary{Measured: true, PID: 42, BeforeKiB: 50_000, AfterKiB: 675_000, PerServerKiB: 2.5},
		Deregistration:      loadgen.DeregistrationSummary{Attempted: 250_000, Deregistered: 250_000, Seconds: 50},
		Heap:                loadgen.HeapSummary{Measured: true, BeforeBytes: 20 << 20, AfterBytes: 20<<20 + 250_000*1536, PerServerBytes: 1536},
		ColdStart:           loadgen.ColdStartSummary{Measured: true, Servers: 250_000, Seconds: 1.5, RSSAtReadyKiB: 400_000},
		Tracing: loadgen.TracingSummary{Measured: true, Exports: 10, ExportBytes: 4096, Runs: []loadgen.TracingRun{
			{Name: "off", ReadySeconds: 1.5, Peak: loadgen.PhaseSummary{Seconds: 10, OK: 300_000, RatePerSecond: 30_000}},
			{Name: "1 % parent-based", Env: []string{"OTEL_TRACES_SAMPLER=parentbased_traceidratio"}, ReadySeconds: 1.6, Peak: loadgen.PhaseSummary{Seconds: 10, OK: 297_000, RatePerSecond: 29_700}},
			{Name: "100 % (always_on)", Env: []string{"OTEL_TRACES_SAMPLER=always_on"}, ReadySeconds: 1.6, Peak: loadgen.PhaseSummary{Seconds: 10, OK: 270_000, RatePerSecond: 27_000}},
		}},
	}
}

func results(s *loadgen.Summary) map[string]string {
	out := map[string]string{}
	for _, t := range s.Targets {
		out[t.Name] = t.Result
	}
	return out
}

func TestTargets(t *testing.T) {
	const (
		fleet, p99, errs, falseT = "fleet size at H = 10 s", "steady heartbeat p99 latency", "errors (registration and steady heartbeats)", "false transitions"
		heap, rss, reg           = "live heap per server (heap profile)", "service RSS growth per server", "registration rate"
		full, ratio, cold        = "heartbeat throughput with tracing on at 100 % sampling vs off", "heartbeat throughput with tracing at 1 % parent-based vs off", "cold start: serve to ready with the fleet in PostgreSQL"
		cpuNoop, peakRef, cpuRef = "service CPU per heartbeat ÷ no-op CPU per request", "closed-loop peak vs the naive reference", "total CPU per heartbeat vs the naive reference"
	)
	notMet, unmeasured := loadgen.ResultNotMet, loadgen.ResultNotMeasured
	tests := []struct {
		name   string
		change func(*loadgen.Summary)
		want   map[string]string // the targets expected not to be met; the others are met
	}{
		{"all met", func(*loadgen.Summary) {}, nil},
		{"too few servers", func(s *loadgen.Summary) { s.Registration.Registered = 249_999 }, map[string]string{fleet: notMet}},
		{"other interval", func(s *loadgen.Summary) { s.Config.IntervalSeconds = 5 }, map[string]string{fleet: notMet}},
		{"fleet not held", func(s *loadgen.Summary) { s.Steady.RatePerSecond = 9_899 }, map[string]string{fleet: notMet}},
		{"slow p99", func(s *loadgen.Summary) { s.Steady.P99Ms = 50 }, map[string]string{p99: notMet, fleet: notMet}},
		{"one error", func(s *loadgen.Summary) { s.Steady.Errors.Total = 1 }, map[string]string{errs: notMet, fleet: notMet}},
		{"registration error", func(s *loadgen.Summary) { s.Registration.Errors.Total = 1 }, map[string]string{errs: notMet, fleet: notMet}},
		// Attempts tried again that then registered are not errors: a module retrying is what modules do.
		{"registration attempts tried again", func(s *loadgen.Summary) {
			s.Registration.Retried = loadgen.ErrorSummary{Total: 5, ByKind: map[string]uint64{"timeout": 5}}
		}, nil},
		{"false answer", func(s *loadgen.Summary) { s.Steady.NonHealthyOnTime = 1 }, map[string]string{falseT: notMet, fleet: notMet}},
		{"false in sweep", func(s *loadgen.Summary) { s.Sweep.OnTimeNonHealthy = 2 }, map[string]string{falseT: notMet, fleet: notMet}},
		{"sweep failed", func(s *loadgen.Summary) { s.Sweep = loadgen.SweepSummary{Error: "403"} }, map[string]string{falseT: unmeasured}},
		{"no ceiling", func(s *loadgen.Summary) { s.Ceiling, s.NoopSteady = loadgen.PhaseSummary{}, loadgen.PhaseSummary{} }, map[string]string{cpuNoop: unmeasured}},
		{"fat heap", func(s *loadgen.Summary) { s.Heap.PerServerBytes = 2.51 * 1024 }, map[string]string{heap: notMet}},
		{"no profiler", func(s *loadgen.Summary) { s.Heap = loadgen.HeapSummary{} }, map[string]string{heap: unmeasured}},
		{"tracing costs 16 %", func(s *loadgen.Summary) { s.Tracing.Runs[2].Peak.RatePerSecond = 25_200 }, map[string]string{full: notMet}},
		{"1 % tracing costs 2.1 %", func(s *loadgen.Summary) { s.Tracing.Runs[1].Peak.RatePerSecond = 29_370 }, map[string]string{ratio: notMet}},
		{"no restarts", func(s *loadgen.Summary) {
			s.Tracing = loadgen.TracingSummary{}
			s.ColdStart = loadgen.ColdStartSummary{}
		},
			map[string]string{full: unmeasured, ratio: unmeasured, cold: unmeasured}},
		{"slow cold start", func(s *loadgen.Summary) { s.ColdStart.Seconds = 2.01 }, map[string]string{cold: notMet}},
		{"cold start of a smaller fleet", func(s *loadgen.Summary) { s.ColdStart.Servers = 100_000 }, map[string]string{cold: notMet}},
		// The cold-start step, when it measured a restart, is what the target is judged by: its slowest
		// restart at its own fleet's size, whatever the run's own restart measured.
		{"the step's restarts all in time, the run's own fleet smaller", func(s *loadgen.Summary) {
			s.ColdStart.Servers = 238_367
			s.ColdStartStep = &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, ReadySeconds: []float64{1.2, 2.0, 1.4}}
		}, nil},
		{"the step's slowest restart late", func(s *loadgen.Summary) {
			s.ColdStartStep = &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, ReadySeconds: []float64{1.2, 2.01, 1.4}}
		}, map[string]string{cold: notMet}},
		{"the step's fleet smaller", func(s *loadgen.Summary) {
			s.ColdStartStep = &loadgen.ColdStartStep{Servers: 249_999, Runs: 3, ReadySeconds: []float64{1.2, 1.3, 1.4}}
		}, map[string]string{cold: notMet}},
		{"the step measured no restart: the run's own judged", func(s *loadgen.Summary) {
			s.ColdStart.Seconds = 2.01
			s.ColdStartStep = &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, Error: "restart 1: the service exited before it was ready"}
		}, map[string]string{cold: notMet}},
		{"the step measured no restart, the run none either", func(s *loadgen.Summary) {
			s.ColdStart = loadgen.ColdStartSummary{}
			s.ColdStartStep = &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, Error: "restart 1: the service exited before it was ready"}
		}, map[string]string{cold: unmeasured}},
		{"fat servers", func(s *loadgen.Summary) { s.RSS.PerServerKiB = 2.51 }, map[string]string{rss: notMet}},
		{"no pid", func(s *loadgen.Summary) { s.RSS = loadgen.RSSSummary{} }, map[string]string{rss: unmeasured}},
		{"slow registration to 100,000", func(s *loadgen.Summary) { s.Registration.FirstSeconds = 20.01 }, map[string]string{reg: notMet}},
		{"a slow whole fleet after 100,000 in 20 s", func(s *loadgen.Summary) { s.Registration.RatePerSecond = 2000 }, map[string]string{}},
		{"100,000 never reached", func(s *loadgen.Summary) {
			s.Registration.Registered, s.Registration.FirstSeconds = 99_999, 0
		}, map[string]string{reg: notMet, fleet: notMet}},
		{"a fleet smaller than 100,000 judged whole", func(s *loadgen.Summary) {
			s.Registration.Registered, s.Registration.FirstRegistered, s.Registration.FirstSeconds = 50_000, 50_000, 10.01
		}, map[string]string{reg: notMet, fleet: notMet}},
		{"service CPU 3× the no-op's at the steady rate", func(s *loadgen.Summary) { s.NoopSteadyCPU.Seconds = 10 }, map[string]string{cpuNoop: notMet}},
		{"service CPU 3× the no-op's closed loop only", func(s *loadgen.Summary) { s.CeilingCPU.Seconds = 10 }, map[string]string{}},
		{"no-op CPU not read", func(s *loadgen.Summary) { s.NoopSteadyCPU = loadgen.CeilingCPU{} }, map[string]string{cpuNoop: unmeasured}},
		{"no-op not driven at the steady rate", func(s *loadgen.Summary) { s.NoopSteady = loadgen.PhaseSummary{} }, map[string]string{cpuNoop: unmeasured}},
		{"service CPU not read", func(s *loadgen.Summary) { s.CPU.ServiceMeasured = false }, map[string]string{cpuNoop: unmeasured, cpuRef: unmeasured}},
		{"peak 2.49× the reference's", func(s *loadgen.Summary) { s.Reference.Peak.RatePerSecond = 12_050 }, map[string]string{peakRef: notMet}},
		{"CPU 0.39× the reference's", func(s *loadgen.Summary) { s.Reference.CPU.DatabaseCPUSeconds = 150 }, map[string]string{cpuRef: notMet}},
		{"reference's PostgreSQL CPU not read", func(s *loadgen.Summary) { s.Reference.CPU.DatabaseMeasured = false }, map[string]string{cpuRef: unmeasured}},
		{"no reference", func(s *loadgen.Summary) { s.Reference = nil }, map[string]string{peakRef: unmeasured, cpuRef: unmeasured}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodSummary()
			tt.change(s)
			s.Evaluate()
			got := results(s)
			if len(got) != 13 {
				t.Fatalf("targets = %v, want 13", got)
			}
			want := map[string]string{}
			for n, r := range tt.want {
				want[n] = r
			}
			for name, res := range got {
				w, ok := want[name]
				if !ok {
					w = loadgen.ResultMet
				}
				if res != w {
					t.Errorf("%s = %s, want %s", name, res, w)
				}
			}
			if s.AllMet != (len(tt.want) == 0) {
				t.Errorf("AllMet = %v, want %v", s.AllMet, len(tt.want) == 0)
			}
		})
	}
}

// With more than one run of each kind, a tracing target also says how far one run strayed, and how
// far off's own runs strayed from their mean: the noise its verdict stands in.
func TestTracingTargetsShowTheSpread(t *testing.T) {
	s := goodSummary()
	rate := func(r float64) loadgen.TracingRun {
		return loadgen.TracingRun{Peak: loadgen.PhaseSummary{Seconds: 10, OK: uint64(10 * r), RatePerSecond: r}}
	}
	// off, 1 %, 100 %, off, 100 %, 1 %, off: off's mean 30,000.
	s.Tracing.Runs = []loadgen.TracingRun{rate(27_000), rate(29_100), rate(25_500), rate(33_000), rate(27_600), rate(30_000), rate(30_000)}
	s.Evaluate()
	measured := map[string]string{}
	for _, tg := range s.Targets {
		measured[tg.Name] = tg.Measured
	}
	for name, want := range map[string]string{
		"heartbeat throughput with tracing on at 100 % sampling vs off": "88.5 % (2 runs, 26550 vs 30000 heartbeats/s; single runs 85–92 %, off's own 90–110 % of their mean)",
		"heartbeat throughput with tracing at 1 % parent-based vs off":  "98.5 % (2 runs, 29550 vs 30000 heartbeats/s; single runs 97–100 %, off's own 90–110 % of their mean)",
	} {
		if measured[name] != want {
			t.Errorf("%s: measured %q, want %q", name, measured[name], want)
		}
	}
}

// The cold-start target's cell names every restart of the step and the run's own figure beside it,
// and what stopped the step when it measured none.
func TestColdStartTargetText(t *testing.T) {
	const cold = "cold start: serve to ready with the fleet in PostgreSQL"
	for _, tt := range []struct {
		name string
		step *loadgen.ColdStartStep
		want string
	}{
		{"no step", nil, "1.50 s at 250,000 servers"},
		{"the step", &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, ReadySeconds: []float64{1.234, 1.9, 1.5}},
			"1.90 s at 250,000 servers (the slowest of 3 restarts: 1.23, 1.90, 1.50 s); this run's fleet: 1.50 s at 250,000 servers"},
		{"the step stopped after one restart", &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, ReadySeconds: []float64{1.7}, Error: "restart 2: boom"},
			"1.70 s at 250,000 servers (the slowest of 1 restarts: 1.70 s); this run's fleet: 1.50 s at 250,000 servers"},
		{"the step measured none", &loadgen.ColdStartStep{Servers: 250_000, Runs: 3, Error: "restart 1: boom"},
			"1.50 s at 250,000 servers (cold-start step: restart 1: boom)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := goodSummary()
			s.ColdStartStep = tt.step
			s.Evaluate()
			for _, tg := range s.Targets {
				if tg.Name == cold && tg.Measured != tt.want {
					t.Errorf("measured %q, want %q", tg.Measured, tt.want)
				}
			}
			var b strings.Builder
			if err := loadgen.WriteMarkdown(&b, s); err != nil {
				t.Fatal(err)
			}
			md := b.String()
			if got := strings.Contains(md, "- The cold-start step runs before the load run"); got != (tt.step != nil) {
				t.Errorf("the report explains the cold-start step: %v, want %v", got, tt.step != nil)
			}
			if tt.step == nil {
				return
			}
			for i, v := range tt.step.ReadySeconds {
				if row := fmt.Sprintf("| cold-start step | restart %d: serve to ready | %.2f | s |", i+1, v); !strings.Contains(md, row) {
					t.Errorf("no row %q", row)
				}
			}
		})
	}
}

func TestWriteMarkdown(t *testing.T) {
	s := goodSummary()
	s.Steady.P99Ms = 61.25
	s.Steady.Errors = loadgen.ErrorSummary{Total: 3, ByKind: map[string]uint64{"HTTP 503 overloaded": 2, "timeout": 1}}
	s.Registration.Retried = loadgen.ErrorSummary{Total: 1204, ByKind: map[string]uint64{"timeout": 1200, "HTTP 503 unavailable": 4}}
	s.Notes = []string{"a note | with a pipe"}
	s.Evaluate()
	var b strings.Builder
	if err := loadgen.WriteMarkdown(&b, s); err != nil {
		t.Fatalf("WriteMarkdown: %v", err)
	}
	md := b.String()
	for _, want := range []string{
		"# mcpfleet load report",
		"N = 250,000 modules, H = 10s",
		"Not all targets met.",
		"| target | threshold | measured | result |",
		"| fleet size at H = 10 s | ≥ 250,000 servers held every 10s (p99 < 50 ms, 0 errors, 0 false transitions) | 250,000 servers registered, not held every 10s: p99 61.25 ms, 3 errors | **NOT met** |",
		"| steady heartbeat p99 latency | < 50 ms | 61.25 ms | **NOT met** |",
		"| errors (registration and steady heartbeats) | 0 | 3 (0 registration, 3 heartbeat); besides, 1,204 failed registration attempts were tried again (Errors by kind) | **NOT met** |",
		"| registration, attempts tried again | timeout | 1,200 |",
		"| registration, attempts tried again | HTTP 503 unavailable | 4 |",
		"| false transitions | 0 | 0 (0 non-healthy answers, 0 servers seen by sweeps) | met |",
		"| heartbeat throughput with tracing on at 100 % sampling vs off | ≥ 85 % | 90.0 % (1 run, 27000 vs 30000 heartbeats/s) | met |",
		"| heartbeat throughput with tracing at 1 % parent-based vs off | ≥ 98 % | 99.0 % (1 run, 29700 vs 30000 heartbeats/s) | met |",
		"| live heap per server (heap profile) | ≤ 2.5 KiB | 1.50 KiB | met |",
		"| memory | live heap per registered server | 1.50 | KiB/server |",
		"| cold start | serve to ready with 250,000 servers in PostgreSQL | 1.50 | s |",
		"| tracing 100 % (always_on) | throughput vs tracing off | 90.0 | % |",
		"| service RSS growth per server | ≤ 2.5 KiB | 2.50 KiB | met |",
		"| registration rate | ≥ 5,000 registrations/s, sustained to 100,000 | 5000 registrations/s (100,000 in 20.0 s); the whole fleet: 5000/s (250,000 in 50.0 s) | met |",
		"| registration | the first 100,000: duration / rate | 20.0 / 5000.0 | s, registrations/s |",
		"| service CPU per heartbeat ÷ no-op CPU per request | ≤ 2.5× | 2.00× (0.150 ms ÷ 0.075 ms) | met |",
		"| closed-loop peak vs the naive reference | ≥ 2.5× | 3.00× (30000 vs 10000 heartbeats/s) | met |",
		"| total CPU per heartbeat vs the naive reference | ≤ 0.35× | 0.29× (0.175 vs 0.600 ms, service + PostgreSQL) | met |",
		"| cold start: serve to ready with the fleet in PostgreSQL | ≤ 2 s at 250,000 servers | 1.50 s at 250,000 servers | met |",
		"| ceiling | no-op server CPU per request (closed loop) | 0.075 | ms |",
		"| no-op at the steady rate | no-op server CPU per request (the CPU target's divisor) | 0.075 | ms |",
		"| steady | heartbeat rate achieved | 10000.0 | heartbeats/s |",
		"| steady | latency p99 | 61.25 | ms |",
		"| memory | RSS growth per registered server | 2.50 | KiB/server |",
		"| ceiling | no-op gin server rate | 40000.0 | requests/s |",
		"| steady | HTTP 503 overloaded | 2 |",
		"| steady | timeout | 1 |",
		"- a note | with a pipe",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n---\n%s", want, md)
		}
	}
	// Every table row has as many cells as its table's header.
	cells := 0
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cells = 0
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if cells == 0 {
			cells = n
		} else if n != cells {
			t.Errorf("row %q has %d separators, its header %d", line, n, cells)
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := loadgen.Thousands(in); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestReportAgainstReference: the report sets the reference run's figures beside the service's, CPU per
// heartbeat split into service and PostgreSQL, with the ratios the targets are stated in, and "—" for
// what a run did not measure.
func TestReportAgainstReference(t *testing.T) {
	s := goodSummary()
	s.CPU = loadgen.CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 90, DatabaseMeasured: true, DatabaseCPUSeconds: 15, DatabaseBackends: 16}
	ref := baseSummary()
	ref.Steady.RatePerSecond, ref.Steady.P99Ms = 9_000, 32.3
	ref.Peak.RatePerSecond = 12_000
	ref.CPU = loadgen.CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 75, DatabaseMeasured: true, DatabaseCPUSeconds: 120}
	ref.RSS = loadgen.RSSSummary{}
	s.Reference = ref
	s.Evaluate()
	var b strings.Builder
	if err := loadgen.WriteMarkdown(&b, s); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Against the naive reference",
		"| figure | mcpfleet | reference | unit |",
		"| steady heartbeat rate achieved (N/H = 10000) | 10000.0 | 9000.0 | heartbeats/s |",
		"| steady latency p99 | 4.20 | 32.30 | ms |",
		"| closed-loop peak (steady underneath) | 30000.0 | 12000.0 | heartbeats/s |",
		"| service CPU per heartbeat | 0.150 | 0.125 | ms |",
		"| PostgreSQL CPU per heartbeat (its database's backends) | 0.025 | 0.200 | ms |",
		"| total CPU per heartbeat | 0.175 | 0.325 | ms |",
		"| service RSS growth per server | 2.50 | — | KiB/server |",
		"mcpfleet's closed-loop peak is 2.50× the reference's; its total CPU per heartbeat is 0.54× the reference's.",
		"| steady | PostgreSQL CPU per heartbeat (16 backends of the service's database) | 0.025 | ms |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n---\n%s", want, md)
		}
	}
	s.Reference.CPU.DatabaseMeasured = false
	b.Reset()
	if err := loadgen.WriteMarkdown(&b, s); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); !strings.Contains(md, "| total CPU per heartbeat | 0.175 | — | ms |") || strings.Contains(md, "total CPU per heartbeat is") {
		t.Errorf("a reference without PostgreSQL CPU still got a total or a ratio:\n%s", md)
	}
}
