package service_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/httpapi/apicheck"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// TestFleetclientAgreesWithOpenAPI proves the hand-written Go client and GET /openapi.json's document
// agree, in two ways. Statically, every type fleetclient sends or decodes has only fields the document
// has, of the same JSON types (and a request type can send every required field). Dynamically, every
// exported method of *fleetclient.Client is called against the running service behind the OpenAPI
// checker (the harness's default), which validates each request it sends and each answer it decodes,
// error answers included; a method added to the client without a call here fails the test.
func TestFleetclientAgreesWithOpenAPI(t *testing.T) {
	doc, err := apicheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema   string
		v        any
		complete bool
		ignore   []string
	}{
		{"RegisterRequest", fleetclient.RegisterRequest{}, true, nil},
		{"ServerIDRequest", struct {
			ServerID string `json:"server_id"`
		}{}, true, nil},
		// fleetclient.Server serves every answer with a server; only the detail (GetServer, ListServers)
		// has an endpoint, which stays empty in the others.
		{"Registered", fleetclient.RegisterResponse{}, false, []string{"Registered.endpoint"}},
		{"Heartbeat", fleetclient.HeartbeatResponse{}, false, nil},
		{"Server", fleetclient.Server{}, false, []string{"Server.endpoint"}}, // Deregister's answer
		{"ServerDetail", fleetclient.Server{}, false, nil},
		{"ServerPage", fleetclient.ServerPage{}, false, nil},
		{"Skill", fleetclient.Skill{}, false, nil},
		{"AuditEvent", fleetclient.AuditEvent{}, false, nil},
		{"ToolChange", fleetclient.ToolChange{}, false, nil},
		// RFC 9457's instance, which the client reads if present and this service never sends.
		{"Problem", fleetclient.ProblemError{}, false, []string{"Problem.instance"}},
	} {
		if err := doc.CheckType(c.schema, reflect.TypeOf(c.v), c.complete, c.ignore...); err != nil {
			t.Errorf("fleetclient %T and the document's %s: %v", c.v, c.schema, err)
		}
	}

	h := newHarness(t)
	ctx := context.Background()
	mod := fleetclient.New(h.Svc.URL(), h.module())
	op := fleetclient.New(h.Svc.URL(), h.Keys[persistence.RoleOperator])
	called := map[string]bool{}
	call := func(name string, err error) {
		t.Helper()
		called[name] = true
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	req := fleetclient.RegisterRequest{ModuleName: "calendar", Version: "1.0.0", SupportedProtocols: []string{"2025-11-25"},
		CapabilityAdvertisement: fleetclient.CapabilityAdvertisement{Tools: []fleetclient.Tool{{Name: "list", Description: "lists",
			InputSchema: []byte(`{"type":"object"}`)}}}}
	reg, err := mod.Register(ctx, req)
	call("Register", err)
	if reg == nil {
		t.Fatal("no registration")
	}
	if _, err := mod.Register(ctx, fleetclient.RegisterRequest{ModuleName: "bare", Version: "1", SupportedProtocols: []string{"2025-11-25"}}); err != nil {
		t.Errorf("register without tools: %v", err)
	}
	_, err = mod.Heartbeat(ctx, reg.ServerID)
	call("Heartbeat", err)
	_, err = mod.ListServers(ctx, fleetclient.ListOptions{Limit: 1, IncludeCapabilityAdvertisement: true})
	call("ListServers", err)
	n := 0
	for _, err := range mod.AllServers(ctx, fleetclient.ListOptions{Limit: 1, Status: fleetclient.StatusHealthy}) {
		call("AllServers", err)
		n++
	}
	if n != 2 {
		t.Errorf("AllServers listed %d servers, want 2", n)
	}
	// A full page carries a cursor, so two servers at one a page are two pages and, perhaps, a last empty one.
	pages, paged := 0, 0
	for page, err := range mod.ServerPages(ctx, fleetclient.ListOptions{Limit: 1, Status: fleetclient.StatusHealthy}) {
		call("ServerPages", err)
		if page != nil {
			paged += len(page.Servers)
		}
		pages++
	}
	if paged != 2 || pages < 2 {
		t.Errorf("ServerPages gave %d servers in %d pages, want 2 in at least 2", paged, pages)
	}
	_, err = mod.GetServer(ctx, reg.ServerID)
	call("GetServer", err)
	skills, err := mod.Skills(ctx, reg.ServerID)
	call("Skills", err)
	// A re-registration that changes the tool's description records a change.
	changed := req
	changed.CapabilityAdvertisement.Tools = []fleetclient.Tool{{Name: "list", Description: "lists, differently", InputSchema: []byte(`{"type":"object"}`)}}
	if _, err := mod.Register(ctx, changed); err != nil {
		t.Fatalf("re-register with a changed tool: %v", err)
	}
	if len(skills) != 1 {
		t.Fatalf("skills %+v", skills)
	}
	changes, err := op.ToolChanges(ctx, skills[0].SkillID, fleetclient.ToolChangesOptions{Limit: 10})
	call("ToolChanges", err)
	if len(changes) != 1 || changes[0].Cause != "definition" {
		t.Errorf("tool changes %+v", changes)
	}
	_, err = op.Audit(ctx, fleetclient.AuditOptions{ServerID: reg.ServerID})
	call("Audit", err)
	call("Healthz", mod.Healthz(ctx))
	call("Readyz", mod.Readyz(ctx))
	_, err = mod.Deregister(ctx, reg.ServerID)
	call("Deregister", err)
	called["BaseURL"] = mod.BaseURL() == h.Svc.URL()

	// The refusals the client interprets are answers of the document too.
	if _, err := mod.Heartbeat(ctx, reg.ServerID); !fleetclient.IsDeregistered(err) {
		t.Errorf("heartbeat after deregistration: %v, want server_deregistered", err)
	}
	if _, err := mod.Heartbeat(ctx, "62f31088-b606-4fe1-b99c-46b042765653"); !fleetclient.IsNotRegistered(err) {
		t.Errorf("heartbeat of an unknown server: %v, want server_not_registered", err)
	}
	if _, err := mod.Audit(ctx, fleetclient.AuditOptions{}); err == nil {
		t.Error("a module key read the audit log")
	}
	if err := fleetclient.New(h.Svc.URL(), "not-a-key").Healthz(ctx); err != nil {
		t.Errorf("healthz needs no key: %v", err)
	}

	ct := reflect.TypeFor[*fleetclient.Client]()
	for i := range ct.NumMethod() {
		if m := ct.Method(i).Name; !called[m] {
			t.Errorf("fleetclient.Client.%s is not exercised against the document here", m)
		}
	}
	if !called["BaseURL"] {
		t.Error("BaseURL is not the service's URL")
	}
}

