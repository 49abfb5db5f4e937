package service_test

import (
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// withMetricsListener serves every metric on a listener of its own, on a free loopback port.
func withMetricsListener(c *service.Config, _ *service.Options) { c.MetricsAddr = "127.0.0.1:0" }

// scrapePrivate reads every metric from the metrics listener.
func (h *harness) scrapePrivate() string {
	h.T.Helper()
	resp, err := http.Get(h.Svc.MetricsURL())
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		h.T.Fatalf("GET %s: %d %v", h.Svc.MetricsURL(), resp.StatusCode, err)
	}
	return string(b)
}

// closedLabels are the label names the public /metrics may use: each has a closed set of values that
// names no tenant, server or path. A new label is a decision, taken here.
var closedLabels = []string{
	"outcome", "reason", "status", "from", "to", "writer", "event", "kind", "le", "quantile",
	"http_request_method", "http_route", "http_response_status_code", "otel_metric_overflow",
	"db_system_name", "db_client_connection_pool_name", "db_operation_name", "pgx_operation_type",
	"service_name", "telemetry_sdk_language", "telemetry_sdk_name", "telemetry_sdk_version", "version",
}

// The API's /metrics has no tenant data and only closed label sets — no tenant id, server id or module
// name of either tenant, no unmatched path — while the metrics listener has the per-server series
// of both tenants, by tenant and server name.
func TestMetricsTenantDataOnlyOnMetricsListener(t *testing.T) {
	h := newHarness(t, withMCP, withMetricsListener)
	otherTenant, otherKeys := h.NewTenant("globex")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there: the handshake fails as transport
	acme := h.configureID(configureBody("acme-secret-crm", endpoint))
	h.do("POST", "/v1/mcp/servers/"+acme+"/test-connection", h.adminKey(), nil)
	r := h.do("POST", "/v1/mcp/servers", otherKeys[persistence.RoleAdmin], configureBody("globex-payroll", endpoint))
	if r.status != http.StatusCreated {
		t.Fatalf("configure in the other tenant: %d %s", r.status, r.body)
	}
	globex := r.json(t)["server_id"].(string)
	h.do("POST", "/v1/mcp/servers/"+globex+"/test-connection", otherKeys[persistence.RoleAdmin], nil)
	module := h.register("acme-module-ledger", "tool")
	h.mustHeartbeat(module)
	h.do("GET", "/v1/unknown-path-acme-ledger", h.module(), nil)
	h.do("GET", "/v1/mcp/servers/"+module+"/no-such-thing", h.module(), nil)

	public := h.scrape()
	for _, secret := range []string{"acme", "globex", h.Tenant.String(), otherTenant.String(), acme, globex, module, "unknown-path", "no-such-thing"} {
		if strings.Contains(public, secret) {
			t.Errorf("the API's /metrics carries %q", secret)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(public))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(closedLabels, l.GetName()) {
					t.Errorf("%s has label %s=%q, not one of the closed label sets", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	for _, want := range []string{
		`mcpfleet_mcp_client_operation_duration_seconds_count{kind="handshake",outcome="transport"} 2`,
		`mcpfleet_servers{status="healthy"} 3`,
	} {
		if !strings.Contains(public, want) {
			t.Errorf("the API's /metrics lacks %s", want)
		}
	}

	private := h.scrapePrivate()
	for _, want := range []string{
		`mcpfleet_mcp_server_operation_duration_seconds_count{kind="handshake",outcome="transport",server="acme-secret-crm",tenant_id="` + h.Tenant.String() + `"} 1`,
		`mcpfleet_mcp_server_operation_duration_seconds_count{kind="handshake",outcome="transport",server="globex-payroll",tenant_id="` + otherTenant.String() + `"} 1`,
		`mcpfleet_servers{status="healthy"} 3`,
	} {
		if !strings.Contains(private, want) {
			t.Errorf("the metrics listener lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("API /metrics:\n%s\nmetrics listener:\n%s", public, private)
	}
}

// Without MCPFLEET_METRICS_ADDR there is no metrics listener, and the API's /metrics still has no
// per-server series.
func TestMetricsListenerOff(t *testing.T) {
	h := newHarness(t)
	if u := h.Svc.MetricsURL(); u != "" {
		t.Fatalf("MetricsURL %q with the listener off", u)
	}
	if strings.Contains(h.scrape(), "mcpfleet_mcp_server_operation") {
		t.Error("per-server series on the API's /metrics")
	}
}
