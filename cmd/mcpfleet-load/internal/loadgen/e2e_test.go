package loadgen_test

// End-to-end runs of the load phases against fleetclienttest, an in-memory
// stand-in for the mcpfleet service's module API (the real service lives
// elsewhere; the benchmark against it is run separately), with small N and
// a short H.

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/fleetclient/fleetclienttest"
	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// syncBuffer is a bytes.Buffer safe to write and read concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func smallConfig(baseURL, key string) loadgen.Config {
	return loadgen.Config{
		BaseURL:        baseURL,
		APIKey:         key,
		ReadKey:        key,
		N:              200,
		Interval:       500 * time.Millisecond,
		Jitter:         50 * time.Millisecond,
		Ramp:           2000,
		Duration:       2 * time.Second,
		Connections:    16,
		PeakWorkers:    8,
		PeakDuration:   500 * time.Millisecond,
		Ceiling:        false,
		Deregister:     true,
		ModulePrefix:   "load",
		RequestTimeout: 5 * time.Second,
		MaxRuntime:     time.Minute,
		Progress:       250 * time.Millisecond,
		Seed:           1,
	}
}

func TestRunEndToEnd(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond, MonitorPeriod: 25 * time.Millisecond})
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.Ceiling = true
	cfg.SelfExe = os.Args[0] // TestMain serves "noop-server"
	cfg.ServicePID = os.Getpid()
	cfg.JSON = true
	cfg.ReportPath = filepath.Join(t.TempDir(), "report.md")

	var stdout, stderr syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := loadgen.RunAndReport(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("RunAndReport: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())

	var s loadgen.Summary
	if err := json.Unmarshal([]byte(stdout.String()), &s); err != nil {
		t.Fatalf("JSON summary: %v\n%s", err, stdout.String())
	}
	if s.Registration.Registered != 200 || s.Registration.Created != 200 || s.Registration.Errors.Total != 0 {
		t.Errorf("registration = %+v", s.Registration)
	}
	// A fleet under 100,000 is its own "first 100,000": the time to its last registration.
	if r := s.Registration; r.FirstRegistered != 200 || r.FirstSeconds <= 0 || r.FirstSeconds > r.Seconds {
		t.Errorf("first registrations: %d in %.3f s (whole: %.3f s)", r.FirstRegistered, r.FirstSeconds, r.Seconds)
	}
	// 200 modules every 500 ms: 400 heartbeats/s.
	if r := s.Steady.RatePerSecond; r < 300 || r > 500 {
		t.Errorf("steady rate = %.0f/s, want about 400", r)
	}
	if s.Steady.Errors.Total != 0 || s.Warmup.Errors.Total != 0 {
		t.Errorf("heartbeat errors: steady %+v, registration %+v", s.Steady.Errors, s.Warmup.Errors)
	}
	if s.FalseTransitions != 0 || !s.Sweep.Done || s.Sweep.Degraded+s.Sweep.Unhealthy != 0 {
		t.Errorf("false transitions %d, sweep %+v", s.FalseTransitions, s.Sweep)
	}
	if s.Steady.P99Ms <= 0 || s.Steady.MaxMs < s.Steady.P99Ms {
		t.Errorf("steady latency p99 %v max %v", s.Steady.P99Ms, s.Steady.MaxMs)
	}
	if s.Peak.OK == 0 || s.Ceiling.OK == 0 || s.CeilingRatioPercent <= 0 {
		t.Errorf("peak %+v, ceiling %+v, ratio %v", s.Peak, s.Ceiling, s.CeilingRatioPercent)
	}
	if s.NoopSteady.OK == 0 || s.NoopSteady.ExpectedRatePerSecond != 400 || !s.NoopSteadyCPU.Measured {
		t.Errorf("no-op at the steady rate %+v, CPU %+v", s.NoopSteady, s.NoopSteadyCPU)
	}
	if !s.CPU.ServiceMeasured || s.CPU.ClientPercent <= 0 || s.LoadAverage[1] == "" {
		t.Errorf("CPU = %+v, load average %v", s.CPU, s.LoadAverage)
	}
	if c := s.RegistrationCPU; !c.ServiceMeasured || !c.MachineMeasured || c.Seconds <= 0 || c.MachineBusyPercent <= 0 || c.MachineBusyPercent > 100 {
		t.Errorf("registration CPU = %+v", c)
	}
	if !s.RSS.Measured || s.RSS.BeforeKiB == 0 || s.RSS.AfterKiB == 0 {
		t.Errorf("RSS = %+v", s.RSS)
	}
	if s.Deregistration.Deregistered != 200 || s.Deregistration.Errors.Total != 0 {
		t.Errorf("deregistration = %+v", s.Deregistration)
	}
	for _, srv := range fake.Servers() {
		if srv.Status != fleetclient.StatusDeregistered {
			t.Errorf("%s is %s after the run", srv.ModuleName, srv.Status)
			break
		}
		if hist := fake.StatusHistory(srv.ServerID); len(hist) != 2 {
			t.Errorf("%s went through %v, want healthy then deregistered only", srv.ModuleName, hist)
			break
		}
	}
	got := map[string]string{}
	for _, tg := range s.Targets {
		got[tg.Name] = tg.Result
	}
	if got["fleet size at H = 10 s"] != loadgen.ResultNotMet || got["errors (registration and steady heartbeats)"] != loadgen.ResultMet ||
		got["false transitions"] != loadgen.ResultMet || s.AllMet {
		t.Errorf("targets = %v, AllMet %v", got, s.AllMet)
	}

	md, err := os.ReadFile(cfg.ReportPath)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	for _, want := range []string{"| fleet size at H = 10 s |", "**NOT met**", "| steady | heartbeat rate achieved |", "| ceiling | no-op gin server rate |",
		"| registration | machine CPU busy meanwhile (every process) |", "| registration | service CPU per registration, net of the heartbeats meanwhile |",
		"![heartbeat latency over time](report-latency.svg)", "![heartbeat latency histogram per phase](report-histogram.svg)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, name := range []string{"report-latency.svg", "report-histogram.svg"} {
		svg, err := os.ReadFile(filepath.Join(filepath.Dir(cfg.ReportPath), name))
		if err != nil {
			t.Fatalf("plot: %v", err)
		}
		if err := wellFormed(svg); err != nil || !bytes.Contains(svg, []byte("<path d=")) || !bytes.Contains(svg, []byte(">steady")) {
			t.Errorf("%s: %v, or no steady phase drawn:\n%s", name, err, svg)
		}
	}
	for _, want := range []string{"registration:", "[steady", "steady:", "ceiling:", "peak:", "deregistration:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("progress lacks %q", want)
		}
	}
}

