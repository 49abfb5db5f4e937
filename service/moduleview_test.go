package service_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// A module key reads a failed probe's reason and a failed import's error as generic phrases, in the
// list (with and without advertisements) and in the single-server answer: they say where a host name
// resolves from where this service stands. Operators and administrators read the detail.
func TestModuleKeysDoNotReadProbeOrImportDetail(t *testing.T) {
	// Configured while loopback was allowed, then the allow-list tightened: a connection to localhost
	// is refused when dialled, and the refusal says what the name resolved to.
	h := newHarness(t, withMCP)
	b := configureBody("unreachable", "http://localhost:9/mcp")
	b["liveness"], b["data_class"] = "probe", "internal"
	id := h.configureID(b)
	h.Restart(withMCP, func(c *service.Config, _ *service.Options) { c.EndpointAllowlist = []string{"192.0.2.1"} })
	if imp := h.importCatalogue(id); imp["import_status"] != "failed" {
		t.Fatalf("import from a refused address: %v", imp)
	}
	if err := h.Svc.Remote().RunProbes(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for role, key := range h.Keys {
		views := map[string]map[string]any{"GET /v1/mcp/servers/{id}": h.do("GET", "/v1/mcp/servers/"+id, key, nil).json(t)}
		for _, q := range []string{"", "?include=capability_advertisement"} {
			r := h.do("GET", "/v1/mcp/servers"+q, key, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s: list%s: %d %s", role, q, r.status, r.body)
			}
			for _, it := range r.json(t)["servers"].([]any) {
				if obj := it.(map[string]any); obj["server_id"] == id {
					views["GET /v1/mcp/servers"+q] = obj
				}
			}
		}
		if len(views) != 3 {
			t.Fatalf("%s: the server is missing from a list: %d views", role, len(views))
		}
		for where, obj := range views {
			probe, _ := obj["last_probe"].(map[string]any)
			reason, _ := probe["reason"].(string)
			importErr, _ := obj["import_error"].(string)
			if probe["reachable"] != false || reason == "" || importErr == "" || obj["import_status"] != "failed" {
				t.Fatalf("%s %s: last_probe %v, import_error %q: want a failed probe with a reason and an import error", role, where, probe, importErr)
			}
			detailed := strings.Contains(reason, "resolves to") && strings.Contains(importErr, "resolves to")
			if role == persistence.RoleModule {
				if strings.Contains(reason+importErr, "resolves") || strings.Contains(reason+importErr, "localhost") {
					t.Errorf("a module key reads the address in %s: reason %q, import_error %q", where, reason, importErr)
				}
				if probe["failure_class"] == "" || probe["failure_class"] == nil {
					t.Errorf("a module key lost the failure class in %s: %v", where, probe)
				}
			} else if !detailed {
				t.Errorf("%s reads no detail in %s: reason %q, import_error %q", role, where, reason, importErr)
			}
		}
	}
}

// A module key reads an administrator's server without its endpoint (null), in the list and in the
// single-server answer; a self-registered server's endpoint (its module gave it) stays visible to it, and
// operators and administrators read both.
func TestModuleKeysDoNotReadAdminEndpoints(t *testing.T) {
	h := newHarness(t, withMCP)
	admin := h.configureID(configureBody("configured", "http://127.0.0.1:9/mcp"))
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), echoRegistration("selfreg", "http://127.0.0.1:9/self"))
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	self := r.json(t)["server_id"].(string)
	for role, key := range h.Keys {
		single := map[string]map[string]any{}
		for _, id := range []string{admin, self} {
			single[id] = h.do("GET", "/v1/mcp/servers/"+id, key, nil).json(t)
		}
		listed := map[string]map[string]any{}
		for _, it := range h.do("GET", "/v1/mcp/servers", key, nil).json(t)["servers"].([]any) {
			obj := it.(map[string]any)
			listed[obj["server_id"].(string)] = obj
		}
		for where, views := range map[string]map[string]map[string]any{"single": single, "list": listed} {
			wantAdmin := any("http://127.0.0.1:9/mcp")
			if role == persistence.RoleModule {
				wantAdmin = nil
			}
			if got := views[admin]["endpoint"]; got != wantAdmin {
				t.Errorf("%s, %s: the administrator's server's endpoint %v, want %v", role, where, got, wantAdmin)
			}
			if got := views[self]["endpoint"]; got != "http://127.0.0.1:9/self" {
				t.Errorf("%s, %s: the self-registered server's endpoint %v", role, where, got)
			}
		}
	}
}
