package service_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// A monitor that was stalled (GC, CPU starvation, SIGSTOP) does not count its own stall as the fleet's
// silence: the deadline of every server is extended by the measured lateness of the periodic tick.
func TestMonitorStallExtendsDeadlines(t *testing.T) {
	h := newHarness(t)
	id := h.register("calendar")
	tick := func() {
		t.Helper()
		if err := h.Svc.Fleet().Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	h.advance(35 * time.Second) // the periodic tick (every 5 s) was not handled for 35 s
	tick()
	if s := h.status(id); s != "healthy" {
		t.Fatalf("after a 35 s monitor stall: %s, want healthy (the stall is the monitor's, not the server's)", s)
	}
	// Once the monitor runs on time again, real silence is still detected within the bound.
	for range 6 {
		h.advance(5 * time.Second)
		tick()
	}
	if s := h.status(id); s != "unhealthy" {
		t.Fatalf("30 s of silence after the stall: %s, want unhealthy", s)
	}
}

type alertSink struct {
	mu    sync.Mutex
	kinds []string
	srv   *httptest.Server
}

func newAlertSink(t *testing.T) *alertSink {
	a := &alertSink{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var p struct{ Kind string }
		_ = json.Unmarshal(b, &p)
		a.mu.Lock()
		a.kinds = append(a.kinds, p.Kind)
		a.mu.Unlock()
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *alertSink) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.kinds...)
}

// A flapping server raises one alert for the episode, not one per flap; every transition is still
// audited.
func TestFlappingRaisesOneAlert(t *testing.T) {
	sink := newAlertSink(t)
	h := newHarness(t, func(c *service.Config, _ *service.Options) {
		c.AlertWebhookURL, c.AlertWebhookSecret = sink.srv.URL, "x"
	})
	id := h.register("flaky")
	for range 4 {
		h.advance(35 * time.Second)
		h.runMonitor()
		h.mustHeartbeat(id)
	}
	// Transitions: unhealthy(1) recovered(2) unhealthy(3) recovered(4) unhealthy(5: flapping) recovered(6) unhealthy(7) recovered(8).
	want := []string{persistence.AlertUnhealthy, persistence.AlertUnhealthy, persistence.AlertFlapping}
	waitFor(t, "three alerts", 10*time.Second, func() bool { return len(sink.got()) >= 3 })
	h.Restart() // flushes the outbox: no fourth alert is pending
	got := sink.got()
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("alerts = %v, want %v", got, want)
	}
	n := 0
	for _, e := range h.audit(id) {
		if e.Kind == "mcp.server.unhealthy" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d unhealthy audit events, want 4 (suppressing alerts must not suppress the audit)", n)
	}
}

// The mass-silence guard (off by default) holds a tenant's servers at degraded when more than its
// budget would turn unhealthy in one period, raises one fleet-level alert, and releases them at the
// budget's rate unless they recover.
func TestMassSilenceGuard(t *testing.T) {
	sink := newAlertSink(t)
	h := newHarness(t, func(c *service.Config, _ *service.Options) {
		c.AlertWebhookURL, c.AlertWebhookSecret = sink.srv.URL, "x"
		c.MassSilenceFraction, c.MassSilenceMin = 0.1, 2
	})
	var ids []string
	for i := range 20 {
		ids = append(ids, h.register(sprintf("m%02d", i)))
	}
	count := func() map[string]int {
		m := map[string]int{}
		for _, id := range ids {
			m[h.status(id)]++
		}
		return m
	}
	h.advance(35 * time.Second)
	h.runMonitor()
	if c := count(); c["unhealthy"] != 2 || c["degraded"] != 18 {
		t.Fatalf("first period: %v, want 2 unhealthy and 18 held at degraded", c)
	}
	// Recover one of the servers held at degraded (which two were released is up to the fan-out order).
	recovered := ""
	for _, id := range ids {
		if h.status(id) == "degraded" {
			recovered = id
			break
		}
	}
	h.mustHeartbeat(recovered)
	h.runMonitor()
	if c := count(); c["unhealthy"] != 4 || c["healthy"] != 1 {
		t.Fatalf("second period: %v, want 4 unhealthy (2 more released) and 1 recovered", c)
	}
	for range 10 {
		h.runMonitor()
	}
	if c := count(); c["unhealthy"] != 19 {
		t.Fatalf("after enough periods: %v, want every silent server unhealthy", c)
	}
	waitFor(t, "alerts", 10*time.Second, func() bool { return len(sink.got()) >= 20 })
	fleet := 0
	for _, k := range sink.got() {
		if k == persistence.AlertMassSilence {
			fleet++
		}
	}
	if fleet != 1 {
		t.Fatalf("%d fleet-level alerts, want one for the episode: %v", fleet, sink.got())
	}
}

// While PostgreSQL refuses the app role, /readyz says degraded but stays 200: the instance keeps
// accepting heartbeats.
func TestReadyzDegradedWhenDatabaseAway(t *testing.T) {
	h := newHarness(t)
	revokeAppRole(t, h)
	r := h.do("GET", "/readyz", "", nil)
	if r.status != 200 || r.json(t)["status"] != "degraded" {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
}
