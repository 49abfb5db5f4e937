package loadgen_test

import (
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

// goodSummary returns the figures of a run that meets every target.
func goodSummary() *loadgen.Summary {
	return &loadgen.Summary{
		Config: loadgen.RunConfig{BaseURL: "http://127.0.0.1:8080", N: 100_000, IntervalSeconds: 10, JitterSeconds: 1,
			RampPerSecond: 5000, SteadySeconds: 60, Connections: 128, PeakWorkers: 64, PeakSeconds: 10, GoVersion: "go1.26", GOMAXPROCS: 2, NumCPU: 2},
		Registration: loadgen.RegistrationSummary{Attempted: 100_000, Registered: 100_000, Created: 100_000, Seconds: 20,
			RatePerSecond: 5000, P50Ms: 1.2, P99Ms: 8.5, MaxMs: 30},
		Steady: loadgen.PhaseSummary{Seconds: 60, Sent: 600_000, OK: 600_000, RatePerSecond: 10_000, ExpectedRatePerSecond: 10_000,
			P50Ms: 0.8, P90Ms: 1.5, P99Ms: 4.2, P999Ms: 12, MaxMs: 40, ScheduleLagP99Ms: 1, ScheduleLagMaxMs: 9},
		Sweep:               loadgen.SweepSummary{Done: true},
		Peak:                loadgen.PhaseSummary{Seconds: 10, Sent: 300_000, OK: 300_000, RatePerSecond: 30_000, P99Ms: 9},
		Ceiling:             loadgen.PhaseSummary{Seconds: 10, Sent: 400_000, OK: 400_000, RatePerSecond: 40_000, P99Ms: 5},
		CeilingRatioPercent: 75,
		RSS:                 loadgen.RSSSummary{Measured: true, PID: 42, BeforeKiB: 50_000, AfterKiB: 300_000, PerServerKiB: 2.5},
		Deregistration:      loadgen.DeregistrationSummary{Attempted: 100_000, Deregistered: 100_000, Seconds: 20},
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
	tests := []struct {
		name   string
		change func(*loadgen.Summary)
		target string // the one target expected not to be met; "" for all met
		want   string
	}{
		{"all met", func(*loadgen.Summary) {}, "", ""},
		{"too few servers", func(s *loadgen.Summary) { s.Registration.Registered = 99_999 }, "fleet size at H = 10 s", loadgen.ResultNotMet},
		{"other interval", func(s *loadgen.Summary) { s.Config.IntervalSeconds = 5 }, "fleet size at H = 10 s", loadgen.ResultNotMet},
		{"slow p99", func(s *loadgen.Summary) { s.Steady.P99Ms = 50 }, "steady heartbeat p99 latency", loadgen.ResultNotMet},
		{"one error", func(s *loadgen.Summary) { s.Steady.Errors.Total = 1 }, "errors (registration and steady heartbeats)", loadgen.ResultNotMet},
		{"registration error", func(s *loadgen.Summary) { s.Registration.Errors.Total = 1 }, "errors (registration and steady heartbeats)", loadgen.ResultNotMet},
		{"false answer", func(s *loadgen.Summary) { s.Steady.NonHealthyOnTime = 1 }, "false transitions", loadgen.ResultNotMet},
		{"false in sweep", func(s *loadgen.Summary) { s.Sweep.OnTimeNonHealthy = 2 }, "false transitions", loadgen.ResultNotMet},
		{"sweep failed", func(s *loadgen.Summary) { s.Sweep = loadgen.SweepSummary{Error: "403"} }, "false transitions", loadgen.ResultNotMeasured},
		{"low peak", func(s *loadgen.Summary) { s.CeilingRatioPercent = 59.9 }, "peak vs no-op ceiling", loadgen.ResultNotMet},
		{"no ceiling", func(s *loadgen.Summary) { s.Ceiling = loadgen.PhaseSummary{} }, "peak vs no-op ceiling", loadgen.ResultNotMeasured},
		{"fat servers", func(s *loadgen.Summary) { s.RSS.PerServerKiB = 4.01 }, "service RSS growth per server", loadgen.ResultNotMet},
		{"no pid", func(s *loadgen.Summary) { s.RSS = loadgen.RSSSummary{} }, "service RSS growth per server", loadgen.ResultNotMeasured},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodSummary()
			tt.change(s)
			s.Evaluate()
			got := results(s)
			if len(got) != 6 {
				t.Fatalf("targets = %v, want 6", got)
			}
			for name, res := range got {
				want := loadgen.ResultMet
				if name == tt.target {
					want = tt.want
				}
				if res != want {
					t.Errorf("%s = %s, want %s", name, res, want)
				}
			}
			if s.AllMet != (tt.target == "") {
				t.Errorf("AllMet = %v", s.AllMet)
			}
		})
	}
}

func TestWriteMarkdown(t *testing.T) {
	s := goodSummary()
	s.Steady.P99Ms = 61.25
	s.Steady.Errors = loadgen.ErrorSummary{Total: 3, ByKind: map[string]uint64{"HTTP 503 overloaded": 2, "timeout": 1}}
	s.Notes = []string{"a note | with a pipe"}
	s.Evaluate()
	var b strings.Builder
	if err := loadgen.WriteMarkdown(&b, s); err != nil {
		t.Fatalf("WriteMarkdown: %v", err)
	}
	md := b.String()
	for _, want := range []string{
		"# mcpfleet load report",
		"N = 100,000 modules, H = 10s",
		"Not all targets met.",
		"| target | threshold | measured | result |",
		"| fleet size at H = 10 s | ≥ 100,000 servers heartbeating every 10s | 100,000 servers every 10s | met |",
		"| steady heartbeat p99 latency | < 50 ms | 61.25 ms | **NOT met** |",
		"| errors (registration and steady heartbeats) | 0 | 3 (0 registration, 3 heartbeat) | **NOT met** |",
		"| false transitions | 0 | 0 (0 non-healthy answers, 0 servers seen by sweeps) | met |",
		"| peak vs no-op ceiling | ≥ 60 % | 75.0 % (30000 of 40000 per second) | met |",
		"| service RSS growth per server | ≤ 4 KiB | 2.50 KiB | met |",
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
	ref := goodSummary()
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
