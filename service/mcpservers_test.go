package service_test

// Issue 3: configured servers, test connection, catalogue import, observed liveness — against real MCP
// servers (mcpclient/mcptest) and a real PostgreSQL.

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/service"
)

func TestConfigureServerObject(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Modern(t)
	obj := h.configure(configureBody("weather", srv.URL))
	want := map[string]any{
		"module_name": "weather", "status": "healthy", "endpoint": srv.URL, "transport": "streamable_http",
		"enabled": true, "liveness": "push", "requires_approval": true, "data_class": nil, "tool_count": float64(0),
		"import_status": "never_imported", "import_error": nil, "last_imported": nil, "last_contact": nil,
		"last_latency_ms": nil, "last_probe": nil, "version": "",
	}
	for k, v := range want {
		if got, ok := obj[k]; !ok || !equalJSON(got, v) {
			t.Errorf("server object %s = %v, want %v", k, got, v)
		}
	}
	auth := obj["auth"].(map[string]any)
	if auth["mode"] != "none" || auth["supported"] != true || auth["credential_configured"] != false {
		t.Errorf("auth = %v", auth)
	}
	cat := obj["catalogue"].(map[string]any)
	if cat["fresh_until"] != nil || cat["ttl_ms"] != nil {
		t.Errorf("catalogue of a never-imported server = %v", cat)
	}
	// The seed's fields stay.
	for _, k := range []string{"server_id", "tenant_id", "supported_protocols", "capability_advertisement", "last_heartbeat_at", "registered_at", "trace_id"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("server object lost field %q", k)
		}
	}
	id := obj["server_id"].(string)
	if got := h.fetchServer(id); got["endpoint"] != srv.URL || got["requires_approval"] != true {
		t.Errorf("GET after configure: %v", got)
	}
	// It is a server of the fleet: registered audit event, listed, and under the health state machine.
	if k := kinds(h.audit(id)); !slices.Equal(k, []string{"mcp.server.registered"}) {
		t.Errorf("audit = %v", k)
	}
	r := h.do("GET", "/v1/mcp/servers", h.operatorKey(), nil)
	if !bytes.Contains(r.body, []byte(`"transport":"streamable_http"`)) || !bytes.Contains(r.body, []byte(id)) {
		t.Errorf("list does not carry the configured server's detail: %s", r.body)
	}
	h.advance(35 * time.Second)
	h.runMonitor()
	if s := h.status(id); s != "unhealthy" {
		t.Errorf("a push server silent for 35 s is %s, want unhealthy", s)
	}

	// requires_approval can be switched off at creation, and enabled off.
	obj = h.configure(map[string]any{"module_name": "calc", "endpoint": srv.URL, "liveness": "probe",
		"requires_approval": false, "enabled": false, "data_class": "internal", "version": "2.0.1"})
	if obj["requires_approval"] != false || obj["enabled"] != false || obj["data_class"] != "internal" ||
		obj["liveness"] != "probe" || obj["version"] != "2.0.1" {
		t.Errorf("configured with explicit settings: %v", obj)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// requires_approval holds for every server, also one that existed before the setting (no row).
func TestRequiresApprovalForPreexistingServer(t *testing.T) {
	h := newHarness(t, withMCP)
	id := h.register("calendar", "list_events")
	obj := h.fetchServer(id)
	if obj["requires_approval"] != true || obj["enabled"] != true || obj["import_status"] != "never_imported" ||
		obj["liveness"] != "push" || obj["endpoint"] != nil {
		t.Fatalf("a registered server without configuration: %v", obj)
	}
	var n int
	if err := h.DB.AdminPool(t).QueryRow(context.Background(), `SELECT count(*) FROM server_config`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("server_config rows = %d, %v; the defaults must not need a row", n, err)
	}
	// A later edit of something else leaves it requiring approval.
	if got := h.patch(id, map[string]any{"data_class": "public"}); got["requires_approval"] != true {
		t.Fatalf("after an unrelated edit: requires_approval = %v", got["requires_approval"])
	}
}

func TestConfigureConflictsAndValidation(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Modern(t)
	id := h.configureID(configureBody("weather", srv.URL))
	p := wantProblem(t, h.do("POST", "/v1/mcp/servers", h.adminKey(), configureBody("weather", srv.URL)), 409, "server_exists")
	if p["server_id"] != id {
		t.Errorf("conflict names %v, want %s", p["server_id"], id)
	}
	reg := h.register("calendar")
	if p := wantProblem(t, h.do("POST", "/v1/mcp/servers", h.adminKey(), configureBody("calendar", srv.URL)), 409, "server_exists"); p["server_id"] != reg {
		t.Errorf("conflict with a registered module names %v, want %s", p["server_id"], reg)
	}
	bad := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no module", map[string]any{"endpoint": srv.URL, "liveness": "push"}, "module_name"},
		{"bad module", map[string]any{"module_name": "a b", "endpoint": srv.URL, "liveness": "push"}, "module_name"},
		{"no endpoint", map[string]any{"module_name": "x", "liveness": "push"}, "endpoint"},
		{"no liveness", map[string]any{"module_name": "x", "endpoint": srv.URL}, "liveness"},
		{"bad liveness", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "pull"}, "liveness"},
		{"bad data class", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "data_class": "secret"}, "data_class"},
		{"empty data class", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "data_class": ""}, "data_class"},
		{"bad auth mode", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "auth": map[string]any{"mode": "basic", "credential": "c"}}, "auth.mode"},
		{"no credential", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "auth": map[string]any{"mode": "bearer"}}, "auth.credential"},
		{"header without name", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "auth": map[string]any{"mode": "header", "credential": "c"}}, "auth.header_name"},
		{"reserved header", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "auth": map[string]any{"mode": "header", "header_name": "Mcp-Session-Id", "credential": "c"}}, "auth.header_name"},
		{"line break in credential", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "auth": map[string]any{"mode": "bearer", "credential": "a\r\nX-Evil: 1"}}, "auth.credential"},
		{"unknown field", map[string]any{"module_name": "x", "endpoint": srv.URL, "liveness": "push", "colour": "red"}, "colour"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do("POST", "/v1/mcp/servers", h.adminKey(), tt.body)
			if r.status != 400 {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			if f := r.json(t)["field"]; f != tt.field {
				t.Errorf("field %v, want %s: %s", f, tt.field, r.body)
			}
		})
	}
	// PATCH refuses what cannot change and what is invalid, and changes nothing then.
	for _, body := range []map[string]any{{"module_name": "other"}, {"version": "9"}, {"liveness": "pull"},
		{"data_class": "secret"}, {"auth": map[string]any{"mode": "header", "credential": "c"}}, {"endpoint": ""}} {
		if r := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), body); r.status != 400 {
			t.Errorf("PATCH %v: %d, want 400: %s", body, r.status, r.body)
		}
	}
	if got := h.fetchServer(id); got["liveness"] != "push" || got["data_class"] != nil || got["module_name"] != "weather" {
		t.Errorf("a refused PATCH changed the server: %v", got)
	}
	wantProblem(t, h.do("PATCH", "/v1/mcp/servers/"+"6f1c2f44-5e0e-4f0c-9d55-6e2c1b5f1d00", h.adminKey(), map[string]any{"enabled": false}), 404, "not_found")
}

