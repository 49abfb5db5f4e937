package loadgen

import (
	"os"
	"testing"
)

func TestParseMachineCPU(t *testing.T) {
	tests := []struct {
		name, line  string
		busy, total int64
		wantErr     bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice: busy 10+1+5+2+3+4, total + 100 + 7.
		{"kernel 2.6.33+", "cpu  10 1 5 100 7 2 3 4 9 9", 25, 132, false},
		{"no guest columns", "cpu 10 1 5 100 7 2 3 4", 25, 132, false},
		{"a single CPU's line", "cpu0 10 1 5 100 7 2 3 4 0 0", 0, 0, true},
		{"too few fields", "cpu 10 1 5 100", 0, 0, true},
		{"not a number", "cpu 10 1 five 100 7 2 3 4", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMachineCPU(tt.line)
			if (err != nil) != tt.wantErr || got.busy != tt.busy || got.total != tt.total {
				t.Errorf("parseMachineCPU(%q) = %+v, %v; want busy %d total %d, error %v", tt.line, got, err, tt.busy, tt.total, tt.wantErr)
			}
		})
	}
}

func TestMachineBusyPercent(t *testing.T) {
	before := machineCPU{busy: 100, total: 1000}
	if pct, ok := (machineCPU{busy: 250, total: 1200}).busyPercentSince(before); !ok || pct != 75 {
		t.Errorf("150 of 200 ticks busy: %v %v, want 75 %%", pct, ok)
	}
	if _, ok := before.busyPercentSince(before); ok {
		t.Error("no time passed, yet a percentage")
	}
	if _, err := os.Stat("/proc/stat"); err == nil {
		if _, err := readMachineCPU(); err != nil {
			t.Errorf("this machine's /proc/stat: %v", err)
		}
	}
}

func TestPerRegistrationTakesOffTheHeartbeats(t *testing.T) {
	s := &Summary{
		Registration: RegistrationSummary{Registered: 1000},
		// 0.1 ms of service and 0.02 ms of PostgreSQL CPU per steady heartbeat.
		Steady: PhaseSummary{OK: 10_000},
		CPU:    CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 1, DatabaseMeasured: true, DatabaseCPUSeconds: 0.2},
		// 2,000 heartbeats meanwhile: 0.2 s and 0.04 s of the window are theirs.
		Warmup:          PhaseSummary{OK: 2000},
		RegistrationCPU: CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 0.5, DatabaseMeasured: true, DatabaseCPUSeconds: 0.24},
	}
	sv, db, svOK, dbOK := s.PerRegistration()
	if !svOK || !dbOK || !near(sv, 0.3) || !near(db, 0.2) {
		t.Errorf("PerRegistration = %v, %v, %v, %v; want 0.3 and 0.2 ms", sv, db, svOK, dbOK)
	}
	s.Warmup.OK = 100_000 // more heartbeat CPU than the window had: clamped, not negative
	if sv, db, _, _ := s.PerRegistration(); sv != 0 || db != 0 {
		t.Errorf("PerRegistration = %v, %v, want 0 (clamped)", sv, db)
	}
	s.CPU.DatabaseMeasured = false // the steady cost is unknown: nothing to take off
	if _, _, svOK, dbOK := s.PerRegistration(); !svOK || dbOK {
		t.Errorf("measured %v %v, want the service only", svOK, dbOK)
	}
	s.Registration.Registered = 0
	if _, _, svOK, dbOK := s.PerRegistration(); svOK || dbOK {
		t.Error("nothing registered, yet a cost per registration")
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