// wellFormed reports whether doc parses as XML to its end.
func wellFormed(doc []byte) error {
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func TestRunCountsErrorsByKind(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond})
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.N = 10
	cfg.Connections = 1 // one module at a time: the first is refused 5 times in a row
	cfg.Duration = time.Second
	cfg.PeakDuration = 0
	// The first 5 registration attempts are refused with a 503: each is tried again, more than the 4
	// attempts of a deregistration (a module must stay registered), so every module registers, and
	// the attempts are counted apart from the errors.
	fake.FailNext("register", 5, http.StatusServiceUnavailable, 0)
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s.Registration.Registered != 10 || s.Registration.Errors.Total != 0 {
		t.Errorf("registered %d, errors %+v; want all 10 registered, the 503s tried again", s.Registration.Registered, s.Registration.Errors)
	}
	if got := s.Registration.Retried; got.Total != 5 || got.ByKind["HTTP 503 injected"] != 5 {
		t.Errorf("retried = %+v, want 5 HTTP 503 injected", got)
	}
	if s.Registration.Attempted != 15 {
		t.Errorf("attempted %d, want 15 (10 modules, 5 of their attempts tried again)", s.Registration.Attempted)
	}
}

// A registration that timed out is tried again, as a module would: the stalled ones took effect in the
// service, so the retry re-registers them (200), and none is counted as an error.
func TestRunRetriesARegistrationThatTimedOut(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond})
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.N = 20
	cfg.Duration = time.Second
	cfg.PeakDuration = 0
	cfg.RequestTimeout = 300 * time.Millisecond
	fake.StallNext("register", 3, 5*time.Second)
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := s.Registration
	if r.Registered != 20 || r.Errors.Total != 0 {
		t.Errorf("registered %d, errors %+v; want all 20, the timeouts tried again", r.Registered, r.Errors)
	}
	if r.Retried.ByKind["timeout"] != 3 || r.Retried.Total != 3 {
		t.Errorf("retried = %+v, want 3 timeouts", r.Retried)
	}
	if r.Created != 17 || r.Reregistered != 3 {
		t.Errorf("created %d, re-registered %d; want 17 and the 3 stalled ones re-registered", r.Created, r.Reregistered)
	}
}