func TestTestConnectionModernAndLegacy(t *testing.T) {
	h := newHarness(t, withMCP)
	tests := []struct {
		name   string
		server *mcptest.Server
		want   map[string]any
	}{
		{"modern", mcptest.Modern(t), map[string]any{"protocol_version": "2026-07-28", "negotiation_path": "server_discover",
			"server_info": map[string]any{"name": "modern", "version": "1.2.3", "title": "Modern Test Server"}}},
		{"legacy", mcptest.Legacy(t), map[string]any{"protocol_version": mcptest.LegacyProtocolVersion, "negotiation_path": "initialize",
			"server_info": map[string]any{"name": "legacy", "version": "0.9.1", "title": ""}}},
		{"stateful", mcptest.Stateful(t), map[string]any{"protocol_version": "2025-11-25", "negotiation_path": "initialize",
			"server_info": map[string]any{"name": "stateful", "version": "0.5.0", "title": ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := h.configureID(configureBody(tt.name, tt.server.URL))
			before := time.Now().Add(-time.Second)
			rep := h.testConnection(id)
			if rep["reachable"] != true {
				t.Fatalf("report %v", rep)
			}
			for k, v := range tt.want {
				if !equalJSON(rep[k], v) {
					t.Errorf("%s = %v, want %v", k, rep[k], v)
				}
			}
			if _, ok := rep["latency_ms"].(float64); !ok {
				t.Errorf("latency_ms = %v", rep["latency_ms"])
			}
			contact := timeField(t, rep, "last_contact")
			if contact.Before(before) {
				t.Errorf("last_contact %v is before the test started", contact)
			}
			// Stored: the contact and its latency, and nothing else of the report.
			obj := h.fetchServer(id)
			if got := timeField(t, obj, "last_contact"); !got.Equal(contact) {
				t.Errorf("stored last_contact %v, reported %v", got, contact)
			}
			if obj["last_latency_ms"] != rep["latency_ms"] {
				t.Errorf("stored latency %v, reported %v", obj["last_latency_ms"], rep["latency_ms"])
			}
			body, _ := json.Marshal(obj)
			for _, s := range []string{"negotiation_path", "protocol_version", "server_info", tt.server.URL + "x"} {
				if bytes.Contains(body, []byte(s)) {
					t.Errorf("the server object carries %q: %s", s, body)
				}
			}
			if obj["import_status"] != "never_imported" || obj["tool_count"] != float64(0) {
				t.Errorf("a connection test touched the catalogue: %v", obj)
			}
			if n := len(h.skills(id)); n != 0 {
				t.Errorf("a connection test wrote %d skills", n)
			}
			if slices.Contains(tt.server.Methods(), "tools/list") {
				t.Errorf("a connection test sent tools/list: %v", tt.server.Methods())
			}
		})
	}
}

func TestTestConnectionFailureClasses(t *testing.T) {
	const token = "tok-7Qz93-failure-classes"
	h := newHarness(t, withMCP, func(c *service.Config, _ *service.Options) { c.MCPTimeout = 500 * time.Millisecond })
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/mcp"
	}
	modern := mcptest.Modern(t)
	tests := []struct {
		name     string
		endpoint string
		auth     map[string]any
		want     mcpclient.Class
	}{
		{"connection refused", closed(), nil, mcpclient.ClassTransport},
		{"http 500", mcptest.HTTP500(t).URL, nil, mcpclient.ClassTransport},
		{"redirect to another host", mcptest.Redirect(t, strings.Replace(modern.URL, "127.0.0.1", "localhost", 1)).URL, nil, mcpclient.ClassTransport},
		{"slow", mcptest.Slow(t).URL, nil, mcpclient.ClassTimeout},
		{"missing bearer", mcptest.Bearer(t, token).URL, nil, mcpclient.ClassAuth},
		{"wrong bearer", mcptest.Bearer(t, token).URL, map[string]any{"mode": "bearer", "credential": "wrong-" + token}, mcpclient.ClassAuth},
		{"wrong header", mcptest.Header(t, "X-Api-Key", token).URL, map[string]any{"mode": "header", "header_name": "X-Api-Key", "credential": "wrong"}, mcpclient.ClassAuth},
		{"html", mcptest.NotJSONRPC(t).URL, nil, mcpclient.ClassProtocol},
		{"garbage", mcptest.Garbage(t).URL, nil, mcpclient.ClassInvalidResponse},
		{"ill-formed", mcptest.IllFormed(t).URL, nil, mcpclient.ClassInvalidResponse},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := configureBody(sprintf("fail-%d", i), tt.endpoint)
			if tt.auth != nil {
				body["auth"] = tt.auth
			}
			id := h.configureID(body)
			rep := h.testConnection(id)
			if rep["reachable"] != false || rep["failure_class"] != string(tt.want) || rep["reason"] == "" {
				t.Fatalf("report %v, want unreachable with class %s", rep, tt.want)
			}
			for _, k := range []string{"latency_ms", "protocol_version", "server_info", "last_contact"} {
				if _, ok := rep[k]; ok {
					t.Errorf("a failed report carries %s: %v", k, rep)
				}
			}
			obj := h.fetchServer(id)
			if obj["last_contact"] != nil || obj["last_latency_ms"] != nil || obj["import_status"] != "never_imported" || obj["import_error"] != nil {
				t.Errorf("a failed connection test was stored: %v", obj)
			}
		})
	}
	t.Run("right credentials", func(t *testing.T) {
		b := configureBody("bearer-ok", mcptest.Bearer(t, token).URL)
		b["auth"] = map[string]any{"mode": "bearer", "credential": token}
		if rep := h.testConnection(h.configureID(b)); rep["reachable"] != true {
			t.Errorf("bearer: %v", rep)
		}
		b = configureBody("header-ok", mcptest.Header(t, "X-Api-Key", token).URL)
		b["auth"] = map[string]any{"mode": "header", "header_name": "X-Api-Key", "credential": token}
		if rep := h.testConnection(h.configureID(b)); rep["reachable"] != true {
			t.Errorf("header: %v", rep)
		}
	})
}

