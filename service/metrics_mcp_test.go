package service_test

import (
	"net"
	"strings"
	"testing"
)

// A configured server joins the servers gauge, and a connection test is counted as an MCP operation
// by kind, outcome class and server name.
func TestMetricsConfiguredServerAndMCPOperation(t *testing.T) {
	h := newHarness(t, withMCP)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there: the handshake fails as transport
	id := h.configureID(configureBody("metrics-remote", endpoint))
	h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil)
	page := h.scrape()
	for _, want := range []string{
		`mcpfleet_servers{status="healthy"} 1`,
		`mcpfleet_mcp_client_operation_duration_seconds_count{kind="handshake",outcome="transport",server="metrics-remote"} 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(page, "\n") {
			if strings.HasPrefix(l, "mcpfleet_servers") || strings.HasPrefix(l, "mcpfleet_mcp") {
				t.Log(l)
			}
		}
	}
}
