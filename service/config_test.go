package service_test

import (
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/service"
)

// An empty environment gives every default, each defined once in package config.
func TestConfigDefaults(t *testing.T) {
	c, err := service.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != config.DefaultHTTPAddr || c.MetricsAddr != config.DefaultMetricsAddr ||
		c.HeartbeatInterval != config.DefaultHeartbeatInterval || c.MonitorInterval != config.DefaultMonitorInterval ||
		c.StampFlushInterval != config.DefaultStampFlushInterval || c.WriteTimeout != config.DefaultWriteTimeout ||
		c.FlapWindow != config.DefaultFlapWindow || c.FlapThreshold != config.DefaultFlapThreshold ||
		c.MassSilenceFraction != 0 || c.MassSilenceMin != config.DefaultMassSilenceMin || c.DBMaxConns != config.DefaultDBMaxConns ||
		c.MCPTimeout != config.DefaultMCPTimeout || c.ProbeConcurrency != config.DefaultProbeConcurrency || c.UISecureCookies ||
		c.SaturationLatency != config.DefaultSaturationLatency {
		t.Errorf("defaults: %+v", c)
	}
}

// A whole-number setting refuses a fraction, a negative or garbage rather than truncating it, and the
// error names the variable.
func TestConfigRefusesWhatItWouldTruncate(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"MCPFLEET_FLAP_THRESHOLD", "4.5"}, {"MCPFLEET_FLAP_THRESHOLD", "-4"}, {"MCPFLEET_MASS_SILENCE_MIN", "2.5"},
		{"MCPFLEET_DB_MAX_CONNS", "8.9"}, {"MCPFLEET_PROBE_CONCURRENCY", "1e3"}, {"MCPFLEET_KEY_CACHE_SIZE", "5000.5"},
		{"MCPFLEET_MASS_SILENCE_FRACTION", "1.5"}, {"MCPFLEET_PPROF_ADDR", "6060"}, {"MCPFLEET_MAX_TOOLS_PER_SERVER", "4.5"},
		{"MCPFLEET_SATURATION_LATENCY", "-1ms"}, {"MCPFLEET_SATURATION_LATENCY", "25"},
		{"MCPFLEET_EVENT_STREAMS", "2.5"}, {"MCPFLEET_MCP_SESSIONS_PER_KEY", "-1"}, {"MCPFLEET_ALERT_WEBHOOK_URL", "hooks.example"},
	} {
		_, err := service.FromEnv(func(k string) string { return map[string]string{tt.name: tt.value}[k] })
		if err == nil || !strings.Contains(err.Error(), tt.name+"=") {
			t.Errorf("%s=%s: %v, want an error naming it", tt.name, tt.value, err)
		}
	}
	c, err := service.FromEnv(func(k string) string { return map[string]string{"MCPFLEET_FLAP_THRESHOLD": "5"}[k] })
	if err != nil || c.FlapThreshold != 5 {
		t.Errorf("MCPFLEET_FLAP_THRESHOLD=5: %d, %v", c.FlapThreshold, err)
	}
}

// Cluster mode takes its three settings together: any partial set, or a malformed one, is refused
// with a message naming what is wrong; none at all is single-node mode.
func TestConfigCluster(t *testing.T) {
	full := map[string]string{"MCPFLEET_CLUSTER_ETCD": " 127.0.0.1:2379, http://10.0.0.2:2379 ,", "MCPFLEET_CLUSTER_NAME": "fleet-a", "MCPFLEET_CLUSTER_ADDR": "127.0.0.1:7101"}
	c, err := service.FromEnv(func(k string) string { return full[k] })
	if err != nil || !c.Cluster.Enabled() || len(c.Cluster.Etcd) != 2 || c.Cluster.Etcd[1] != "http://10.0.0.2:2379" ||
		c.Cluster.Name != "fleet-a" || c.Cluster.Addr != "127.0.0.1:7101" {
		t.Fatalf("full cluster config: %+v, %v", c.Cluster, err)
	}
	if c, err := service.FromEnv(func(string) string { return "" }); err != nil || c.Cluster.Enabled() {
		t.Fatalf("no cluster settings: %+v, %v; want single-node mode", c.Cluster, err)
	}
	for _, tt := range []struct {
		name  string
		env   map[string]string
		wants string
	}{
		{"etcd only", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379"}, "missing: [MCPFLEET_CLUSTER_NAME MCPFLEET_CLUSTER_ADDR]"},
		{"name only", map[string]string{"MCPFLEET_CLUSTER_NAME": "a"}, "missing: [MCPFLEET_CLUSTER_ETCD MCPFLEET_CLUSTER_ADDR]"},
		{"no addr", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379", "MCPFLEET_CLUSTER_NAME": "a"}, "missing: [MCPFLEET_CLUSTER_ADDR]"},
		{"blank etcd list", map[string]string{"MCPFLEET_CLUSTER_ETCD": " , ", "MCPFLEET_CLUSTER_NAME": "a", "MCPFLEET_CLUSTER_ADDR": "127.0.0.1:7101"}, "missing: [MCPFLEET_CLUSTER_ETCD]"},
		{"bad endpoint", map[string]string{"MCPFLEET_CLUSTER_ETCD": "etcd", "MCPFLEET_CLUSTER_NAME": "a", "MCPFLEET_CLUSTER_ADDR": "127.0.0.1:7101"}, `"etcd" is not host:port`},
		{"bad name", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379", "MCPFLEET_CLUSTER_NAME": "a/b", "MCPFLEET_CLUSTER_ADDR": "127.0.0.1:7101"}, "MCPFLEET_CLUSTER_NAME=\"a/b\""},
		{"port 0", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379", "MCPFLEET_CLUSTER_NAME": "a", "MCPFLEET_CLUSTER_ADDR": "127.0.0.1:0"}, "want a port from 1 to 65535"},
		{"wildcard", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379", "MCPFLEET_CLUSTER_NAME": "a", "MCPFLEET_CLUSTER_ADDR": "0.0.0.0:7101"}, "not a wildcard"},
		{"no port", map[string]string{"MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379", "MCPFLEET_CLUSTER_NAME": "a", "MCPFLEET_CLUSTER_ADDR": "node1"}, "want host:port"},
	} {
		_, err := service.FromEnv(func(k string) string { return tt.env[k] })
		if err == nil || !strings.Contains(err.Error(), tt.wants) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.wants)
		}
	}
}

// TestConfigTraceURL: MCPFLEET_TRACE_URL is read through the typed reader; a template without
// {trace_id}, or not an http(s) URL with a host, is refused naming the variable, and Validate refuses
// one set by hand too.
func TestConfigTraceURL(t *testing.T) {
	const good = "http://jaeger:16686/trace/{trace_id}"
	c, err := service.FromEnv(func(k string) string {
		return map[string]string{"MCPFLEET_TRACE_URL": " " + good + " "}[k]
	})
	if err != nil || c.TraceURL != good {
		t.Fatalf("FromEnv: %q, %v", c.TraceURL, err)
	}
	for _, bad := range []string{"http://jaeger:16686/trace", "ftp://jaeger/{trace_id}", "{trace_id}"} {
		_, err := service.FromEnv(func(k string) string { return map[string]string{"MCPFLEET_TRACE_URL": bad}[k] })
		if err == nil || !strings.Contains(err.Error(), "MCPFLEET_TRACE_URL=") || !strings.Contains(err.Error(), "{trace_id}") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	c.DatabaseURL, c.TraceURL = "postgres://x@127.0.0.1/x", "http://jaeger/trace"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MCPFLEET_TRACE_URL") {
		t.Errorf("Validate: %v", err)
	}
}