// A connection test writes no catalogue and leaves import status and import error exactly as they
// were, whether it fails or succeeds.
func TestTestConnectionLeavesImportStateAlone(t *testing.T) {
	h := newHarness(t, withMCP)
	broken := mcptest.HTTP500(t)
	b := configureBody("weather", broken.URL)
	b["data_class"] = "internal"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	if imp["import_status"] != "failed" || imp["failure_class"] != "transport" || imp["import_error"] == "" {
		t.Fatalf("import from a broken server: %v", imp)
	}
	before := h.fetchServer(id)
	if before["import_status"] != "failed" || before["import_error"] != imp["import_error"] || before["last_imported"] == nil {
		t.Fatalf("after a failed import: %v", before)
	}
	if rep := h.testConnection(id); rep["reachable"] != false {
		t.Fatalf("test connection to a broken server: %v", rep)
	}
	modern := mcptest.Modern(t)
	h.patch(id, map[string]any{"endpoint": modern.URL})
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("test connection after fixing the endpoint: %v", rep)
	}
	after := h.fetchServer(id)
	for _, k := range []string{"import_status", "import_error", "last_imported", "tool_count", "catalogue"} {
		if !equalJSON(after[k], before[k]) {
			t.Errorf("%s changed from %v to %v by connection tests", k, before[k], after[k])
		}
	}
	if after["last_contact"] == nil {
		t.Error("the successful connection test did not stamp last_contact")
	}
	// And a successful import stays succeeded through a failing test.
	h.importCatalogue(id)
	h.patch(id, map[string]any{"endpoint": broken.URL})
	h.testConnection(id)
	if got := h.fetchServer(id); got["import_status"] != "succeeded" || got["import_error"] != nil {
		t.Errorf("after a failed connection test following a successful import: %v", got)
	}
}

func TestLastContactMovesOnlyOnSuccess(t *testing.T) {
	h := newHarness(t, withMCP)
	modern, broken := mcptest.Modern(t), mcptest.HTTP500(t)
	id := h.configureID(configureBody("weather", modern.URL))
	h.testConnection(id)
	t1 := timeField(t, h.fetchServer(id), "last_contact")
	h.patch(id, map[string]any{"endpoint": broken.URL})
	h.testConnection(id)
	if got := timeField(t, h.fetchServer(id), "last_contact"); !got.Equal(t1) {
		t.Fatalf("a failed test moved last_contact from %v to %v", t1, got)
	}
	h.patch(id, map[string]any{"endpoint": modern.URL, "data_class": "public"})
	h.importCatalogue(id) // an import is a contact too
	t2 := timeField(t, h.fetchServer(id), "last_contact")
	if !t2.After(t1) {
		t.Fatalf("a successful import did not move last_contact: %v then %v", t1, t2)
	}
	// An operator edit is not a contact, and a contact is not an operator edit.
	edited := timeField(t, h.fetchServer(id), "config_updated_at")
	h.testConnection(id)
	obj := h.fetchServer(id)
	if !timeField(t, obj, "config_updated_at").Equal(edited) {
		t.Errorf("a contact moved config_updated_at")
	}
	if !timeField(t, obj, "last_contact").After(t2) {
		t.Errorf("the second successful test did not move last_contact")
	}
}

func TestImportPagedCatalogue(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Paged(t, 120, 25)
	b := configureBody("paged", srv.URL)
	b["data_class"] = "internal"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	if imp["import_status"] != "succeeded" || imp["tool_count"] != float64(120) || imp["added"] != float64(120) ||
		imp["kept"] != float64(0) || imp["orphaned"] != float64(0) || len(imp["skipped"].([]any)) != 0 {
		t.Fatalf("import = %v", imp)
	}
	if n := strings.Count(strings.Join(srv.Methods(), ","), "tools/list"); n != 5 {
		t.Errorf("tools/list pages read = %d, want 5", n)
	}
	skills := h.fullSkills(id)
	if len(skills) != 120 {
		t.Fatalf("%d skills, want 120", len(skills))
	}
	for name, k := range skills {
		if k.Enabled || k.Callable || !k.Available {
			t.Fatalf("imported skill %s: %+v; new tools start disabled and available", name, k)
		}
	}
	obj := h.fetchServer(id)
	if obj["tool_count"] != float64(120) || obj["import_status"] != "succeeded" || obj["last_imported"] == nil || obj["import_error"] != nil {
		t.Errorf("server after import: %v", obj)
	}
	if cat := obj["catalogue"].(map[string]any); cat["fresh_until"] != nil {
		t.Errorf("a server without a cache hint has fresh_until %v", cat["fresh_until"])
	}
}

func TestImportCacheHintAndKeptTools(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("modern", mcptest.Modern(t).URL)
	b["data_class"] = "public"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	fresh := imp["catalogue"].(map[string]any)
	if fresh["ttl_ms"] != float64(mcptest.ModernTTL) || fresh["fresh"] != true {
		t.Fatalf("catalogue freshness of the import: %v", fresh)
	}
	until := timeField(t, fresh, "fresh_until")
	imported := timeField(t, imp, "last_imported")
	if !until.Equal(imported.Add(mcptest.ModernTTL * time.Millisecond)) {
		t.Errorf("fresh_until %v, want last_imported %v + %d ms", until, imported, mcptest.ModernTTL)
	}
	if got := h.fetchServer(id)["catalogue"].(map[string]any); !equalJSON(got["fresh_until"], fresh["fresh_until"]) {
		t.Errorf("stored catalogue freshness %v, import said %v", got, fresh)
	}
	echo := h.fullSkills(id)["echo"]
	if r := h.do("POST", "/v1/mcp/skills/"+echo.SkillID+"/enable", h.operatorKey(), nil); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	imp = h.importCatalogue(id)
	if imp["added"] != float64(0) || imp["kept"] != float64(1) || imp["orphaned"] != float64(0) {
		t.Fatalf("re-import = %v", imp)
	}
	if k := h.fullSkills(id)["echo"]; !k.Enabled || !k.Callable || k.SkillID != echo.SkillID {
		t.Errorf("a kept tool lost its enabled flag or its id: %+v", k)
	}
}

