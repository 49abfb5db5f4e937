package loadgen

import "testing"

// TestReferenceRunRestartsNothing: the run against the reference server must not restart "the service" (it
// would stop the reference and start mcpfleet in its place) nor profile it, whatever the first run did.
func TestReferenceRunRestartsNothing(t *testing.T) {
	cfg := Config{N: 10, Ceiling: true, ReportPath: "r.md", ReferenceDatabaseURL: "postgres://ref", Strict: true, CPUProfile: "c",
		ServicePID: 1, ServiceDatabase: "svc", ServiceCommand: "bin/mcpfleet", ServicePprof: "http://127.0.0.1:1", ServiceCPUProfile: "s.pprof"}
	rc := referenceConfig(cfg, "http://127.0.0.1:2", 42, "ref")
	if rc.ServiceCommand != "" || rc.ServicePprof != "" || rc.ServiceCPUProfile != "" || rc.CPUProfile != "" {
		t.Errorf("the reference run restarts or profiles: %+v", rc)
	}
	if rc.Ceiling || rc.ReportPath != "" || rc.ReferenceDatabaseURL != "" || rc.Strict {
		t.Errorf("the reference run repeats the first run's extras: %+v", rc)
	}
	if rc.BaseURL != "http://127.0.0.1:2" || rc.ServicePID != 42 || rc.ServiceDatabase != "ref" || rc.N != 10 {
		t.Errorf("the reference run's target: %+v", rc)
	}
}