// falseService is a stand-in that answers every heartbeat "degraded" and
// lists every server as unhealthy: each is a false transition.
func falseService(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	var ids []string
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/mcp/servers/register", func(w http.ResponseWriter, r *http.Request) {
		var req fleetclient.RegisterRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		id := "id-" + req.ModuleName
		ids = append(ids, id)
		mu.Unlock()
		answer(w, 201, map[string]any{"server_id": id, "module_name": req.ModuleName, "status": "healthy",
			"last_heartbeat_at": time.Now(), "registered_at": time.Now(), "heartbeat_interval_seconds": 0.5})
	})
	mux.HandleFunc("POST /v1/mcp/servers/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ServerID string `json:"server_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		answer(w, 200, map[string]any{"server_id": req.ServerID, "status": "degraded", "last_heartbeat_at": time.Now()})
	})
	mux.HandleFunc("GET /v1/mcp/servers", func(w http.ResponseWriter, r *http.Request) {
		page := fleetclient.ServerPage{Servers: []fleetclient.Server{}}
		if r.URL.Query().Get("status") == "unhealthy" {
			mu.Lock()
			for _, id := range ids {
				page.Servers = append(page.Servers, fleetclient.Server{ServerID: id, Status: fleetclient.StatusUnhealthy})
			}
			page.Servers = append(page.Servers, fleetclient.Server{ServerID: "someone-else", Status: fleetclient.StatusUnhealthy})
			mu.Unlock()
		}
		answer(w, 200, page)
	})
	mux.HandleFunc("POST /v1/mcp/servers/deregister", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, map[string]any{"status": "deregistered"})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestRunDetectsFalseTransitions(t *testing.T) {
	ts := falseService(t)
	cfg := smallConfig(ts.URL, "k")
	cfg.N = 20
	cfg.Duration = time.Second
	cfg.PeakDuration = 0
	cfg.Strict = true
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if !errors.Is(err, loadgen.ErrTargetsMissed) {
		t.Fatalf("Run = %v, want ErrTargetsMissed under Strict", err)
	}
	if s.Steady.NonHealthyOnTime == 0 {
		t.Errorf("non-healthy answers on time = 0, want every heartbeat counted")
	}
	if s.Sweep.OnTimeNonHealthy != 20 || s.Sweep.Unhealthy != 20 || s.Sweep.Foreign != 1 {
		t.Errorf("sweep = %+v, want all 20 of ours unhealthy on time and 1 foreign", s.Sweep)
	}
	if s.FalseTransitions != s.Warmup.NonHealthyOnTime+s.Steady.NonHealthyOnTime+20 {
		t.Errorf("FalseTransitions = %d", s.FalseTransitions)
	}
}

func TestRunRefusesRemoteTargetsWithoutTraffic(t *testing.T) {
	cfg := smallConfig("http://10.11.12.13:8080", "k")
	if _, err := loadgen.Run(t.Context(), cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("Run = %v, want a loopback refusal", err)
	}
}

func TestRunStopsWhenNothingRegisters(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{})
	cfg := smallConfig(fake.URL, "wrong-key")
	cfg.N = 10
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no module registered") {
		t.Fatalf("Run = %v, want no module registered", err)
	}
	if s == nil || s.Registration.Errors.ByKind["HTTP 401 unauthorized"] != 10 || s.Registration.Retried.Total != 0 {
		t.Errorf("summary = %+v, want 10 refusals for good, none tried again", s)
	}
}

func TestRunInterruptedStillDeregisters(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond})
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.N = 30
	cfg.Duration = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		s   *loadgen.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := loadgen.Run(ctx, cfg, io.Discard)
		done <- result{s, err}
	}()
	wait.For(t, "two heartbeats per module", 20*time.Second, func() bool { return fake.Stats().Heartbeats >= 2*cfg.N })
	cancel()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30s of cancellation")
	}
	if !errors.Is(res.err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", res.err)
	}
	if res.s == nil || res.s.Deregistration.Deregistered != cfg.N {
		t.Fatalf("summary = %+v, want all %d deregistered", res.s, cfg.N)
	}
	for _, srv := range fake.Servers() {
		if srv.Status != fleetclient.StatusDeregistered {
			t.Errorf("%s is %s after an interrupted run", srv.ModuleName, srv.Status)
		}
	}
}