func TestImportBadSchemasSkippedWithReasons(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("bad", mcptest.BadSchemas(t).URL)
	b["data_class"] = "confidential"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	var good, bad []string
	for name := range mcptest.BadSchemaTools() {
		if strings.HasPrefix(name, "good_") {
			good = append(good, name)
		} else {
			bad = append(bad, name)
		}
	}
	if imp["tool_count"] != float64(len(good)) || imp["added"] != float64(len(good)) {
		t.Fatalf("import = %v, want %d tools", imp, len(good))
	}
	var skipped []string
	for _, s := range imp["skipped"].([]any) {
		m := s.(map[string]any)
		if m["reason"] == "" {
			t.Errorf("skipped %v without a reason", m["name"])
		}
		skipped = append(skipped, m["name"].(string))
	}
	sort.Strings(skipped)
	sort.Strings(bad)
	if !slices.Equal(skipped, bad) {
		t.Errorf("skipped %v, want %v", skipped, bad)
	}
	skills := h.fullSkills(id)
	if len(skills) != len(good) {
		t.Fatalf("skills %v, want only %v", skills, good)
	}
	// Annotations are dropped, not grounds for rejection; what constrains is kept.
	var schema map[string]any
	if err := json.Unmarshal(skills["good_annotated"].InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if _, ok := schema["$schema"]; ok {
		t.Errorf("stored schema keeps $schema: %s", skills["good_annotated"].InputSchema)
	}
	if !bytes.Contains(skills["good_plain"].InputSchema, []byte(`"required":["city"]`)) {
		t.Errorf("stored schema lost required: %s", skills["good_plain"].InputSchema)
	}
}

func TestImportLegacyDraft07(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("legacy", mcptest.Legacy(t).URL)
	b["data_class"] = "public"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	if imp["tool_count"] != float64(1) || len(imp["skipped"].([]any)) != 0 {
		t.Fatalf("legacy import = %v", imp)
	}
	k := h.fullSkills(id)["get_weather"]
	if bytes.Contains(k.InputSchema, []byte("$schema")) || bytes.Contains(k.InputSchema, []byte("default")) ||
		!bytes.Contains(k.InputSchema, []byte(`"additionalProperties":false`)) {
		t.Errorf("legacy schema normalised to %s", k.InputSchema)
	}
}

func TestImportChangingCatalogueOrphans(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("changing", mcptest.Changing(t).URL)
	b["data_class"] = "internal"
	id := h.configureID(b)
	imp := h.importCatalogue(id)
	if imp["added"] != float64(1) || imp["orphaned"] != float64(0) {
		t.Fatalf("first import %v", imp)
	}
	gen1 := h.fullSkills(id)["gen_1"]
	if r := h.do("POST", "/v1/mcp/skills/"+gen1.SkillID+"/enable", h.adminKey(), nil); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	imp = h.importCatalogue(id)
	if imp["added"] != float64(1) || imp["kept"] != float64(0) || imp["orphaned"] != float64(1) || imp["tool_count"] != float64(1) {
		t.Fatalf("second import %v", imp)
	}
	skills := h.fullSkills(id)
	old, cur := skills["gen_1"], skills["gen_2"]
	if !old.Orphaned || old.Available || old.Callable || !old.Enabled {
		t.Errorf("vanished tool: %+v; want kept, orphaned, unavailable, its enabled flag untouched", old)
	}
	if cur.Orphaned || cur.Enabled || !cur.Available {
		t.Errorf("new tool: %+v", cur)
	}
}

// data_class has no default: without one the import is refused before anything is sent; a connection
// test still works.
func TestImportRefusedWithoutDataClass(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Modern(t)
	id := h.configureID(configureBody("modern", srv.URL))
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil), 409, "data_class_required")
	if m := srv.Methods(); len(m) != 0 {
		t.Fatalf("a refused import reached the server: %v", m)
	}
	obj := h.fetchServer(id)
	if obj["import_status"] != "never_imported" || obj["last_contact"] != nil || len(h.skills(id)) != 0 {
		t.Fatalf("a refused import left traces: %v", obj)
	}
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("test connection needs no data class: %v", rep)
	}
	h.patch(id, map[string]any{"data_class": "internal"})
	h.importCatalogue(id)
	h.patch(id, map[string]any{"data_class": nil})
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil), 409, "data_class_required")
	// A registered module without an endpoint cannot be reached at all (and its catalogue is its
	// advertisement, never imported).
	reg := h.register("calendar")
	h.patch(reg, map[string]any{"data_class": "public"})
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+reg+"/import", h.adminKey(), nil), 409, "catalogue_from_advertisement")
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+reg+"/test-connection", h.adminKey(), nil), 409, "no_endpoint")
}

// The credential is sealed at rest, never returned by any API, never logged — including when it fails.
func TestCredentialNeverReturnedOrLogged(t *testing.T) {
	const token = "Zt9-credential-never-shown-4471"
	var logs logBuffer
	h := newHarness(t, withMCP, withLogs(&logs))
	bearer := mcptest.Bearer(t, token)
	header := mcptest.Header(t, "X-Api-Key", token)
	var bodies [][]byte
	keep := func(r response) response { bodies = append(bodies, r.body); return r }

	b := configureBody("bearer", bearer.URL)
	b["auth"] = map[string]any{"mode": "bearer", "credential": token}
	b["data_class"] = "internal"
	r := keep(h.do("POST", "/v1/mcp/servers", h.adminKey(), b))
	id := r.json(t)["server_id"].(string)
	if auth := r.json(t)["auth"].(map[string]any); auth["mode"] != "bearer" || auth["credential_configured"] != true {
		t.Fatalf("auth = %v", auth)
	}
	hb := configureBody("header", header.URL)
	hb["auth"] = map[string]any{"mode": "header", "header_name": "X-Api-Key", "credential": token}
	hid := keep(h.do("POST", "/v1/mcp/servers", h.adminKey(), hb)).json(t)["server_id"].(string)

	if rep := keep(h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil)).json(t); rep["reachable"] != true {
		t.Fatalf("bearer test: %v", rep)
	}
	if rep := keep(h.do("POST", "/v1/mcp/servers/"+hid+"/test-connection", h.adminKey(), nil)).json(t); rep["reachable"] != true {
		t.Fatalf("header test: %v", rep)
	}
	keep(h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil))
	keep(h.do("GET", "/v1/mcp/servers/"+id, h.operatorKey(), nil))
	keep(h.do("GET", "/v1/mcp/servers", h.adminKey(), nil))
	keep(h.do("GET", "/v1/mcp/servers/"+id+"/skills", h.adminKey(), nil))
	// Failures: a server refusing a wrong credential (whose value contains the right one), a PATCH that
	// keeps the credential while changing the header, a refused PATCH carrying it.
	wrong := token + "-but-wrong"
	p := keep(h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"auth": map[string]any{"mode": "bearer", "credential": wrong}})).json(t)
	if auth := p["auth"].(map[string]any); auth["credential_configured"] != true {
		t.Fatalf("auth after PATCH = %v", auth)
	}
	if rep := keep(h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil)).json(t); rep["failure_class"] != "auth" {
		t.Fatalf("wrong credential: %v", rep)
	}
	if rep := keep(h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil)).json(t); rep["import_status"] != "failed" {
		t.Fatalf("import with a wrong credential: %v", rep)
	}
	keep(h.do("PATCH", "/v1/mcp/servers/"+hid, h.adminKey(), map[string]any{"auth": map[string]any{"mode": "header", "header_name": "Host", "credential": token}}))
	keep(h.do("PATCH", "/v1/mcp/servers/"+hid, h.adminKey(), map[string]any{"auth": map[string]any{"mode": "header", "header_name": "X-Api-Key"}}))
	if rep := keep(h.do("POST", "/v1/mcp/servers/"+hid+"/test-connection", h.adminKey(), nil)).json(t); rep["reachable"] != true {
		t.Fatalf("a PATCH without a credential did not keep the stored one: %v", rep)
	}
	keep(h.do("GET", "/v1/mcp/audit", h.adminKey(), nil))
	for _, body := range bodies {
		if bytes.Contains(body, []byte(token)) {
			t.Errorf("a response carries the credential: %s", body)
		}
	}
	if logs.String() == "" {
		t.Fatal("no logs captured")
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the logs carry the credential")
	}
	// At rest it is sealed.
	rows, err := h.DB.AdminPool(t).Query(context.Background(), `SELECT credential FROM server_config WHERE credential IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(sealed) != 2 {
		t.Fatalf("sealed credentials: %d, %v", len(sealed), err)
	}
	for _, s := range sealed {
		if bytes.Contains(s, []byte(token)) || bytes.Contains(s, []byte("wrong")) {
			t.Error("a credential is stored in clear")
		}
	}
}

// A service without a secret key cannot take a credential; servers without one still work.
func TestNoSecretKey(t *testing.T) {
	h := newHarness(t, withMCP, func(c *service.Config, _ *service.Options) { c.SecretKey = nil })
	b := configureBody("bearer", mcptest.Bearer(t, "x-token").URL)
	b["auth"] = map[string]any{"mode": "bearer", "credential": "x-token"}
	wantProblem(t, h.do("POST", "/v1/mcp/servers", h.adminKey(), b), 503, "secret_key_missing")
	id := h.configureID(configureBody("open", mcptest.Modern(t).URL))
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("a server without credential: %v", rep)
	}
}

func TestEndpointPolicy(t *testing.T) {
	modern := mcptest.Modern(t)
	h := newHarness(t, withMCP, func(c *service.Config, _ *service.Options) { c.EndpointAllowlist = nil })
	refused := []string{
		modern.URL,                           // loopback, not listed
		"http://localhost:8080/mcp",          // resolves to loopback
		"http://10.1.2.3/mcp",                // private
		"http://169.254.169.254/latest/meta", // link-local (cloud metadata)
		"http://[::1]:8080/mcp",              // IPv6 loopback
		"http://[::ffff:127.0.0.1]:80/",      // IPv4-mapped loopback
		"ftp://example.com/mcp",              // scheme
		"file:///etc/passwd",                 // scheme
		"https://user:pw@example.com/mcp",    // credentials in the URL
		"example.com/mcp",                    // no scheme
	}
	for i, ep := range refused {
		r := h.do("POST", "/v1/mcp/servers", h.adminKey(), configureBody(sprintf("s%d", i), ep))
		p := wantProblem(t, r, 400, "endpoint_refused")
		if p["field"] != "endpoint" || strings.Contains(r.string(), "pw@") {
			t.Errorf("%s: problem %v", ep, p)
		}
	}
	// Registration and PATCH are held to the same policy.
	body := registration("calendar")
	body["endpoint"] = "http://10.0.0.7/mcp"
	wantProblem(t, h.do("POST", "/v1/mcp/servers/register", h.module(), body), 400, "endpoint_refused")
	id := h.register("calendar")
	wantProblem(t, h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"endpoint": "http://192.168.1.1/"}), 400, "endpoint_refused")
	if got := h.fetchServer(id); got["endpoint"] != nil {
		t.Errorf("a refused endpoint was stored: %v", got["endpoint"])
	}
	// Listed, loopback is allowed.
	h2 := newHarness(t, withMCP)
	if obj := h2.configure(configureBody("ok", modern.URL)); obj["endpoint"] != modern.URL {
		t.Errorf("allow-listed endpoint: %v", obj["endpoint"])
	}
}

func (r response) string() string { return string(r.body) }

// A module may give its endpoint at registration; it is stored in the configuration, and never replaces
// an endpoint whose credential an administrator configured.
func TestRegistrationEndpoint(t *testing.T) {
	h := newHarness(t, withMCP)
	modern := mcptest.Modern(t)
	body := registration("calendar", "list_events")
	body["endpoint"] = modern.URL
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), body)
	if r.status != http.StatusCreated {
		t.Fatalf("register with endpoint: %d %s", r.status, r.body)
	}
	id := r.json(t)["server_id"].(string)
	if got := h.fetchServer(id); got["endpoint"] != modern.URL || got["requires_approval"] != true {
		t.Fatalf("server after registration with endpoint: %v", got)
	}
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("test connection of a registered endpoint: %v", rep)
	}
	// Re-registration without an endpoint keeps it.
	h.register("calendar", "list_events")
	if got := h.fetchServer(id); got["endpoint"] != modern.URL {
		t.Fatalf("re-registration without endpoint cleared it: %v", got["endpoint"])
	}
	// Once an administrator configured a credential, a module cannot move the endpoint.
	h.patch(id, map[string]any{"auth": map[string]any{"mode": "bearer", "credential": "admin-secret"}})
	other := mcptest.Modern(t)
	body["endpoint"] = other.URL
	if r := h.do("POST", "/v1/mcp/servers/register", h.module(), body); r.status != http.StatusOK {
		t.Fatalf("re-register: %d %s", r.status, r.body)
	}
	if got := h.fetchServer(id); got["endpoint"] != modern.URL {
		t.Fatalf("a module moved an endpoint that has a credential to %v", got["endpoint"])
	}
	h.testConnection(id)
	if n := len(other.Received()); n != 0 {
		t.Fatalf("the credential was sent to the module's new endpoint (%d messages)", n)
	}
}

func TestEnableDisableAndCallable(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("modern", mcptest.Modern(t).URL)
	b["data_class"] = "public"
	id := h.configureID(b)
	h.importCatalogue(id)
	echo := h.fullSkills(id)["echo"]
	if echo.Enabled || echo.Callable || !echo.ServerEnabled {
		t.Fatalf("imported skill %+v", echo)
	}
	path := "/v1/mcp/skills/" + echo.SkillID
	wantProblem(t, h.do("POST", path+"/enable", h.module(), nil), 403, "forbidden")
	r := h.do("POST", path+"/enable", h.operatorKey(), nil)
	if r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	if k := r.json(t); k["enabled"] != true || k["callable"] != true || k["skill_id"] != echo.SkillID {
		t.Fatalf("enabled skill %v", k)
	}
	// The server's switch overrides the skill's.
	if obj := h.patch(id, map[string]any{"enabled": false}); obj["enabled"] != false {
		t.Fatalf("PATCH enabled false: %v", obj)
	}
	if k := h.fullSkills(id)["echo"]; !k.Enabled || k.Callable || k.ServerEnabled {
		t.Fatalf("skill of a disabled server: %+v", k)
	}
	if k := h.do("POST", path+"/enable", h.adminKey(), nil).json(t); k["callable"] != false || k["server_enabled"] != false {
		t.Fatalf("enable answer on a disabled server: %v", k)
	}
	h.patch(id, map[string]any{"enabled": true})
	if k := h.fullSkills(id)["echo"]; !k.Callable {
		t.Fatalf("skill after re-enabling the server: %+v", k)
	}
	// Availability follows health.
	h.advance(35 * time.Second)
	h.runMonitor()
	if k := h.fullSkills(id)["echo"]; k.Available || k.Callable {
		t.Fatalf("skill of an unhealthy server: %+v", k)
	}
	r = h.do("POST", path+"/disable", h.operatorKey(), nil)
	if k := r.json(t); r.status != 200 || k["enabled"] != false || k["callable"] != false {
		t.Fatalf("disable: %d %v", r.status, k)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/skills/not-a-uuid/enable", h.adminKey(), nil), 400, "invalid_field")
	wantProblem(t, h.do("POST", "/v1/mcp/skills/6f1c2f44-5e0e-4f0c-9d55-6e2c1b5f1d00/enable", h.adminKey(), nil), 404, "not_found")
}

// A completed round trip is liveness evidence: it recovers an unhealthy server, durably, and a failed
// one does not.
func TestContactIsLivenessEvidence(t *testing.T) {
	h := newHarness(t, withMCP)
	modern := mcptest.Modern(t)
	b := configureBody("modern", modern.URL)
	b["data_class"] = "public"
	id := h.configureID(b)
	h.importCatalogue(id)
	h.advance(35 * time.Second)
	h.runMonitor()
	if s := h.status(id); s != "unhealthy" {
		t.Fatalf("precondition: %s", s)
	}
	broken := mcptest.HTTP500(t)
	h.patch(id, map[string]any{"endpoint": broken.URL})
	h.testConnection(id)
	if s := h.status(id); s != "unhealthy" {
		t.Fatalf("a failed connection test recovered the server: %s", s)
	}
	h.patch(id, map[string]any{"endpoint": modern.URL})
	h.testConnection(id)
	if s := h.status(id); s != "healthy" {
		t.Fatalf("after a successful connection test: %s, want healthy", s)
	}
	if k := kinds(h.audit(id)); k[len(k)-1] != "mcp.server.recovered" {
		t.Errorf("audit %v", k)
	}
	if k := h.fullSkills(id)["echo"]; !k.Available {
		t.Errorf("the recovery did not cascade to the skills: %+v", k)
	}
	// It moves the deadline too: 25 s later the server is still healthy (degraded would need 20 s of
	// silence since the contact, so 25 s after the registration alone would be degraded).
	h.advance(15 * time.Second)
	h.testConnection(id)
	h.advance(15 * time.Second)
	h.runMonitor()
	if s := h.status(id); s != "healthy" {
		t.Errorf("15 s after a contact: %s, want healthy", s)
	}
}

func TestProbeLiveness(t *testing.T) {
	h := newHarness(t, withMCP)
	modern := mcptest.Modern(t)
	b := configureBody("probed", modern.URL)
	b["liveness"] = "probe"
	id := h.configureID(b)
	down := configureBody("probed-down", mcptest.HTTP500(t).URL)
	down["liveness"] = "probe"
	downID := h.configureID(down)
	push := h.configureID(configureBody("pushed", mcptest.Modern(t).URL))
	h.advance(35 * time.Second)
	h.runMonitor()
	for _, s := range []string{id, downID, push} {
		if st := h.status(s); st != "unhealthy" {
			t.Fatalf("precondition: %s is %s", s, st)
		}
	}
	if err := h.Svc.Remote().RunProbes(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	obj := h.fetchServer(id)
	if obj["status"] != "healthy" || obj["last_contact"] == nil {
		t.Fatalf("a probe server after a successful probe: %v", obj)
	}
	if p := obj["last_probe"].(map[string]any); p["reachable"] != true {
		t.Errorf("last_probe %v", p)
	}
	obj = h.fetchServer(downID)
	if obj["status"] != "unhealthy" || obj["last_contact"] != nil {
		t.Fatalf("a probe server after a failed probe (a miss): %v", obj)
	}
	if p := obj["last_probe"].(map[string]any); p["reachable"] != false || p["failure_class"] != "transport" {
		t.Errorf("last_probe of the failed probe %v", p)
	}
	if obj := h.fetchServer(push); obj["status"] != "unhealthy" || obj["last_probe"] != nil {
		t.Fatalf("a push server was probed: %v", obj)
	}
	// Probe failures are misses: the monitor takes a healthy probe server down when probes fail.
	h.patch(id, map[string]any{"endpoint": mcptest.HTTP500(t).URL})
	h.advance(35 * time.Second)
	if err := h.Svc.Remote().RunProbes(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.runMonitor()
	if s := h.status(id); s != "unhealthy" {
		t.Errorf("a probe server whose probes fail: %s", s)
	}
	// Switching to push stops the probing.
	h.patch(id, map[string]any{"endpoint": modern.URL, "liveness": "push"})
	n := len(modern.Received())
	if err := h.Svc.Remote().RunProbes(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if len(modern.Received()) != n {
		t.Errorf("a push server was probed")
	}
}

// Probes run by themselves every heartbeat interval.
func TestProbesRunEveryInterval(t *testing.T) {
	h := newHarness(t, withMCP, func(c *service.Config, o *service.Options) {
		c.HeartbeatInterval, c.MonitorInterval = 200*time.Millisecond, 100*time.Millisecond
		o.ManualProbes = false
	})
	modern := mcptest.Modern(t)
	b := configureBody("probed", modern.URL)
	b["liveness"] = "probe"
	id := h.configureID(b)
	var first time.Time
	waitFor(t, "a first automatic probe", 10*time.Second, func() bool {
		first = timeField(t, h.fetchServer(id), "last_contact")
		return !first.IsZero()
	})
	waitFor(t, "a second automatic probe", 10*time.Second, func() bool {
		return timeField(t, h.fetchServer(id), "last_contact").After(first)
	})
}

// The recorder cannot fail the operation: the database goes away during a connection test, and the
// answer is still the report; the contact is lost (a stale timestamp and a warning).
func TestRecorderFailureDoesNotFailTheOperation(t *testing.T) {
	var logs logBuffer
	h := newHarness(t, withMCP, withLogs(&logs))
	modern := mcptest.Modern(t)
	admin := h.DB.AdminPool(t)
	ctx := context.Background()
	dbName := pgx.Identifier{h.DB.Name}.Sanitize()
	var once sync.Once
	killDB := func() {
		if _, err := admin.Exec(ctx, "REVOKE CONNECT ON DATABASE "+dbName+" FROM PUBLIC"); err != nil {
			t.Error(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'cyberos_app' AND datname = $1", h.DB.Name); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "GRANT CONNECT ON DATABASE "+dbName+" TO PUBLIC") })
	// A proxy in front of the real server takes the database away as the handshake arrives: after the
	// service read the configuration, before it records the contact.
	target, _ := url.Parse(modern.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(killDB)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	id := h.configureID(configureBody("modern", proxy.URL+"/mcp"))
	h.fetchServer(id) // warms the key cache
	rep := h.testConnection(id)
	if rep["reachable"] != true || rep["protocol_version"] != "2026-07-28" || rep["last_contact"] == nil {
		t.Fatalf("the report while the database is away: %v", rep)
	}
	if !strings.Contains(logs.String(), "last contact not recorded") {
		t.Errorf("no warning about the lost contact in the logs")
	}
	if _, err := admin.Exec(ctx, "GRANT CONNECT ON DATABASE "+dbName+" TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the database to be back", 15*time.Second, func() bool {
		return h.do("GET", "/v1/mcp/servers/"+id, h.operatorKey(), nil).status == 200
	})
	if got := h.fetchServer(id); got["last_contact"] != nil {
		t.Errorf("last_contact = %v; the contact should have been lost, not invented", got["last_contact"])
	}
}

// A locked table costs a stale timestamp, not the answer (the recorder is bounded).
func TestRecorderLockedTable(t *testing.T) {
	h := newHarness(t, withMCP)
	id := h.configureID(configureBody("modern", mcptest.Modern(t).URL))
	admin := h.DB.AdminPool(t)
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "LOCK TABLE server_config IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep := h.testConnection(id)
	if rep["reachable"] != true {
		t.Fatalf("report with the table locked: %v", rep)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("the answer waited %s for the locked table", d)
	}
	_ = tx.Rollback(ctx)
	if got := h.fetchServer(id); got["last_contact"] != nil {
		t.Errorf("last_contact %v written through a lock that outlived the recorder", got["last_contact"])
	}
}

func TestUnknownStoredAuthMode(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("bearer", mcptest.Bearer(t, "tok").URL)
	b["auth"] = map[string]any{"mode": "bearer", "credential": "tok"}
	id := h.configureID(b)
	if _, err := h.DB.AdminPool(t).Exec(context.Background(), `UPDATE server_config SET auth_mode = 'Bearer ' WHERE server_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	auth := h.fetchServer(id)["auth"].(map[string]any)
	if auth["mode"] != "Bearer " || auth["supported"] != false {
		t.Fatalf("an unknown stored mode is shown as %v", auth)
	}
	p := wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 409, "auth_unsupported")
	if p["auth_mode"] != "Bearer " {
		t.Errorf("problem %v", p)
	}
	h.patch(id, map[string]any{"auth": map[string]any{"mode": "bearer"}}) // fixes the mode, keeps the credential
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("after fixing the mode: %v", rep)
	}
}

