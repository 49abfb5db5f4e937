package service_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// testSecretKey is the MCPFLEET_SECRET_KEY of withMCP.
const testSecretKey = servicetest.SecretKey

// withMCP configures the MCP client side for tests against mcptest servers on 127.0.0.1: loopback
// allow-listed, a secret key, a 2 s operation deadline and manual probes.
func withMCP(c *service.Config, o *service.Options) { servicetest.MCPClient(c, o) }

// logBuffer collects the service's log lines (JSON, debug level).
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records returns the log lines, each decoded as a JSON object.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", sc.Bytes())
		}
		out = append(out, m)
	}
	return out
}

// withLogs sends the service's logs, at debug level, to buf.
func withLogs(buf *logBuffer) harnessOpt {
	return func(_ *service.Config, o *service.Options) {
		o.Log = telemetry.NewLogger(buf, slog.LevelDebug)
	}
}

func (h *harness) adminKey() string    { return h.Keys[persistence.RoleAdmin] }
func (h *harness) operatorKey() string { return h.Keys[persistence.RoleOperator] }

// configureBody is a configured-server body for endpoint with push liveness and no credential.
func configureBody(module, endpoint string) map[string]any {
	return map[string]any{"module_name": module, "endpoint": endpoint, "liveness": "push"}
}

// configure configures a server with the admin key and returns its object.
func (h *harness) configure(body map[string]any) map[string]any {
	h.T.Helper()
	r := h.do("POST", "/v1/mcp/servers", h.adminKey(), body)
	if r.status != http.StatusCreated {
		h.T.Fatalf("configure %v: %d %s", body["module_name"], r.status, r.body)
	}
	return r.json(h.T)
}

// configureID configures a server and returns its server_id.
func (h *harness) configureID(body map[string]any) string {
	h.T.Helper()
	return h.configure(body)["server_id"].(string)
}

func (h *harness) testConnection(id string) map[string]any {
	h.T.Helper()
	r := h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("test connection %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.T)
}

func (h *harness) importCatalogue(id string) map[string]any {
	h.T.Helper()
	r := h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("import %s: %d %s", id, r.status, r.body)
	}
	return r.json(h.T)
}

// patch PATCHes server id with the admin key and returns the server.
//
// A PATCH that switches approval off is answered 202 with a pending change: patch confirms it with the
// tenant's second admin key (four eyes on configuration) and returns the server as the confirmation
// leaves it.
func (h *harness) patch(id string, body map[string]any) map[string]any {
	h.T.Helper()
	r := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), body)
	switch r.status {
	case http.StatusOK:
		return r.json(h.T)
	case http.StatusAccepted:
		change := r.json(h.T)["pending_change"].(map[string]any)["change_id"].(string)
		c := h.do("POST", "/v1/mcp/servers/"+id+"/config-changes/"+change+"/confirm", h.SecondAdminKey(), nil)
		if c.status != http.StatusOK {
			h.T.Fatalf("confirm %s of %s: %d %s", change, id, c.status, c.body)
		}
		return c.json(h.T)["server"].(map[string]any)
	}
	h.T.Fatalf("patch %s %v: %d %s", id, body, r.status, r.body)
	return nil
}

// fullSkill is a skill as the API shows it, with every field the MCP client tests read.
type fullSkill struct {
	SkillID       string          `json:"skill_id"`
	Name          string          `json:"name"`
	InputSchema   json.RawMessage `json:"input_schema"`
	Enabled       bool            `json:"enabled"`
	Available     bool            `json:"available"`
	Orphaned      bool            `json:"orphaned"`
	ServerEnabled bool            `json:"server_enabled"`
	Callable      bool            `json:"callable"`
}

func (h *harness) fullSkills(id string) map[string]fullSkill {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id+"/skills", h.operatorKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("skills %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Skills []fullSkill }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	m := map[string]fullSkill{}
	for _, k := range out.Skills {
		m[k.Name] = k
	}
	return m
}

// wantProblem checks r is a problem+json of status and type slug.
func wantProblem(t testing.TB, r response, status int, slug string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("content type %q, want application/problem+json: %s", ct, r.body)
	}
	p := r.json(t)
	if p["type"] != "https://mcpfleet.dev/problems/"+slug {
		t.Fatalf("problem type %v, want %s: %s", p["type"], slug, r.body)
	}
	return p
}

// timeField parses an RFC 3339 field of m, or returns the zero time for null.
func timeField(t testing.TB, m map[string]any, key string) time.Time {
	t.Helper()
	v, ok := m[key]
	if !ok {
		t.Fatalf("field %q missing in %v", key, m)
	}
	if v == nil {
		return time.Time{}
	}
	ts, err := time.Parse(time.RFC3339Nano, v.(string))
	if err != nil {
		t.Fatalf("field %q = %v: %v", key, v, err)
	}
	return ts
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