// TestRunSearchesForTheLargestFleetHeld: a service that answers heartbeats slowly (p99 over the 300 ms
// the test holds a size to) while more than 300 servers are registered does not hold 400; the step-down takes 40 out at a time
// (evenly spread) and finds 280 held, with 360 and 320 not, and says what broke above it. (No jitter:
// a window of 1.5 s then holds exactly its share of beats, and the 99 % rule is not a coin toss.)
func TestRunSearchesForTheLargestFleetHeld(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond})
	target, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var live atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/mcp/servers/register":
			live.Add(1)
		case "/v1/mcp/servers/deregister":
			live.Add(-1)
		case "/v1/mcp/servers/heartbeat":
			if live.Load() > 75 {
				// A service that cannot hold more than 75: it refuses, at once, so that whether a size
				// holds does not depend on how busy the machine running the test is.
				http.Error(w, "saturated", http.StatusServiceUnavailable)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	cfg := holdConfig(slow.URL, fake.APIKey)
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !s.Hold.Ran || s.Hold.Largest != 70 {
		t.Fatalf("hold search = %+v, want it to run and find 70", s.Hold)
	}
	// Before the first step it waits for the fleet to recover: here in vain (the service refuses every
	// heartbeat while 100 are registered, so the stand-in judges them all silent), until its limit.
	if s.Hold.RecoverySeconds < 6*0.5 || s.Hold.RecoveryError != "" || s.Hold.NonHealthyLeft == 0 {
		t.Errorf("hold search = %+v, want it to have waited its limit (3 s) for the fleet's recovery, in vain", s.Hold)
	}
	var sizes []int
	for _, st := range s.Hold.Steps {
		sizes = append(sizes, st.Servers)
		if st.Held != (st.Servers == 70) || st.Deregistered != 10 || st.DeregisterErrors.Total != 0 || st.Window.ExpectedRatePerSecond != float64(st.Servers)*2 {
			t.Errorf("step %+v", st)
		}
	}
	if !slices.Equal(sizes, []int{90, 80, 70}) {
		t.Errorf("sizes %v, want 90, 80, 70", sizes)
	}
	var report bytes.Buffer
	if err := loadgen.WriteMarkdown(&report, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Largest fleet held", "p99 under 1000 ms", "largest held in the step-down: 70 servers", "Largest held: 70 servers. What breaks next, at 80: ", "still were not."} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The rest are deregistered at the end, and the fleet the fake holds is empty.
	if s.Deregistration.Deregistered != 70 || s.Deregistration.Errors.Total != 0 || live.Load() != 0 {
		t.Errorf("deregistration %+v, %d left", s.Deregistration, live.Load())
	}
}

// TestRunSearchesNothingWhenTheFleetHolds: a fleet held in the steady phase is not stepped down.
func TestRunSearchesNothingWhenTheFleetHolds(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 500 * time.Millisecond})
	s, err := loadgen.Run(t.Context(), holdConfig(fake.URL, fake.APIKey), io.Discard)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s.Hold.Ran || len(s.Hold.Steps) != 0 || s.Deregistration.Deregistered != 100 {
		t.Errorf("hold search %+v, deregistered %d", s.Hold, s.Deregistration.Deregistered)
	}
}

// holdConfig is a run of 100 modules without jitter, 3 s windows, and the step-down search on,
// holding a size to a p99 under 1 s. Not the target's 50 ms: a race-detector build sharing two cores
// with other test packages can miss that, and the 99 % share of the rate in a short window, while
// serving perfectly well (in CI a 1.5 s window at a 300 ms limit once missed both); the rule is the
// same, and TestWindowHeld proves it at 50 ms.
func holdConfig(baseURL, key string) loadgen.Config {
	cfg := smallConfig(baseURL, key)
	cfg.N = 100
	cfg.Jitter = 0
	cfg.Connections = 32
	cfg.HoldP99 = time.Second
	cfg.Duration = 3 * time.Second
	cfg.PeakDuration = 0
	cfg.HoldSearch = true
	return cfg
}

// Modules still trying to register when the run's time ends are counted as not registered, not as
// modules never attempted, and not lost from the errors.
func TestRunCountsModulesStillRetryingAtTheEnd(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{})
	cfg := smallConfig(fake.URL, fake.APIKey)
	cfg.N = 6
	cfg.Connections = 2
	cfg.RequestTimeout = 200 * time.Millisecond
	cfg.MaxRuntime = 2 * time.Second
	fake.StallNext("register", 1000, time.Minute) // every attempt times out, and is tried again
	s, err := loadgen.Run(t.Context(), cfg, io.Discard)
	if err == nil {
		t.Fatal("Run succeeded, want no module registered")
	}
	if s == nil {
		t.Fatalf("no summary (Run: %v)", err)
	}
	r := s.Registration
	if r.Registered != 0 || r.Errors.Total != 6 || r.Errors.ByKind["not registered when the phase's time limit ended"] != 6 {
		t.Errorf("registered %d, errors %+v; want the 6 counted as not registered by the time limit", r.Registered, r.Errors)
	}
	if r.Retried.ByKind["timeout"] == 0 {
		t.Errorf("retried = %+v, want the timeouts tried again", r.Retried)
	}
}
