package service_test

import (
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/mcpclient"
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
		c.MCPTimeout != mcpclient.DefaultTimeout || c.ProbeConcurrency != config.DefaultProbeConcurrency || c.UISecureCookies {
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
