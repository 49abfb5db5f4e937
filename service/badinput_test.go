package service_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// Every bad request is an application/problem+json answer with a stable type and no internal text.
func TestBadInputIsAProblem(t *testing.T) {
	h := newHarness(t)
	id := h.register("calendar")
	_, keysB := h.NewTenant("globex")
	mod, op := h.module(), h.Keys[persistence.RoleOperator]
	big := `{"module_name":"` + strings.Repeat("a", 1<<20) + `"}`
	for _, tc := range []struct {
		name, method, path, key string
		body                    any
		hdr                     []string
		status                  int
		typ, field              string
	}{
		{"malformed json", "POST", "/v1/mcp/servers/register", mod, `{"module_name":`, nil, 400, "invalid_json", ""},
		{"not an object", "POST", "/v1/mcp/servers/register", mod, `[1,2]`, nil, 400, "invalid_json", ""},
		{"trailing data", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["2025-11-25"]} {}`, nil, 400, "invalid_json", ""},
		{"empty body", "POST", "/v1/mcp/servers/register", mod, ` `, nil, 400, "invalid_json", ""},
		{"unknown field", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["2025-11-25"],"admin":true}`, nil, 400, "unknown_field", "admin"},
		{"wrong type", "POST", "/v1/mcp/servers/register", mod, `{"module_name":42,"version":"1","supported_protocols":["2025-11-25"]}`, nil, 400, "invalid_field", "module_name"},
		{"wrong element type", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":[1]}`, nil, 400, "invalid_field", "supported_protocols"},
		{"missing module_name", "POST", "/v1/mcp/servers/register", mod, `{"version":"1","supported_protocols":["2025-11-25"]}`, nil, 400, "missing_field", "module_name"},
		{"missing version", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","supported_protocols":["2025-11-25"]}`, nil, 400, "missing_field", "version"},
		{"module_name too long", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"` + strings.Repeat("a", 129) + `","version":"1","supported_protocols":["2025-11-25"]}`, nil, 400, "invalid_field", "module_name"},
		{"module_name with spaces", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a b","version":"1","supported_protocols":["2025-11-25"]}`, nil, 400, "invalid_field", "module_name"},
		{"version too long", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"` + strings.Repeat("1", 65) + `","supported_protocols":["2025-11-25"]}`, nil, 400, "invalid_field", "version"},
		{"empty protocol list", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":[]}`, nil, 400, "invalid_field", "supported_protocols"},
		{"unknown protocol", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["mcp-9"]}`, nil, 400, "invalid_field", "supported_protocols"},
		{"tools not an array", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":"x"}}`, nil, 400, "invalid_field", "capability_advertisement"},
		{"duplicate tool", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":[{"name":"x"},{"name":"x"}]}}`, nil, 400, "invalid_field", "capability_advertisement.tools[1].name"},
		{"schema not an object", "POST", "/v1/mcp/servers/register", mod, `{"module_name":"a","version":"1","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":[{"name":"x","inputSchema":"s"}]}}`, nil, 400, "invalid_field", "capability_advertisement.tools[0].inputSchema"},
		{"non-UUID server_id", "POST", "/v1/mcp/servers/heartbeat", mod, `{"server_id":"42"}`, nil, 400, "invalid_field", "server_id"},
		{"missing server_id", "POST", "/v1/mcp/servers/heartbeat", mod, `{}`, nil, 400, "missing_field", "server_id"},
		{"non-UUID path id", "GET", "/v1/mcp/servers/not-a-uuid", op, nil, nil, 400, "invalid_field", "server_id"},
		{"body over 1 MiB", "POST", "/v1/mcp/servers/register", mod, big, nil, 413, "body_too_large", ""},
		{"wrong content type", "POST", "/v1/mcp/servers/heartbeat", mod, `{"server_id":"` + id + `"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", ""},
		{"missing key", "POST", "/v1/mcp/servers/heartbeat", "", `{"server_id":"` + id + `"}`, nil, 401, "unauthorized", ""},
		{"wrong key", "POST", "/v1/mcp/servers/heartbeat", "mcpf_" + strings.Repeat("A", 43), `{"server_id":"` + id + `"}`, nil, 401, "unauthorized", ""},
		{"garbage key", "GET", "/v1/mcp/servers", "hunter2", nil, nil, 401, "unauthorized", ""},
		{"operator may not heartbeat", "POST", "/v1/mcp/servers/heartbeat", op, `{"server_id":"` + id + `"}`, nil, 403, "forbidden", ""},
		{"module may not read the audit", "GET", "/v1/mcp/audit", mod, nil, nil, 403, "forbidden", ""},
		{"another tenant's server", "POST", "/v1/mcp/servers/heartbeat", keysB[persistence.RoleModule], `{"server_id":"` + id + `"}`, nil, 404, "server_not_registered", ""},
		{"another tenant's server read", "GET", "/v1/mcp/servers/" + id, keysB[persistence.RoleOperator], nil, nil, 404, "not_found", ""},
		{"unknown server", "POST", "/v1/mcp/servers/heartbeat", mod, `{"server_id":"00000000-0000-4000-8000-000000000000"}`, nil, 404, "server_not_registered", ""},
		{"bad limit", "GET", "/v1/mcp/servers?limit=5000", op, nil, nil, 400, "invalid_field", "limit"},
		{"bad cursor", "GET", "/v1/mcp/servers?cursor=zzzz", op, nil, nil, 400, "invalid_field", "cursor"},
		{"no such route", "GET", "/v1/nope", op, nil, nil, 404, "no_route", ""},
		{"wrong method", "DELETE", "/v1/mcp/servers", op, nil, nil, 405, "method_not_allowed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := tc.hdr
			r := h.do(tc.method, tc.path, tc.key, tc.body, hdr...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, truncate(r.body))
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json", ct)
			}
			p := r.json(t)
			if p["type"] != "https://mcpfleet.dev/problems/"+tc.typ {
				t.Fatalf("type %v, want %s", p["type"], tc.typ)
			}
			if tc.field != "" && p["field"] != tc.field {
				t.Fatalf("field %v, want %s", p["field"], tc.field)
			}
			if d, _ := p["detail"].(string); d == "" || strings.Contains(d, "pgx") || strings.Contains(d, "SQLSTATE") || strings.Contains(d, "json: ") {
				t.Fatalf("detail %q is empty or leaks internals", d)
			}
			if p["status"] != float64(tc.status) || p["title"] == "" {
				t.Fatalf("problem members: %v", p)
			}
		})
	}
	if s := h.status(id); s != "healthy" {
		t.Fatalf("bad input changed the server: %s", s)
	}
	_ = http.StatusOK
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// test-connection and import take no body: none or {} is accepted, a field is refused like everywhere
// (400 unknown_field, problem+json), before anything is sent to the server.
func TestBodilessOperationsRefuseUnknownFields(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	b := configureBody("tools", srv.URL)
	b["data_class"] = "internal"
	id := h.configureID(b)
	for _, op := range []string{"test-connection", "import"} {
		path := "/v1/mcp/servers/" + id + "/" + op
		p := wantProblem(t, h.do("POST", path, h.adminKey(), map[string]any{"dry_run": true}), http.StatusBadRequest, "unknown_field")
		if p["field"] != "dry_run" {
			t.Errorf("%s: problem %v, want field dry_run", op, p)
		}
		for _, body := range []any{nil, map[string]any{}} {
			if r := h.do("POST", path, h.adminKey(), body); r.status != http.StatusOK {
				t.Errorf("%s with body %v: %d %s", op, body, r.status, r.body)
			}
		}
	}
}
