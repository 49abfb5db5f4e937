package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/service"
)

// harness is a running service on a fresh database, with a fake clock the test advances and a manual
// monitor (the seed's TestContext: advance_time, run_monitor, send_heartbeat, fetch_server).
type harness struct {
	t      testing.TB
	db     *pgtest.DB
	svc    *service.Service
	clock  *health.FakeClock
	cfg    service.Config
	tenant uuid.UUID
	keys   map[persistence.Role]string
	admin  *persistence.Admin
	// approver is a second admin key of the tenant, made on first use (approverKey).
	approver string
}

type harnessOpt func(*service.Config, *service.Options)

func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	h := &harness{t: t, db: db, admin: admin, keys: map[persistence.Role]string{},
		clock: health.NewFakeClock(time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC))}
	h.tenant, h.keys = h.newTenant("acme")
	h.cfg = service.Config{
		DatabaseURL: db.AppURL, HTTPAddr: "127.0.0.1:0", HeartbeatInterval: 10 * time.Second,
		MonitorInterval: 5 * time.Second, StampFlushInterval: 50 * time.Millisecond, WriteTimeout: 5 * time.Second,
		DBMaxConns: 8,
	}
	sopt := service.Options{Clock: h.clock, ManualMonitor: true}
	for _, o := range opts {
		o(&h.cfg, &sopt)
	}
	h.svc, err = service.Start(ctx, h.cfg, sopt)
	if err != nil {
		t.Fatalf("start service: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.svc.Close(c); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return h
}

// restart stops the service and starts a new one on the same database and clock.
func (h *harness) restart(opts ...harnessOpt) {
	h.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.svc.Close(c); err != nil {
		h.t.Fatalf("close service: %v", err)
	}
	sopt := service.Options{Clock: h.clock, ManualMonitor: true}
	for _, o := range opts {
		o(&h.cfg, &sopt)
	}
	svc, err := service.Start(context.Background(), h.cfg, sopt)
	if err != nil {
		h.t.Fatalf("restart service: %v", err)
	}
	h.svc = svc
}

func (h *harness) newTenant(name string) (uuid.UUID, map[persistence.Role]string) {
	h.t.Helper()
	ctx := context.Background()
	id, err := h.admin.CreateTenant(ctx, name)
	if err != nil {
		h.t.Fatal(err)
	}
	keys := map[persistence.Role]string{}
	for _, r := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator, persistence.RoleAdmin} {
		k, err := h.admin.CreateAPIKey(ctx, id, r)
		if err != nil {
			h.t.Fatal(err)
		}
		keys[r] = k.APIKey
	}
	return id, keys
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
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, h.svc.URL()+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *harness) module() string { return h.keys[persistence.RoleModule] }

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
	h.t.Helper()
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), registration(module, tools...))
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("register %s: %d %s", module, r.status, r.body)
	}
	return r.json(h.t)["server_id"].(string)
}

func (h *harness) heartbeat(id string) response {
	h.t.Helper()
	return h.do("POST", "/v1/mcp/servers/heartbeat", h.module(), map[string]string{"server_id": id})
}

func (h *harness) mustHeartbeat(id string) map[string]any {
	h.t.Helper()
	r := h.heartbeat(id)
	if r.status != http.StatusOK {
		h.t.Fatalf("heartbeat %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.t)
}

func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

func (h *harness) runMonitor() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.svc.Fleet().RunMonitor(ctx); err != nil {
		h.t.Fatalf("run monitor: %v", err)
	}
}

// fetchServer reads the server through the API (so from PostgreSQL, as committed).
func (h *harness) fetchServer(id string) map[string]any {
	h.t.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id, h.keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("get server %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.t)
}

func (h *harness) status(id string) string { return h.fetchServer(id)["status"].(string) }

type skillView struct {
	Name      string `json:"name"`
	Enabled   bool   `json:"enabled"`
	Available bool   `json:"available"`
	Orphaned  bool   `json:"orphaned"`
}

func (h *harness) skills(id string) []skillView {
	h.t.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id+"/skills", h.keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("skills %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Skills []skillView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.t.Fatal(err)
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
	h.t.Helper()
	r := h.do("GET", "/v1/mcp/audit?server_id="+id, h.keys[persistence.RoleOperator], nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("audit %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Events []auditView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.t.Fatal(err)
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
