package ui_test

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// env is a running service on a fresh database (servicetest.Env): a fake clock the test advances, a
// manual monitor, manual probes, loopback MCP endpoints allow-listed, and one tenant with a key of
// each role. A restart comes back on the same port, so a browser can reconnect.
type env struct{ *servicetest.Env }

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{servicetest.Start(t, servicetest.MCPClient)}
	e.Cfg.HTTPAddr = e.Svc.Addr()
	return e
}

// restart stops the service and starts a new one on the same address, database and clock.
func (e *env) restart() {
	e.T.Helper()
	e.Restart(servicetest.MCPClient)
}

func (e *env) url() string { return e.Svc.URL() }

// api sends a JSON request with key and decodes a JSON object answer.
func (e *env) api(method, path, key string, body any) (int, map[string]any) {
	e.T.Helper()
	if body == nil {
		body = []byte{} // sent as application/json, like every request of the dashboard's tests
	}
	r := e.Do(method, path, key, body)
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return r.Status, m
}

// register registers a module (no tools) and returns its server_id.
func (e *env) register(module string) string {
	e.T.Helper()
	st, m := e.api("POST", "/v1/mcp/servers/register", e.Keys[persistence.RoleModule], map[string]any{
		"module_name": module, "version": "1.0.0", "supported_protocols": []string{"2025-11-25"},
	})
	if st != http.StatusCreated && st != http.StatusOK {
		e.T.Fatalf("register %s: %d %v", module, st, m)
	}
	return m["server_id"].(string)
}

// configure configures a push-liveness server at endpoint with a data class ("" for none) and returns
// its server_id.
func (e *env) configure(module, endpoint, dataClass string) string {
	e.T.Helper()
	body := map[string]any{"module_name": module, "endpoint": endpoint, "liveness": "push"}
	if dataClass != "" {
		body["data_class"] = dataClass
	}
	st, m := e.api("POST", "/v1/mcp/servers", e.Keys[persistence.RoleAdmin], body)
	if st != http.StatusCreated {
		e.T.Fatalf("configure %s: %d %v", module, st, m)
	}
	return m["server_id"].(string)
}

// monitor advances the fake clock by d and runs one monitor pass.
func (e *env) monitor(d time.Duration) {
	e.T.Helper()
	e.Clock.Advance(d)
	e.RunMonitor()
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
	e.T.Helper()
	return e.parkCallAs(e.agentKey(), skill, arguments)
}

// parkCallAs is parkCall with the requesting key.
func (e *env) parkCallAs(key, skill, arguments string) string {
	e.T.Helper()
	st, m := e.api("POST", "/v1/mcp/calls", key, map[string]any{
		"run_id": "run-1", "skill_id": skill, "arguments": json.RawMessage(arguments),
	})
	if st != http.StatusAccepted || m["state"] != "awaiting_approval" {
		e.T.Fatalf("park a call: %d %v", st, m)
	}
	return m["call_id"].(string)
}

// agentKey is a second admin key of the tenant (not safe for concurrent first use): the key the
// calls are requested with, so the admin key a test signs in with may approve them (four eyes).
func (e *env) agentKey() string { return e.SecondAdminKey() }

// skillID returns the skill_id of tool on server.
func skillID(t testing.TB, e *env, server, tool string) string {
	t.Helper()
	st, m := e.api("GET", "/v1/mcp/servers/"+server+"/skills", e.Keys[persistence.RoleOperator], nil)
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
