package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// harness is a running service on a fresh database, with a fake clock the test advances and a manual
// monitor (servicetest.Env), and the service tests' helpers.
type harness struct{ *servicetest.Env }

type harnessOpt = servicetest.Option

func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	return &harness{servicetest.Start(t, opts...)}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %s", r.status, err, r.body)
	}
	return m
}

// do sends a request with the given key ("" for none) and a JSON body (nil for none).
func (h *harness) do(method, path, key string, body any, hdr ...string) response {
	h.T.Helper()
	r := h.Do(method, path, key, body, hdr...)
	return response{status: r.Status, header: r.Header, body: r.Body}
}

func (h *harness) module() string { return h.Keys[persistence.RoleModule] }

func registration(module string, tools ...string) map[string]any {
	var ts []map[string]any
	for _, name := range tools {
		ts = append(ts, map[string]any{"name": name, "description": "does " + name,
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}})
	}
	body := map[string]any{"module_name": module, "version": "1.3.2", "supported_protocols": []string{"2025-11-25"}}
	if ts != nil {
		body["capability_advertisement"] = map[string]any{"tools": ts}
	}
	return body
}

// register registers module with the module key and returns its server_id.
func (h *harness) register(module string, tools ...string) string {
	h.T.Helper()
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), registration(module, tools...))
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.T.Fatalf("register %s: %d %s", module, r.status, r.body)
	}
	return r.json(h.T)["server_id"].(string)
}

func (h *harness) heartbeat(id string) response {
	h.T.Helper()
	return h.do("POST", "/v1/mcp/servers/heartbeat", h.module(), map[string]string{"server_id": id})
}

func (h *harness) mustHeartbeat(id string) map[string]any {
	h.T.Helper()
	r := h.heartbeat(id)
	if r.status != http.StatusOK {
		h.T.Fatalf("heartbeat %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.T)
}

func (h *harness) advance(d time.Duration) { h.Clock.Advance(d) }

func (h *harness) runMonitor() { h.T.Helper(); h.RunMonitor() }

// fetchServer reads the server through the API (so from PostgreSQL, as committed).
func (h *harness) fetchServer(id string) map[string]any {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id, h.Keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("get server %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.T)
}

func (h *harness) status(id string) string { return h.fetchServer(id)["status"].(string) }

type skillView struct {
	Name      string `json:"name"`
	Enabled   bool   `json:"enabled"`
	Available bool   `json:"available"`
	Orphaned  bool   `json:"orphaned"`
}

func (h *harness) skills(id string) []skillView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id+"/skills", h.Keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("skills %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Skills []skillView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	return out.Skills
}

type auditView struct {
	EventID string `json:"event_id"`
	Kind    string `json:"kind"`
	Status  string `json:"status"`
	From    string `json:"from"`
	TraceID string `json:"trace_id"`
	Module  string `json:"module_name"`
	Version string `json:"version"`
}

func (h *harness) audit(id string) []auditView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/audit?server_id="+id, h.Keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("audit %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Events []auditView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	return out.Events
}

func kinds(events []auditView) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes (the one helper, internal/wait).
var waitFor = wait.For

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }
