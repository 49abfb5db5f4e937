package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/mcpendpoint"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// Protocol revisions the endpoint tests speak: a session (initialize) and the sessionless 2026-07-28.
const (
	legacyMCP = "2025-11-25"
	modernMCP = "2026-07-28"
)

// bearer adds an Authorization header to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpSession is an SDK client connected to the service's /mcp with key, speaking version; changes counts
// the notifications/tools/list_changed it receives.
type mcpSession struct {
	*mcp.ClientSession
	changes  atomic.Int64
	progress atomic.Int64
}

func (h *harness) connectMCP(key, version string) (*mcpSession, error) {
	h.T.Helper()
	s := &mcpSession{}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { s.changes.Add(1) },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { s.progress.Add(1) },
	})
	tr := &mcp.StreamableClientTransport{Endpoint: h.Svc.URL() + "/mcp", HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}, MaxRetries: -1}
	cs, err := c.Connect(testCtx(h.T), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	h.T.Cleanup(func() { _ = cs.Close() })
	s.ClientSession = cs
	return s, nil
}

func (h *harness) mustConnectMCP(key, version string) *mcpSession {
	h.T.Helper()
	s, err := h.connectMCP(key, version)
	if err != nil {
		h.T.Fatalf("connect to /mcp (%s): %v", version, err)
	}
	return s
}

// toolNames lists the session's tools by name.
func toolNames(t testing.TB, s *mcpSession) []string {
	t.Helper()
	var names []string
	for tool, err := range s.Tools(testCtx(t), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	return names
}

func listTools(t testing.TB, s *mcpSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tool, err := range s.Tools(testCtx(t), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		out[tool.Name] = tool
	}
	return out
}

func callText(t testing.TB, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func withMCPEndpoint(mode string) harnessOpt {
	return func(c *service.Config, o *service.Options) {
		withGateway(10*time.Second, 4)(c, o)
		c.MCP.PollInterval = 50 * time.Millisecond
		if mode != "" {
			c.MCP.Unavailable = mcpendpoint.Mode(mode)
		}
	}
}

// TestMCPEndpointListAndCall: an administrator's SDK client, in a session and without one, lists the
// tenant's callable tools (never a disabled one, another tenant's, or one of a disabled server) with
// their normalised schemas and far-side descriptions, and calls one through the gateway: the call is in
// the run's events, the session being the run.
func TestMCPEndpointListAndCall(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	srv := mcptest.Tools(t)
	_, _ = h.gatewayServer("tools", srv.URL, false, "echo", "text", "is_error")
	h.advance(time.Second) // registered later: its names are qualified where they collide
	offID, _ := h.gatewayServer("off", mcptest.Tools(t).URL, false, "echo")
	h.patch(offID, map[string]any{"enabled": false})
	// Another tenant with a tool of its own, enabled.
	other := &harness{h.As(h.NewTenant("globex"))}
	other.gatewayServer("secret", mcptest.Tools(t).URL, false, "big_text")

	for _, version := range []string{legacyMCP, modernMCP} {
		t.Run(version, func(t *testing.T) {
			s := h.mustConnectMCP(h.adminKey(), version)
			if got, want := toolNames(t, s), []string{"echo", "is_error", "text"}; !slices.Equal(got, want) {
				t.Fatalf("tools/list = %v, want %v", got, want)
			}
			tools := listTools(t, s)
			if tools["echo"].Description != "Echoes its text argument." {
				t.Errorf("description %q", tools["echo"].Description)
			}
			schema, _ := json.Marshal(tools["echo"].InputSchema)
			if !strings.Contains(string(schema), `"text"`) || !strings.Contains(string(schema), `"object"`) {
				t.Errorf("schema %s", schema)
			}
			params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}
			if version == modernMCP {
				params.Meta = mcp.Meta{"dev.mcpfleet/run_id": "agent-run-7"}
			}
			res, err := s.CallTool(testCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || callText(t, res) != "echo: hi" {
				t.Fatalf("echo: isError=%v %q", res.IsError, callText(t, res))
			}
			callID, _ := res.Meta["dev.mcpfleet/call_id"].(string)
			c := h.getCall(callID)
			if c.State != "succeeded" {
				t.Fatalf("call %+v", c)
			}
			if version == legacyMCP && c.RunID != "mcp-"+s.ID() {
				t.Errorf("run %q, want the session mcp-%s", c.RunID, s.ID())
			}
			if version == modernMCP && c.RunID != "agent-run-7" {
				t.Errorf("run %q, want the client's agent-run-7", c.RunID)
			}
			if kinds := eventKinds(h.runEvents(c.RunID)); !slices.Contains(kinds, "call.succeeded:ok") {
				t.Errorf("run events %v", kinds)
			}
			// A failed tool is a tool error naming the server, never a protocol error.
			if version == legacyMCP {
				res, err = s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "is_error"})
				if err != nil || !res.IsError || !strings.Contains(callText(t, res), `server "tools"`) {
					t.Fatalf("is_error: %v %+v %q", err, res, callText(t, res))
				}
				// A tool that is not listed (a disabled one; one of no server here) is a clear tool error.
				for name, why := range map[string]string{"big_text": "is disabled", "nope": "no tool"} {
					res, err = s.CallTool(testCtx(t), &mcp.CallToolParams{Name: name})
					if err != nil || !res.IsError || !strings.Contains(callText(t, res), why) {
						t.Fatalf("%s: %v %+v %q", name, err, res, callText(t, res))
					}
				}
			}
			if version == modernMCP {
				// Without a session and without a run id the call is refused, never made.
				res, err = s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
				if err != nil || !res.IsError || !strings.Contains(callText(t, res), "dev.mcpfleet/run_id") {
					t.Fatalf("no run: %v %+v %q", err, res, callText(t, res))
				}
			}
		})
	}
	if n := srv.Calls("text"); n != 0 {
		t.Errorf("the refused call reached the server %d times", n)
	}
	// The other tenant sees its own tool only.
	s := other.mustConnectMCP(other.adminKey(), legacyMCP)
	if got := toolNames(t, s); !slices.Equal(got, []string{"big_text"}) {
		t.Errorf("other tenant lists %v", got)
	}
}

