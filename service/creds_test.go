package service_test

import (
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/service"
)

// A module key learns nothing of where names resolve from the service's side: an endpoint it gives at
// registration that is refused for its address (or because the name does not resolve) is answered with
// one generic detail, whatever the reason, and the reason is logged under the request's trace id. An
// administrator registering the same endpoint keeps the specific detail, and how a URL is written
// (scheme, user name) stays specific for everyone.
func TestEndpointRefusedIsGenericForModuleKeys(t *testing.T) {
	var logs logBuffer
	h := newHarness(t, withMCP, withLogs(&logs), func(c *service.Config, _ *service.Options) { c.EndpointAllowlist = nil })
	addressed := []struct{ endpoint, secret string }{
		{"http://localhost:8080/mcp", "127.0.0.1"},          // a name resolving to loopback: which address it resolves to
		{"http://10.1.2.3/mcp", "private"},                  // a private literal
		{"http://no-such-host.invalid/mcp", "could not be"}, // a name that does not resolve
		{"http://[2002:c0a8:101::1]/mcp", "6to4"},           // a tunnelling prefix
	}
	generic := ""
	for i, tt := range addressed {
		body := registration(sprintf("mod%d", i))
		body["endpoint"] = tt.endpoint
		r := h.do("POST", "/v1/mcp/servers/register", h.module(), body)
		p := wantProblem(t, r, 400, "endpoint_refused")
		detail, _ := p["detail"].(string)
		if strings.Contains(r.string(), tt.secret) || strings.Contains(detail, "loopback") {
			t.Errorf("module key, %s: the problem says where the host resolves: %s", tt.endpoint, r.string())
		}
		if generic == "" {
			generic = detail
		} else if detail != generic {
			t.Errorf("module key, %s: detail %q differs from %q: the difference tells the reason", tt.endpoint, detail, generic)
		}
		traceID, _ := p["trace_id"].(string)
		if traceID == "" || p["field"] != "endpoint" {
			t.Fatalf("module key, %s: problem %v, want field endpoint and a trace_id", tt.endpoint, p)
		}
		// Logged before the answer was written.
		logged := false
		for _, line := range strings.Split(logs.String(), "\n") {
			logged = logged || strings.Contains(line, traceID) && strings.Contains(line, "registration endpoint refused") && strings.Contains(line, tt.secret)
		}
		if !logged {
			t.Errorf("module key, %s: no log line with trace id %s and the reason", tt.endpoint, traceID)
		}

		// The administrator keeps the reason.
		r = h.do("POST", "/v1/mcp/servers/register", h.adminKey(), body)
		if p := wantProblem(t, r, 400, "endpoint_refused"); !strings.Contains(p["detail"].(string), tt.secret) {
			t.Errorf("admin key, %s: detail %q does not say why (%s)", tt.endpoint, p["detail"], tt.secret)
		}
	}

	// How the URL is written is not a secret: the module key is told.
	body := registration("modscheme")
	body["endpoint"] = "ftp://example.com/mcp"
	if p := wantProblem(t, h.do("POST", "/v1/mcp/servers/register", h.module(), body), 400, "endpoint_refused"); !strings.Contains(p["detail"].(string), "scheme") {
		t.Errorf("module key, bad scheme: detail %q does not say scheme", p["detail"])
	}
}