// The far side's self-description is answered as JSON text, never markup.
func TestHostileServerInfoIsText(t *testing.T) {
	h := newHarness(t, withMCP)
	id := h.configureID(configureBody("hostile", mcptest.Hostile(t).URL))
	r := h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("answer %d %v", r.status, r.header)
	}
	if bytes.Contains(r.body, []byte("<img")) {
		t.Errorf("raw markup in the answer: %s", r.body)
	}
	if info := r.json(t)["server_info"].(map[string]any); info["name"] != mcptest.HostileName {
		t.Errorf("server name %v, want it verbatim as text", info["name"])
	}
	if bytes.Contains(mustGet(h, id), []byte("onerror")) {
		t.Errorf("the self-description was stored")
	}
}

func mustGet(h *harness, id string) []byte {
	return h.do("GET", "/v1/mcp/servers/"+id, h.operatorKey(), nil).body
}

func TestAdminOnly(t *testing.T) {
	h := newHarness(t, withMCP)
	id := h.configureID(configureBody("modern", mcptest.Modern(t).URL))
	for _, role := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator} {
		key := h.Keys[role]
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/mcp/servers", configureBody("x", "https://example.com/mcp")},
			{"PATCH", "/v1/mcp/servers/" + id, map[string]any{"enabled": false}},
			{"POST", "/v1/mcp/servers/" + id + "/test-connection", nil},
			{"POST", "/v1/mcp/servers/" + id + "/import", nil},
		} {
			wantProblem(t, h.do(c.method, c.path, key, c.body), 403, "forbidden")
		}
	}
	if obj := h.fetchServer(id); obj["enabled"] != true || obj["last_contact"] != nil {
		t.Errorf("a refused request changed the server: %v", obj)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/servers", "", configureBody("x", "https://example.com/mcp")), 401, "unauthorized")
}

