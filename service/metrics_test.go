package service_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/service"
)

// TestMetricsUnderLoad drives heartbeats from several goroutines, a rejected heartbeat, a
// deregistration and an unhealthy transition whose alert is refused once, and reads /metrics.
func TestMetricsUnderLoad(t *testing.T) {
	var calls atomic.Int32
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt fails: a retry follows
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hookSrv.Close()
	logs := &logBuffer{}
	h := newHarness(t, func(c *service.Config, o *service.Options) {
		c.AlertWebhookURL, c.AlertWebhookSecret = hookSrv.URL, "metrics-test-secret"
		o.LogOutput = logs
	})
	const servers, beats = 6, 50
	ids := make([]string, servers)
	for i := range ids {
		ids[i] = h.register(sprintf("metrics-%d", i), "tool")
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, id := range ids {
		wg.Go(func() {
			for range beats {
				if r := h.heartbeat(id); r.status != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d heartbeats failed", failed.Load())
	}
	if r := h.heartbeat("00000000-0000-4000-8000-000000000000"); r.status != http.StatusNotFound {
		t.Fatalf("heartbeat of an unknown server: %d", r.status)
	}
	if r := h.do("POST", "/v1/mcp/servers/deregister", h.module(), map[string]string{"server_id": ids[0]}); r.status != http.StatusOK {
		t.Fatalf("deregister: %d %s", r.status, r.body)
	}
	// ids[1] stays silent; the others keep beating.
	h.advance(3*h.Cfg.HeartbeatInterval + time.Second)
	for _, id := range ids[2:] {
		h.mustHeartbeat(id)
	}
	h.runMonitor()
	if got := h.status(ids[1]); got != "unhealthy" {
		t.Fatalf("silent server is %s", got)
	}
	waitFor(t, "the alert to be delivered on its retry", 30*time.Second, func() bool { return calls.Load() >= 2 })

	var page string
	waitFor(t, "the metrics to show the flushes and the delivery", 10*time.Second, func() bool {
		page = h.scrape()
		return strings.Contains(page, `mcpfleet_alert_deliveries_total{outcome="delivered"} 1`) &&
			strings.Contains(page, `mcpfleet_writer_batch_size_count{writer="stamps"}`)
	})
	accepted := servers*beats + len(ids[2:])
	for _, want := range []string{
		sprintf(`mcpfleet_heartbeats_total{outcome="accepted"} %d`, accepted),
		`mcpfleet_heartbeats_total{outcome="rejected",reason="not_registered"} 1`,
		`mcpfleet_servers{status="healthy"} 4`,
		`mcpfleet_servers{status="unhealthy"} 1`,
		`mcpfleet_servers{status="deregistered"} 1`,
		`mcpfleet_servers{status="degraded"} 0`,
		`mcpfleet_server_transitions_total{from="healthy",to="deregistered"} 1`,
		`mcpfleet_server_transitions_total{from="healthy",to="unhealthy"} 1`,
		`mcpfleet_detection_lag_seconds_count 1`,
		`mcpfleet_detection_lag_seconds_bucket{le="31"} 1`,
		`mcpfleet_writer_batch_size_count{writer="commands"}`,
		`mcpfleet_writer_flush_duration_seconds_count{outcome="ok",writer="commands"}`,
		`mcpfleet_writer_flush_duration_seconds_count{outcome="ok",writer="stamps"}`,
		`mcpfleet_writer_backlog{writer="commands"} 0`,
		`mcpfleet_writer_backlog{writer="stamps"}`,
		`mcpfleet_alert_deliveries_total{outcome="failed"} 1`,
		`mcpfleet_alert_deliveries_total{outcome="delivered"} 1`,
		`mcpfleet_alert_retries_total 1`,
		sprintf(`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",http_route="/v1/mcp/servers/heartbeat"} %d`, accepted),
		`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="404",http_route="/v1/mcp/servers/heartbeat"} 1`,
		`target_info{`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(page, "otel_scope_name") {
		t.Error("/metrics carries scope labels")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}

	// The failed delivery's warning is in the transition's trace.
	var traceID string
	for _, e := range h.audit(ids[1]) {
		if e.Kind == "mcp.server.unhealthy" {
			traceID = e.TraceID
		}
	}
	found := false
	for _, rec := range logs.records(t) {
		if rec["msg"] == "alert delivery failed" {
			found = true
			if rec["trace_id"] != traceID || rec["span_id"] == nil {
				t.Errorf("alert delivery warning has trace_id %v span_id %v, want the transition's trace %s", rec["trace_id"], rec["span_id"], traceID)
			}
		}
		for _, v := range rec {
			if s, ok := v.(string); ok && (strings.Contains(s, h.module()) || strings.Contains(s, "metrics-test-secret")) {
				t.Errorf("log record carries a credential: %v", rec)
			}
		}
	}
	if !found {
		t.Error(`no "alert delivery failed" warning logged`)
	}
}