// rawMCP posts one JSON-RPC body to /mcp with the given headers and returns status, headers and body.
func (h *harness) rawMCP(key string, body string, hdr ...string) (int, http.Header, map[string]any) {
	h.T.Helper()
	req, _ := http.NewRequest("POST", h.Svc.URL()+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, resp.Header, m
}

// TestMCPEndpointRefusals: every refusal is a JSON-RPC error with its HTTP status and type: no key, a bad
// key, a module's and an operator's key (wrong role), a foreign Host or Origin (DNS rebinding), a body
// too large, and another key's session.
func TestMCPEndpointRefusals(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"` + strings.Repeat("x", 1<<20) + `"}}}`
	cases := []struct {
		name   string
		key    string
		body   string
		hdr    []string
		status int
		slug   string
	}{
		{"no key", "", init, nil, 401, "unauthorized"},
		{"bad key", "mcpf_" + strings.Repeat("a", 43), init, nil, 401, "unauthorized"},
		{"module key", h.module(), init, nil, 403, "forbidden"},
		{"operator key", h.operatorKey(), init, nil, 403, "forbidden"},
		{"foreign host", h.adminKey(), init, []string{"Host", "evil.example:80"}, 403, "host_refused"},
		{"foreign origin", h.adminKey(), init, []string{"Origin", "https://evil.example"}, 403, "origin_refused"},
		{"body too large", h.adminKey(), big, nil, 413, "body_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, m := h.rawMCP(tc.key, tc.body, tc.hdr...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, m)
			}
			e, _ := m["error"].(map[string]any)
			data, _ := e["data"].(map[string]any)
			if m["jsonrpc"] != "2.0" || e["message"] == "" || data["type"] != tc.slug {
				t.Fatalf("not a JSON-RPC refusal of type %s: %v", tc.slug, m)
			}
			if tc.status == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// A local origin is fine.
	if status, _, m := h.rawMCP(h.adminKey(), init, "Origin", "http://localhost:3000"); status != 200 {
		t.Fatalf("local origin: %d %v", status, m)
	}
	// Another administrator's key cannot use this key's session.
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	k2, err := h.Admin.CreateAPIKey(context.Background(), h.Tenant, persistence.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	status, _, m := h.rawMCP(k2.APIKey, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, "Mcp-Session-Id", s.ID(), "Mcp-Protocol-Version", legacyMCP)
	if status != 404 {
		t.Fatalf("another key's session: %d %v", status, m)
	}
	// The wrong role cannot connect with the SDK either.
	if _, err := h.connectMCP(h.operatorKey(), legacyMCP); err == nil {
		t.Fatal("an operator's key connected")
	}
}

// TestMCPEndpointSameToolName: two servers with a tool of the same name both list, the first by its own
// name and the second qualified by its module name; each call reaches its own server, and the names stay
// when the first server is switched off and on again.
func TestMCPEndpointSameToolName(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	a, b := mcptest.Tools(t), mcptest.Tools(t)
	aID, _ := h.gatewayServer("alpha", a.URL, false, "text")
	h.gatewayServer("beta", b.URL, false, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	if got := toolNames(t, s); !slices.Equal(got, []string{"beta.text", "text"}) {
		t.Fatalf("tools/list = %v", got)
	}
	for _, name := range []string{"text", "beta.text"} {
		if res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: name}); err != nil || res.IsError {
			t.Fatalf("%s: %v %v", name, err, res)
		}
	}
	if a.Calls("text") != 1 || b.Calls("text") != 1 {
		t.Fatalf("calls: alpha %d, beta %d", a.Calls("text"), b.Calls("text"))
	}
	h.patch(aID, map[string]any{"enabled": false})
	waitFor(t, "alpha's tool off the list", 5*time.Second, func() bool { return slices.Equal(toolNames(t, s), []string{"beta.text"}) })
	h.patch(aID, map[string]any{"enabled": true})
	waitFor(t, "alpha's tool back", 5*time.Second, func() bool { return slices.Equal(toolNames(t, s), []string{"beta.text", "text"}) })
}

// TestMCPEndpointNoNameSquatting: a module key registers, before an administrator's server is imported, a
// server advertising a tool of the same name (left disabled); once it is named, it does not hold the bare name: the administrator's tool, imported later, is listed
// by its own name and a call by that name reaches the administrator's server. The squatter's tool, once
// an operator enables it, is listed qualified by its module name.
func TestMCPEndpointNoNameSquatting(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	s := h.mustConnectMCP(h.adminKey(), legacyMCP) // the tenant's poller runs from now on
	squatter := h.register("squatter", "text")
	waitFor(t, "the squatter's tool named", 5*time.Second, func() bool {
		var n int
		h.ownerQuery(`SELECT count(*) FROM mcp_tool_names`, nil, &n)
		return n == 1
	})
	srv := mcptest.Tools(t)
	h.gatewayServer("weather", srv.URL, false, "text")
	waitFor(t, "the administrator's tool listed", 5*time.Second, func() bool { return slices.Equal(toolNames(t, s), []string{"text"}) })
	if res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"}); err != nil || res.IsError {
		t.Fatalf("text: %v %+v", err, res)
	}
	if srv.Calls("text") != 1 {
		t.Fatalf("the administrator's server was asked %d times", srv.Calls("text"))
	}
	if r := h.do("POST", "/v1/mcp/skills/"+h.fullSkills(squatter)["text"].SkillID+"/enable", h.operatorKey(), nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	waitFor(t, "the squatter's tool listed qualified", 5*time.Second, func() bool {
		return slices.Equal(toolNames(t, s), []string{"squatter.text", "text"})
	})
}

// waitChanges waits until s has received at least n list_changed notifications, within one second.
func waitChanges(t testing.TB, s *mcpSession, n int64, what string) {
	t.Helper()
	waitFor(t, what+": list_changed", time.Second, func() bool { return s.changes.Load() >= n })
}

// TestMCPEndpointSessionLimit: a key may hold MCPFLEET_MCP_SESSIONS_PER_KEY sessions; the next is refused
// with a JSON-RPC error (429, too_many_sessions) until one closes, and another key is not affected.
func TestMCPEndpointSessionLimit(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""), func(c *service.Config, _ *service.Options) { c.MCP.MaxSessionsPerKey = 2 })
	first := h.mustConnectMCP(h.adminKey(), legacyMCP)
	h.mustConnectMCP(h.adminKey(), legacyMCP)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	status, hdr, m := h.rawMCP(h.adminKey(), init)
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if status != http.StatusTooManyRequests || data["type"] != "too_many_sessions" || hdr.Get("Retry-After") == "" {
		t.Fatalf("third session: %d %v", status, m)
	}
	k2, err := h.Admin.CreateAPIKey(context.Background(), h.Tenant, persistence.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	h.mustConnectMCP(k2.APIKey, legacyMCP)
	// A burst of initialize requests of a third key opens at most the limit's sessions.
	k3, err := h.Admin.CreateAPIKey(context.Background(), h.Tenant, persistence.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	h.rawMCP(k3.APIKey, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Mcp-Protocol-Version", modernMCP) // the key is cached
	var opened atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if status, _, _ := h.rawMCP(k3.APIKey, init); status == http.StatusOK {
				opened.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := opened.Load(); n != 2 {
		t.Errorf("a burst of 16 initialize requests opened %d sessions, want the limit's 2", n)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a session slot after closing one", 5*time.Second, func() bool {
		s, err := h.connectMCP(h.adminKey(), legacyMCP)
		if err == nil {
			_ = s.Close()
		}
		return err == nil
	})
}

// TestMCPEndpointStreamLimit: a key may have MCPFLEET_MCP_STREAMS_PER_KEY requests in flight; with one,
// a 2026-07-28 client's open subscriptions/listen takes it and the key's next request is refused (429,
// mcp_streams_per_key), while another key is served.
func TestMCPEndpointStreamLimit(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""), func(c *service.Config, _ *service.Options) { c.MCP.MaxStreamsPerKey = 1 })
	h.mustConnectMCP(h.adminKey(), modernMCP) // keeps subscriptions/listen open
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	waitFor(t, "the key's next request refused", 5*time.Second, func() bool {
		status, _, m := h.rawMCP(h.adminKey(), ping, "Mcp-Protocol-Version", modernMCP)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if status == http.StatusTooManyRequests && data["type"] == "mcp_streams_per_key" {
			return true
		}
		// Nothing holds the key's one slot: the client's subscriptions/listen can arrive while the
		// connecting request still holds the slot (it is released when that handler returns, after its
		// answer was sent) and is then refused for good (MaxRetries -1). Connect again; the refusal
		// above must still follow from a stream that is open.
		_, _ = h.connectMCP(h.adminKey(), modernMCP)
		return false
	})
	k2, err := h.Admin.CreateAPIKey(context.Background(), h.Tenant, persistence.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, m := h.rawMCP(k2.APIKey, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`); status != http.StatusOK {
		t.Fatalf("another key: %d %v", status, m)
	}
}