// Another tenant can neither see nor change a server's configuration, through the API or the database.
func TestConfigTenantIsolation(t *testing.T) {
	h := newHarness(t, withMCP)
	b := configureBody("modern", mcptest.Modern(t).URL)
	b["data_class"] = "public"
	id := h.configureID(b)
	h.importCatalogue(id)
	skill := h.fullSkills(id)["echo"].SkillID
	bTenant, keysB := h.NewTenant("globex")
	other := keysB[persistence.RoleAdmin]
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/mcp/servers/" + id, nil},
		{"PATCH", "/v1/mcp/servers/" + id, map[string]any{"enabled": false}},
		{"POST", "/v1/mcp/servers/" + id + "/test-connection", nil},
		{"POST", "/v1/mcp/servers/" + id + "/import", nil},
		{"POST", "/v1/mcp/skills/" + skill + "/enable", nil},
	} {
		wantProblem(t, h.do(c.method, c.path, other, c.body), 404, "not_found")
	}
	// The same module name is free in the other tenant.
	r := h.do("POST", "/v1/mcp/servers", other, configureBody("modern", mcptest.Modern(t).URL))
	if r.status != http.StatusCreated {
		t.Fatalf("the same module name in another tenant: %d %s", r.status, r.body)
	}
	if obj := h.fetchServer(id); obj["enabled"] != true || obj["import_status"] != "succeeded" {
		t.Fatalf("another tenant changed the server: %v", obj)
	}
	// In the database, as the app role scoped to the other tenant.
	ctx := context.Background()
	tx, err := h.DB.AppPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := persistence.SetTenant(ctx, tx, bTenant); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM server_config WHERE server_id = $1`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the other tenant sees %d rows (%v)", n, err)
	}
	tag, err := tx.Exec(ctx, `UPDATE server_config SET enabled = false, credential = NULL WHERE server_id = $1`, id)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("the other tenant updated %d rows (%v)", tag.RowsAffected(), err)
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO server_config (server_id, tenant_id) VALUES ($1, $2)`, id, bTenant); err == nil {
		t.Fatal("the other tenant attached a configuration row to a server it cannot see")
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM server_config WHERE server_id = $1`, id); err == nil {
		t.Fatal("the app role may delete configuration rows")
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"MCPFLEET_DATABASE_URL":       "postgres://cyberos_app@127.0.0.1/x",
		"MCPFLEET_SECRET_KEY":         testSecretKey,
		"MCPFLEET_ENDPOINT_ALLOWLIST": " 127.0.0.1, localhost ,10.0.0.0/8,,::1",
		"MCPFLEET_MCP_TIMEOUT":        "3s",
	}
	getenv := func(k string) string { return env[k] }
	c, err := service.FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.SecretKey == nil || !slices.Equal(c.EndpointAllowlist, []string{"127.0.0.1", "localhost", "10.0.0.0/8", "::1"}) || c.MCPTimeout != 3*time.Second {
		t.Fatalf("config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := sprintf("%+v %#v", c, c); strings.Contains(s, testSecretKey[:16]) {
		t.Errorf("the config prints the secret key")
	}
	bad := "zz" + testSecretKey[2:]
	env["MCPFLEET_SECRET_KEY"] = bad
	if _, err := service.FromEnv(getenv); err == nil || strings.Contains(err.Error(), bad) {
		t.Errorf("a bad key: %v", err)
	}
	env["MCPFLEET_SECRET_KEY"] = testSecretKey[:32]
	if _, err := service.FromEnv(getenv); err == nil {
		t.Error("a 16-byte key was accepted")
	}
	env["MCPFLEET_SECRET_KEY"] = ""
	env["MCPFLEET_ENDPOINT_ALLOWLIST"] = "http://x/,a b"
	c, err = service.FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil {
		t.Error("allow-list entries that are not hosts were accepted")
	}
}

// A contact is evidence, not a heartbeat and not a registration: it leaves last_heartbeat_at alone and
// never revives a deregistered server.
func TestContactIsNotAHeartbeat(t *testing.T) {
	h := newHarness(t, withMCP)
	modern := mcptest.Modern(t)
	body := registration("calendar")
	body["endpoint"] = modern.URL
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), body)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["server_id"].(string)
	hb := h.fetchServer(id)["last_heartbeat_at"]
	h.advance(35 * time.Second)
	h.runMonitor()
	h.testConnection(id)
	obj := h.fetchServer(id)
	if obj["status"] != "healthy" || obj["last_heartbeat_at"] != hb {
		t.Fatalf("after a contact: status %v, last_heartbeat_at %v (was %v)", obj["status"], obj["last_heartbeat_at"], hb)
	}
	if r := h.do("POST", "/v1/mcp/servers/deregister", h.module(), map[string]string{"server_id": id}); r.status != 200 {
		t.Fatalf("deregister: %d %s", r.status, r.body)
	}
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("test connection of a deregistered server: %v", rep)
	}
	if s := h.status(id); s != "deregistered" {
		t.Fatalf("a contact revived a deregistered server: %s", s)
	}
}

// The endpoint policy holds at every operation, not only when the endpoint was stored; and a credential
// opens only with its key, on its own row.
func TestStoredConfigurationCheckedAgain(t *testing.T) {
	const token = "tok-checked-again"
	h := newHarness(t, withMCP)
	b := configureBody("bearer", mcptest.Bearer(t, token).URL)
	b["auth"] = map[string]any{"mode": "bearer", "credential": token}
	id := h.configureID(b)
	other := h.configureID(configureBody("open", mcptest.Modern(t).URL))
	// The sealed credential copied onto another server's row does not open there.
	admin := h.DB.AdminPool(t)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `UPDATE server_config SET auth_mode = 'bearer',
		credential = (SELECT credential FROM server_config WHERE server_id = $1) WHERE server_id = $2`, id, other); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+other+"/test-connection", h.adminKey(), nil), 409, "credential_unreadable")
	// Another key opens nothing.
	h.Restart(func(c *service.Config, _ *service.Options) {
		k, _ := secrets.ParseKey(strings.Repeat("ab", 32))
		c.SecretKey = k
	})
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 409, "credential_unreadable")
	// Without the allow-list entry the stored loopback endpoint is refused, before anything is sent.
	h.Restart(func(c *service.Config, _ *service.Options) {
		withMCP(c, &service.Options{})
		c.EndpointAllowlist = nil
	})
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 400, "endpoint_refused")
	h.Restart(func(c *service.Config, _ *service.Options) { withMCP(c, &service.Options{}) })
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("with the key and the allow-list back: %v", rep)
	}
}
