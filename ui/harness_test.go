package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/service"
)

// env is a running service on a fresh database (the service harness pattern): a fake clock the test
// advances, a manual monitor, manual probes, loopback MCP endpoints allow-listed, and one tenant with
// a key of each role.
type env struct {
	t      testing.TB
	svc    *service.Service
	cfg    service.Config
	clock  *health.FakeClock
	admin  *persistence.Admin
	tenant uuid.UUID
	keys   map[persistence.Role]string
	// agent is a second admin key of the tenant, made on first use (agentKey): the key the calls are
	// requested with, so the admin key a test signs in with may approve them (four eyes).
	agent string
}

const testSecretKey = "8c1f0e3a5b7d9f2143658709badcfe1032547698badcfe1032547698badcfe10"

func newEnv(t testing.TB) *env {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e := &env{t: t, admin: admin, clock: health.NewFakeClock(time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC))}
	e.tenant, e.keys = e.newTenant("acme")
	key, err := secrets.ParseKey(testSecretKey)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = service.Config{
		DatabaseURL: db.AppURL, HTTPAddr: "127.0.0.1:0", HeartbeatInterval: 10 * time.Second,
		MonitorInterval: 5 * time.Second, StampFlushInterval: 50 * time.Millisecond, WriteTimeout: 5 * time.Second,
		DBMaxConns: 8, FlapWindow: 15 * time.Minute, FlapThreshold: 4,
		EndpointAllowlist: []string{"127.0.0.1"}, SecretKey: key, MCPTimeout: 2 * time.Second,
	}
	e.start()
	e.cfg.HTTPAddr = e.svc.Addr() // a restart comes back on the same port, so a browser can reconnect
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if e.svc != nil {
			if err := e.svc.Close(c); err != nil {
				t.Errorf("close service: %v", err)
			}
		}
	})
	return e
}

func (e *env) start() {
	e.t.Helper()
	svc, err := service.Start(context.Background(), e.cfg, service.Options{Clock: e.clock, ManualMonitor: true, ManualProbes: true})
	if err != nil {
		e.t.Fatalf("start service: %v", err)
	}
	e.svc = svc
}

// restart stops the service and starts a new one on the same address, database and clock.
func (e *env) restart() {
	e.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.svc.Close(c); err != nil {
		e.t.Fatalf("close service: %v", err)
	}
	e.svc = nil
	e.start()
}

func (e *env) newTenant(name string) (uuid.UUID, map[persistence.Role]string) {
	e.t.Helper()
	ctx := context.Background()
	id, err := e.admin.CreateTenant(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	keys := map[persistence.Role]string{}
	for _, r := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator, persistence.RoleAdmin} {
		k, err := e.admin.CreateAPIKey(ctx, id, r)
		if err != nil {
			e.t.Fatal(err)
		}
		keys[r] = k.APIKey
	}
	return id, keys
}

func (e *env) url() string { return e.svc.URL() }

// api sends a JSON request with key and decodes a JSON object answer.
func (e *env) api(method, path, key string, body any) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url()+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// register registers a module (no tools) and returns its server_id.
func (e *env) register(module string) string {
	e.t.Helper()
	st, m := e.api("POST", "/v1/mcp/servers/register", e.keys[persistence.RoleModule], map[string]any{
		"module_name": module, "version": "1.0.0", "supported_protocols": []string{"2025-11-25"},
	})
	if st != http.StatusCreated && st != http.StatusOK {
		e.t.Fatalf("register %s: %d %v", module, st, m)
	}
	return m["server_id"].(string)
}

// configure configures a push-liveness server at endpoint with a data class ("" for none) and returns
// its server_id.
func (e *env) configure(module, endpoint, dataClass string) string {
	e.t.Helper()
	body := map[string]any{"module_name": module, "endpoint": endpoint, "liveness": "push"}
	if dataClass != "" {
		body["data_class"] = dataClass
	}
	st, m := e.api("POST", "/v1/mcp/servers", e.keys[persistence.RoleAdmin], body)
	if st != http.StatusCreated {
		e.t.Fatalf("configure %s: %d %v", module, st, m)
	}
	return m["server_id"].(string)
}

// monitor advances the fake clock by d and runs one monitor pass.
func (e *env) monitor(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.svc.Fleet().RunMonitor(ctx); err != nil {
		e.t.Fatalf("run monitor: %v", err)
	}
}

// artifactDir is the repository's git-ignored artifacts/ folder.
func artifactDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	out := filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

func newLoopbackListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// parkCall asks the gateway for a call of skill with arguments (JSON) by the agent's key, and returns
// its call_id; the server requires approval, so the call is parked.
func (e *env) parkCall(skill, arguments string) string {
	e.t.Helper()
	return e.parkCallAs(e.agentKey(), skill, arguments)
}

// parkCallAs is parkCall with the requesting key.
func (e *env) parkCallAs(key, skill, arguments string) string {
	e.t.Helper()
	st, m := e.api("POST", "/v1/mcp/calls", key, map[string]any{
		"run_id": "run-1", "skill_id": skill, "arguments": json.RawMessage(arguments),
	})
	if st != http.StatusAccepted || m["state"] != "awaiting_approval" {
		e.t.Fatalf("park a call: %d %v", st, m)
	}
	return m["call_id"].(string)
}

// agentKey is a second admin key of the tenant (not safe for concurrent first use).
func (e *env) agentKey() string {
	e.t.Helper()
	if e.agent == "" {
		k, err := e.admin.CreateAPIKey(context.Background(), e.tenant, persistence.RoleAdmin)
		if err != nil {
			e.t.Fatal(err)
		}
		e.agent = k.APIKey
	}
	return e.agent
}

// skillID returns the skill_id of tool on server.
func skillID(t testing.TB, e *env, server, tool string) string {
	t.Helper()
	st, m := e.api("GET", "/v1/mcp/servers/"+server+"/skills", e.keys[persistence.RoleOperator], nil)
	if st != http.StatusOK {
		t.Fatalf("skills: %d %v", st, m)
	}
	for _, k := range m["skills"].([]any) {
		if k := k.(map[string]any); k["name"] == tool {
			return k["skill_id"].(string)
		}
	}
	t.Fatalf("no skill %s on %s", tool, server)
	return ""
}
