package loadgen_test

import (
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestBackendCPUDelta(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for _, c := range []struct {
		name          string
		before, after loadgen.BackendCPU
		want          loadgen.CPUDelta
	}{
		{"none", nil, nil, loadgen.CPUDelta{}},
		{"growth of the same backends", loadgen.BackendCPU{1: ms(100), 2: ms(50)}, loadgen.BackendCPU{1: ms(300), 2: ms(70)},
			loadgen.CPUDelta{CPU: ms(220), Backends: 2}},
		{"a backend started in the window counts whole", loadgen.BackendCPU{1: ms(100)}, loadgen.BackendCPU{1: ms(150), 3: ms(40)},
			loadgen.CPUDelta{CPU: ms(90), Backends: 2, New: 1}},
		{"an exited backend is counted as exited, not negative", loadgen.BackendCPU{1: ms(100), 2: ms(500)}, loadgen.BackendCPU{1: ms(120)},
			loadgen.CPUDelta{CPU: ms(20), Backends: 1, Exited: 1}},
		{"a reused pid whose time went down adds nothing", loadgen.BackendCPU{1: ms(900)}, loadgen.BackendCPU{1: ms(10)},
			loadgen.CPUDelta{Backends: 1}},
	} {
		if got := c.after.Delta(c.before); got != c.want {
			t.Errorf("%s: Delta = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestPerHeartbeat(t *testing.T) {
	s := &loadgen.Summary{Steady: loadgen.PhaseSummary{OK: 20_000}}
	if _, _, _, svOK, dbOK := s.PerHeartbeat(); svOK || dbOK {
		t.Fatalf("nothing measured, yet PerHeartbeat reports measured figures")
	}
	s.CPU = loadgen.CPUSummary{ServiceMeasured: true, ServiceCPUSeconds: 3, DatabaseMeasured: true, DatabaseCPUSeconds: 0.5}
	sv, db, tot, svOK, dbOK := s.PerHeartbeat()
	if !svOK || !dbOK || sv != 0.15 || db != 0.025 || tot != 0.175 {
		t.Errorf("PerHeartbeat = %v %v %v %v %v, want 0.15 0.025 0.175 ms", sv, db, tot, svOK, dbOK)
	}
	s.Steady.OK = 0
	if _, _, _, svOK, _ := s.PerHeartbeat(); svOK {
		t.Errorf("no heartbeat answered, yet a per-heartbeat figure")
	}
}
