package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestReferenceRunRestartsNothing: the run against the reference server must not restart "the service" (it
// would stop the reference and start mcpfleet in its place) nor profile it, whatever the first run did.
func TestReferenceRunRestartsNothing(t *testing.T) {
	cfg := Config{N: 10, Ceiling: true, ReportPath: "r.md", ReferenceDatabaseURL: "postgres://ref", Strict: true, CPUProfile: "c", HoldSearch: true,
		ServicePID: 1, ServiceDatabase: "svc", ServiceCommand: "bin/mcpfleet", ServicePprof: "http://127.0.0.1:1", ServiceCPUProfile: "s.pprof"}
	rc := referenceConfig(cfg, "http://127.0.0.1:2", 42, "ref")
	if rc.ServiceCommand != "" || rc.ServicePprof != "" || rc.ServiceCPUProfile != "" || rc.CPUProfile != "" {
		t.Errorf("the reference run restarts or profiles: %+v", rc)
	}
	if rc.Ceiling || rc.ReportPath != "" || rc.ReferenceDatabaseURL != "" || rc.Strict || rc.HoldSearch {
		t.Errorf("the reference run repeats the first run's extras: %+v", rc)
	}
	if rc.BaseURL != "http://127.0.0.1:2" || rc.ServicePID != 42 || rc.ServiceDatabase != "ref" || rc.N != 10 {
		t.Errorf("the reference run's target: %+v", rc)
	}
}

// TestOpenLoopPaces: the open loop sends rate requests per second, not as many as the server can take
// (a closed loop against this handler would send tens of thousands in the window).
func TestOpenLoopPaces(t *testing.T) {
	var got atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		got.Add(1)
		_, _ = io.WriteString(w, `{"status":"healthy"}`)
	}))
	t.Cleanup(ts.Close)
	r, err := newRunner(Config{BaseURL: ts.URL, N: 1, Interval: time.Second, Connections: 8, RequestTimeout: 5 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ph := newPhase("open loop")
	const rate, d = 500.0, time.Second
	r.openLoop(context.Background(), ph, r.hb, 10, rate, d,
		func(k int) (*module, []byte) { return nil, []byte(`{"server_id":"x"}`) })
	// Pacing is by the wall clock, so the count is rate × d less what the deadline cut off in flight.
	if n := float64(ph.ok.Load()); n < rate*d.Seconds()*0.8 || n > rate*d.Seconds()*1.01 {
		t.Errorf("answered %.0f in %s at %.0f/s, want about %.0f (server saw %d)", n, d, rate, rate*d.Seconds(), got.Load())
	}
}

// TestBulkTimeout: a bulk pass may take three times what the ramp predicts, or what 1,000 a second
// would take if that is longer, plus a minute.
func TestBulkTimeout(t *testing.T) {
	for _, tc := range []struct {
		n, ramp int
		want    time.Duration
	}{
		{100_000, 5000, 160 * time.Second}, // 1,000/s: 100 s > 3 × 20 s
		{250_000, 5000, 310 * time.Second},
		{10_000, 100, 360 * time.Second}, // the ramp's 3 × 100 s
		{10_000, 0, 90 * time.Second},    // no ramp: as fast as the connections allow, predicted at 1,000/s
	} {
		r, err := newRunner(Config{BaseURL: "http://127.0.0.1:1", N: tc.n, Ramp: tc.ramp, Interval: time.Second, Connections: 8, RequestTimeout: time.Second}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.bulkTimeout(); got != tc.want {
			t.Errorf("N %d, ramp %d: %s, want %s", tc.n, tc.ramp, got, tc.want)
		}
	}
}

// TestCloseWindowCountsTheBeatsInFlight: a beat sent in a window and answered after it closed counts in
// that window (its latency too), and one sent after the close counts in the next phase. Without the
// wait for beats in flight, the window's rate and tail lose the slowest beats of its end.
func TestCloseWindowCountsTheBeatsInFlight(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		<-release
		_, _ = io.WriteString(w, `{"status":"healthy"}`)
	}))
	t.Cleanup(ts.Close)
	r, err := newRunner(Config{BaseURL: ts.URL, N: 1, Interval: time.Second, Connections: 1, RequestTimeout: 5 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	window, next := newPhase("window"), newPhase("next")
	r.cur.Store(window)
	b := newBeater(r.hb)
	t.Cleanup(b.Close)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.beatOnce(context.Background(), r.cur.Load(), b, nil, []byte(`{"server_id":"x"}`))
	}()
	for window.inflight.Load() == 0 {
		time.Sleep(time.Millisecond) // until the beat is on its way
	}
	go func() {
		for r.cur.Load() != next {
			time.Sleep(time.Millisecond)
		}
		close(release) // answered only once the window has closed
	}()
	r.closeWindow(window, next)
	if window.ok.Load() != 1 || window.lat.Max() == 0 || next.ok.Load() != 0 {
		t.Errorf("window answered %d (max latency %s), next %d; want the beat in flight in the window", window.ok.Load(), window.lat.Max(), next.ok.Load())
	}
	<-done
}