// TestHarnessChecksAPI proves the harness's OpenAPI checker (servicetest) is in the path of every request: with a
// document that lacks /healthz and says a heartbeat answers no last_heartbeat_at, both exchanges are
// findings, while the served document's checker (the default) has none for them.
func TestHarnessChecksAPI(t *testing.T) {
	var raw map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI(), &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw["paths"].(map[string]any), "/healthz")
	hb := raw["components"].(map[string]any)["schemas"].(map[string]any)["Heartbeat"].(map[string]any)
	delete(hb["properties"].(map[string]any), "last_heartbeat_at")
	hb["required"] = []any{"server_id", "status"}
	b, _ := json.Marshal(raw)
	doc, err := apicheck.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var found []string
	h := newHarness(t, servicetest.APICheck(doc, func(err error) { mu.Lock(); found = append(found, err.Error()); mu.Unlock() }))
	id := h.register("calendar")
	h.mustHeartbeat(id)
	if r := h.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz: %d", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"route /healthz is not in the document", "POST /v1/mcp/servers/heartbeat → 200: the answer does not match", "GET /healthz → 200: the document does not describe this route"}
	for _, w := range want {
		if !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, w) }) {
			t.Errorf("no finding %q in %q", w, found)
		}
	}
}

// TestOpenAPIRoles sends every operation of the document with a key of each role (and without one):
// the harness's checker holds each answer to the operation's x-mcpfleet-roles — a role it lists is
// never refused as forbidden, a role it leaves out always is — and to the document's answers.
func TestOpenAPIRoles(t *testing.T) {
	doc, err := apicheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	id := h.register("calendar", "list")
	n := 0
	for path, item := range doc.T.Paths.Map() {
		for method, op := range item.Operations() {
			roles, err := apicheck.Roles(op)
			if err != nil {
				t.Fatal(err)
			}
			if path == "/mcp" || len(roles) == 0 {
				continue // the MCP endpoint has its own role tests (mcpendpoint_test.go); open operations need no key
			}
			url := strings.NewReplacer("{server_id}", id, "{skill_id}", "62f31088-b606-4fe1-b99c-46b042765653",
				"{call_id}", "62f31088-b606-4fe1-b99c-46b042765653", "{run_id}", "run-1").Replace(path)
			for _, role := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator, persistence.RoleAdmin} {
				n++
				var body any
				if op.RequestBody != nil {
					body = map[string]any{}
				}
				if path == "/v1/mcp/events" {
					h.openStream(h.Keys[role], slices.Contains(roles, string(role)))
					continue
				}
				r := h.do(method, url, h.Keys[role], body)
				forbidden := r.status == http.StatusForbidden && strings.Contains(string(r.body), "/problems/forbidden")
				if forbidden == slices.Contains(roles, string(role)) {
					t.Errorf("%s %s with a %s key: %d %s (roles %v)", method, path, role, r.status, r.body, roles)
				}
			}
			if r := h.do(method, url, "", nil); r.status != http.StatusUnauthorized {
				t.Errorf("%s %s without a key: %d, want 401", method, path, r.status)
			}
		}
	}
	if n < 60 {
		t.Errorf("only %d exchanges", n)
	}
}

// openStream opens GET /v1/mcp/events with key, expects it to be answered 200 (allowed) or 403, and
// closes it.
func (h *harness) openStream(key string, allowed bool) {
	h.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.Svc.URL()+"/v1/mcp/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	if want := map[bool]int{true: http.StatusOK, false: http.StatusForbidden}[allowed]; resp.StatusCode != want {
		h.T.Errorf("event stream: %d, want %d", resp.StatusCode, want)
	}
}

// TestOpenAPIServed: GET /openapi.json answers the embedded document, without a key.
func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/openapi.json", "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || string(r.body) != string(httpapi.OpenAPI()) {
		t.Fatalf("GET /openapi.json: %d %s, %d bytes", r.status, r.header.Get("Content-Type"), len(r.body))
	}
	if _, err := apicheck.Parse(r.body); err != nil {
		t.Fatal(err)
	}
}
