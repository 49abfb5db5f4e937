package service_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/service"
)

// TestMCPEndpointApprovalWait: a call of a server that requires approval waits, sending progress, until an
// administrator approves it in the dashboard's API; then it runs and its result is the answer. A denied
// one is a tool error.
func TestMCPEndpointApprovalWait(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	srv := mcptest.Tools(t)
	h.gatewayServer("tools", srv.URL, true, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	for _, decision := range []string{"approve", "deny"} {
		done := make(chan *mcp.CallToolResult, 1)
		params := &mcp.CallToolParams{Name: "text"}
		params.SetProgressToken("p-" + decision)
		go func() {
			res, err := s.CallTool(context.Background(), params)
			if err != nil {
				t.Errorf("call: %v", err)
			}
			done <- res
		}()
		var parked []callView
		waitFor(t, "the call parked", 5*time.Second, func() bool {
			parked = h.listCalls("state=awaiting_approval")
			return len(parked) == 1
		})
		waitFor(t, "a progress notification", 5*time.Second, func() bool { return s.progress.Load() > 0 })
		select {
		case <-done:
			t.Fatal("the call answered before a decision")
		default:
		}
		if r := h.callDecision(parked[0].CallID, decision); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", decision, r.status, r.body)
		}
		select {
		case res := <-done:
			if decision == "approve" && (res.IsError || callText(t, res) != "hello from text") {
				t.Fatalf("approved: %+v %q", res, callText(t, res))
			}
			if decision == "deny" && (!res.IsError || !strings.Contains(callText(t, res), "denied")) {
				t.Fatalf("denied: %+v %q", res, callText(t, res))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer after the decision")
		}
		s.progress.Store(0)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Errorf("the server was asked %d times, want once (the approved call)", n)
	}
}

// TestMCPEndpointCloseEndsWaitingCall: the endpoint closing (the service stopping) while a call awaits
// approval does not wait for the approval window: Close returns, the client's call ends (with the
// endpoint's "shutting down" tool error, or the session's end if that reaches the client first), and the
// call is left to the gateway, still awaiting approval.
func TestMCPEndpointCloseEndsWaitingCall(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	h.gatewayServer("tools", mcptest.Tools(t).URL, true, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "text"})
		done <- answer{res, err}
	}()
	waitFor(t, "the call parked", 5*time.Second, func() bool { return len(h.listCalls("state=awaiting_approval")) == 1 })
	closed := make(chan struct{})
	go func() { h.Svc.MCPEndpoint().Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the parked call")
	}
	select {
	case a := <-done:
		if a.err == nil && (!a.res.IsError || !strings.Contains(callText(t, a.res), "shutting down")) {
			t.Fatalf("answer on close: %+v", a.res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call did not end when the endpoint closed")
	}
	if calls := h.listCalls("state=awaiting_approval"); len(calls) != 1 {
		t.Fatalf("the call was not left awaiting approval: %+v", calls)
	}
}

// TestMCPEndpointCancel: notifications/cancelled cancels a call in flight at the remote server, and a
// parked one unsent.
func TestMCPEndpointCancel(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	srv := mcptest.Tools(t)
	h.gatewayServer("tools", srv.URL, false, "hang")
	h.advance(time.Second) // registered later: its colliding names are qualified
	h.gatewayServer("gated", mcptest.Tools(t).URL, true, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "hang"}); errc <- err }()
	waitStarted(t, srv)
	cancel()
	waitCancelled(t, srv)
	<-errc
	waitFor(t, "the call cancelled", 10*time.Second, func() bool {
		calls := h.listCalls("")
		return len(calls) == 1 && calls[0].State == "cancelled"
	})

	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { _, err := s.CallTool(ctx2, &mcp.CallToolParams{Name: "gated.text"}); errc <- err }()
	waitFor(t, "the call parked", 5*time.Second, func() bool { return len(h.listCalls("state=awaiting_approval")) == 1 })
	cancel2()
	<-errc
	waitFor(t, "the parked call cancelled", 10*time.Second, func() bool { return len(h.listCalls("state=cancelled")) == 2 })
}

// TestMCPEndpointBudget: the session is the run with the tenant's budget; the call after the last is a
// tool error, unsent; a new session is a new run.
func TestMCPEndpointBudget(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	srv := mcptest.Tools(t)
	h.gatewayServer("tools", srv.URL, false, "text")
	if r := h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": 2}); r.status != http.StatusOK {
		t.Fatalf("settings: %d %s", r.status, r.body)
	}
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	for range 2 {
		if res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"}); err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
	}
	res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
	if err != nil || !res.IsError || !strings.Contains(callText(t, res), "budget_exhausted") {
		t.Fatalf("third call: %v %+v %q", err, res, callText(t, res))
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc["status"] != "budget_exhausted" || sc["server_asked"] != false {
		t.Errorf("structured %v", sc)
	}
	if n := srv.Calls("text"); n != 2 {
		t.Errorf("server asked %d times, want 2", n)
	}
	s2 := h.mustConnectMCP(h.adminKey(), legacyMCP)
	if res, err := s2.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"}); err != nil || res.IsError {
		t.Fatalf("new session: %v %+v", err, res)
	}
}

// TestMCPEndpointListChanged: every operator change — a tool enabled, disabled, a server disabled and
// enabled — reaches a session and a 2026-07-28 subscription as list_changed within a second.
func TestMCPEndpointListChanged(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""))
	id, skills := h.gatewayServer("tools", mcptest.Tools(t).URL, false, "text")
	legacy := h.mustConnectMCP(h.adminKey(), legacyMCP)
	modern := h.mustConnectMCP(h.adminKey(), modernMCP)
	steps := []struct {
		what string
		do   func()
		want []string
	}{
		{"enable echo", func() { h.do("POST", "/v1/mcp/skills/"+skills["echo"].SkillID+"/enable", h.operatorKey(), nil) }, []string{"echo", "text"}},
		{"disable text", func() { h.do("POST", "/v1/mcp/skills/"+skills["text"].SkillID+"/disable", h.operatorKey(), nil) }, []string{"echo"}},
		{"disable the server", func() { h.patch(id, map[string]any{"enabled": false}) }, nil},
		{"enable the server", func() { h.patch(id, map[string]any{"enabled": true}) }, []string{"echo"}},
	}
	for i, st := range steps {
		st.do()
		for _, s := range []*mcpSession{legacy, modern} {
			waitChanges(t, s, int64(i+1), st.what)
			if got := toolNames(t, s); !slices.Equal(got, st.want) {
				t.Fatalf("%s: tools %v, want %v", st.what, got, st.want)
			}
		}
	}
}

// TestMCPEndpointUnavailableKeep: in keep mode a silent server's tools stay listed (no list_changed), and
// a call is answered at once with a tool error carrying status, since, retry and evidence; the server
// recovering makes the call work again.
func TestMCPEndpointUnavailableKeep(t *testing.T) {
	h := newHarness(t, withMCPEndpoint("keep"))
	srv := mcptest.Tools(t)
	id, _ := h.gatewayServer("tools", srv.URL, false, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	h.silence(id)
	res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
	if err != nil || !res.IsError || !strings.Contains(callText(t, res), "unhealthy") {
		t.Fatalf("call while unhealthy: %v %+v %q", err, res, callText(t, res))
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc["status"] != "unhealthy" || sc["unavailable_since"] == nil || sc["retry_after_seconds"] != float64(10) || sc["evidence"] == nil {
		t.Fatalf("structured %v", sc)
	}
	if srv.Calls("text") != 0 {
		t.Fatal("the unhealthy server was asked")
	}
	h.heartbeatOK(id)
	waitFor(t, "the call works again", 5*time.Second, func() bool {
		res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
		return err == nil && !res.IsError
	})
	if got := toolNames(t, s); !slices.Equal(got, []string{"text"}) || s.changes.Load() != 0 {
		t.Fatalf("keep mode changed the list: %v, %d list_changed", got, s.changes.Load())
	}
}

// TestMCPEndpointDeregisteredKeep: in keep mode a deregistered server's tools stay listed (no
// list_changed), and a call is answered at once, without asking the server, with a tool error whose
// structured content says deregistered, since the deregistration, no retry time (waiting alone does not
// bring it back) and the evidence last seen; the module registering again makes the call work again.
// The server is a self-registered module with its own key, as modules deregister themselves on shutdown.
func TestMCPEndpointDeregisteredKeep(t *testing.T) {
	h := newHarness(t, withMCPEndpoint("keep"))
	srv := mcptest.Tools(t)
	reg := registration("tools", "text")
	reg["endpoint"] = srv.URL
	key := h.boundKey("tools")
	r := h.do("POST", "/v1/mcp/servers/register", key, reg)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["server_id"].(string)
	h.patch(id, map[string]any{"data_class": "internal", "requires_approval": false})
	if r := h.do("POST", "/v1/mcp/skills/"+h.fullSkills(id)["text"].SkillID+"/enable", h.operatorKey(), nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	call := func() *mcp.CallToolResult {
		t.Helper()
		res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "tools.text", Arguments: map[string]any{"q": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(); res.IsError {
		t.Fatalf("call while registered: %q", callText(t, res))
	}
	h.advance(time.Second)
	if r := h.do("POST", "/v1/mcp/servers/deregister", key, map[string]string{"server_id": id}); r.status != http.StatusOK {
		t.Fatalf("deregister: %d %s", r.status, r.body)
	}
	res := call()
	if text := callText(t, res); !res.IsError || !strings.Contains(text, `server "tools" deregistered`) || strings.Contains(text, "try again") {
		t.Fatalf("call after deregistration: %+v %q", res, text)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	ev, _ := sc["evidence"].(map[string]any)
	if sc["status"] != "deregistered" || sc["retry_after_seconds"] != nil || sc["server"] != "tools" || sc["server_asked"] != false ||
		ev["liveness"] != "push" || ev["last_heartbeat_at"] == nil {
		t.Fatalf("structured %v", sc)
	}
	deregisteredAt := timeField(t, h.fetchServer(id), "deregistered_at")
	if since, err := time.Parse(time.RFC3339Nano, sc["unavailable_since"].(string)); err != nil || !since.Equal(deregisteredAt) {
		t.Fatalf("unavailable_since %v, want the deregistration at %v (%v)", sc["unavailable_since"], deregisteredAt, err)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Fatalf("the server was asked %d times, want once (before it deregistered)", n)
	}
	if r := h.do("POST", "/v1/mcp/servers/register", key, reg); r.status != http.StatusOK {
		t.Fatalf("register again: %d %s", r.status, r.body)
	}
	waitFor(t, "the call works again", 5*time.Second, func() bool { return !call().IsError })
	if got := toolNames(t, s); !slices.Equal(got, []string{"tools.text"}) || s.changes.Load() != 0 {
		t.Fatalf("keep mode changed the list: %v, %d list_changed", got, s.changes.Load())
	}
}

// TestMCPEndpointUnavailableHide: in hide mode a silent server's tools leave the list after the hold
// (one list_changed), a server that comes up and fails again within the hold stays out, and comes back
// after a whole hold up.
func TestMCPEndpointUnavailableHide(t *testing.T) {
	// The flap detector would mark this server (4 transitions); this test is about the hold alone. The
	// hold is longer than the 3H jump silence makes: a poll in the middle of that jump sees the server
	// still healthy (the monitor has not run yet), and with a shorter hold it would rightly judge a server
	// healthy for 3H up for a whole hold — two list_changed the test did not mean (a flake under load).
	var hold time.Duration
	h := newHarness(t, withMCPEndpoint("hide"), func(c *service.Config, _ *service.Options) {
		c.FlapThreshold = 1000
		hold = 3*c.HeartbeatInterval + 10*time.Second
		c.MCP.ListHold = hold
	})
	srv := mcptest.Tools(t)
	id, _ := h.gatewayServer("tools", srv.URL, false, "text")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	h.silence(id) // unhealthy now; the hold runs on the fake clock
	if got := toolNames(t, s); !slices.Equal(got, []string{"text"}) {
		t.Fatalf("hidden before the hold: %v", got)
	}
	h.advance(hold)
	waitChanges(t, s, 1, "hidden after the hold")
	if got := toolNames(t, s); len(got) != 0 {
		t.Fatalf("listed after the hold: %v", got)
	}
	res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
	if err != nil || !res.IsError || !strings.Contains(callText(t, res), "not listed") {
		t.Fatalf("call of a hidden tool: %v %+v %q", err, res, callText(t, res))
	}
	// Flapping: up, then down again within the hold (after 3H + 2 s) — it stays out.
	h.heartbeatOK(id)
	h.advance(2 * time.Second)
	h.silence(id)
	h.advance(hold)
	h.heartbeatOK(id)
	h.advance(hold - time.Second)
	if got := toolNames(t, s); len(got) != 0 || s.changes.Load() != 1 {
		t.Fatalf("a flapping server came back: %v, %d list_changed", got, s.changes.Load())
	}
	h.advance(time.Second) // up for a whole hold now
	waitChanges(t, s, 2, "back after a hold up")
	if got := toolNames(t, s); !slices.Equal(got, []string{"text"}) {
		t.Fatalf("not back: %v", got)
	}
}

// TestMCPEndpointHideFlapping: in hide mode a server the flap detector marks as flapping (MCPFLEET_FLAP_THRESHOLD
// status transitions within MCPFLEET_FLAP_WINDOW) stays off the list while it is marked, even healthy
// for far longer than the hold, and comes back once its transitions age out of the window. Each change
// of the list is exactly one list_changed, to a session and to a 2026-07-28 subscription alike; the
// flapping itself sends none.
func TestMCPEndpointHideFlapping(t *testing.T) {
	h := newHarness(t, withMCPEndpoint("hide"), func(c *service.Config, _ *service.Options) {
		c.FlapWindow, c.FlapThreshold = 2*time.Minute, 4
	})
	id, _ := h.gatewayServer("tools", mcptest.Tools(t).URL, false, "text")
	sessions := []*mcpSession{h.mustConnectMCP(h.adminKey(), legacyMCP), h.mustConnectMCP(h.adminKey(), modernMCP)}
	s := sessions[0]
	changes := func(n int64, want []string, what string) {
		t.Helper()
		for _, ss := range sessions {
			waitChanges(t, ss, n, what)
			if got := toolNames(t, ss); !slices.Equal(got, want) {
				t.Fatalf("%s: tools %v, want %v", what, got, want)
			}
		}
	}
	exactly := func(n int64, what string) {
		t.Helper()
		for _, ss := range sessions {
			if got := ss.changes.Load(); got != n {
				t.Fatalf("%s: %d list_changed, want exactly %d", what, got, n)
			}
		}
	}
	whyNotListed := func() string {
		res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"})
		if err != nil || !res.IsError {
			t.Fatalf("call of a hidden tool: %v %+v", err, res)
		}
		return callText(t, res)
	}
	h.silence(id) // transition 1
	h.advance(5 * time.Second)
	changes(1, nil, "down for a hold")
	h.heartbeatOK(id) // 2
	h.advance(5 * time.Second)
	changes(2, []string{"text"}, "up for a hold")
	h.silence(id) // 3
	h.advance(5 * time.Second)
	changes(3, nil, "down for a hold again")
	h.heartbeatOK(id) // 4: flapping
	waitFor(t, "the server seen flapping", 5*time.Second, func() bool { return strings.Contains(whyNotListed(), "flapping") })
	// Healthy for 11 holds, heartbeating: still marked, still out, and no list_changed.
	for range 11 {
		h.advance(5 * time.Second)
		h.heartbeatOK(id)
	}
	if why := whyNotListed(); !strings.Contains(why, "flapping") {
		t.Fatalf("not flapping any more too soon: %q", why)
	}
	exactly(3, "while flapping")
	// The first transitions age out of the window: fewer than 4 in it, healthy for long: back, once.
	for range 10 {
		h.advance(5 * time.Second)
		h.heartbeatOK(id)
	}
	changes(4, []string{"text"}, "stable again")
	if res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "text"}); err != nil || res.IsError {
		t.Fatalf("call once stable: %v %+v", err, res)
	}
	exactly(4, "after coming back")
}

// silence lets server id miss three heartbeats and runs the monitor: it is unhealthy, committed.
func (h *harness) silence(id string) {
	h.T.Helper()
	h.advance(3 * h.Cfg.HeartbeatInterval)
	h.runMonitor()
	waitFor(h.T, "unhealthy", 5*time.Second, func() bool { return h.status(id) == "unhealthy" })
}

// heartbeatOK heartbeats server id with the admin key: it is healthy again.
func (h *harness) heartbeatOK(id string) {
	h.T.Helper()
	r := h.do("POST", "/v1/mcp/servers/heartbeat", h.adminKey(), map[string]string{"server_id": id})
	if r.status != http.StatusOK {
		h.T.Fatalf("heartbeat %s: %d %s", id, r.status, r.body)
	}
}

// TestMCPEndpointOperatorChangeWakesList: an operator change this node commits is read at once, not at
// the next poll: with the poll an hour apart, enabling and disabling a tool, disabling and enabling its
// server, a re-import that orphans an enabled tool, and a module's registration that changes its
// advertised tool (which disables it) each reach the session as a list_changed and change what it lists.
func TestMCPEndpointOperatorChangeWakesList(t *testing.T) {
	h := newHarness(t, withMCPEndpoint(""), func(c *service.Config, _ *service.Options) { c.MCP.PollInterval = time.Hour })
	id, skills := h.gatewayServer("tools", mcptest.Tools(t).URL, false, "text")
	reg := registration("mod", "lookup")
	mod := h.do("POST", "/v1/mcp/servers/register", h.module(), reg)
	if mod.status != http.StatusCreated {
		t.Fatalf("register: %d %s", mod.status, mod.body)
	}
	modID := mod.json(t)["server_id"].(string)
	h.patch(modID, map[string]any{"data_class": "internal", "requires_approval": false})
	lookup := h.fullSkills(modID)["lookup"].SkillID
	if r := h.do("POST", "/v1/mcp/skills/"+lookup+"/enable", h.operatorKey(), nil); r.status != http.StatusOK {
		t.Fatalf("enable lookup: %d %s", r.status, r.body)
	}
	gens, _ := h.gatewayServer("changing", mcptest.Changing(t).URL, false, "gen_1")
	s := h.mustConnectMCP(h.adminKey(), legacyMCP)
	if got := toolNames(t, s); !slices.Equal(got, []string{"gen_1", "mod.lookup", "text"}) {
		t.Fatalf("first list %v", got)
	}
	changed := registration("mod", "lookup")
	changed["capability_advertisement"].(map[string]any)["tools"].([]map[string]any)[0]["description"] = "does something else now"
	steps := []struct {
		what string
		do   func()
		want []string
	}{
		{"a re-import orphans gen_1", func() { h.importCatalogue(gens) }, []string{"mod.lookup", "text"}},
		{"enable echo", func() { h.do("POST", "/v1/mcp/skills/"+skills["echo"].SkillID+"/enable", h.operatorKey(), nil) }, []string{"echo", "mod.lookup", "text"}},
		{"disable text", func() { h.do("POST", "/v1/mcp/skills/"+skills["text"].SkillID+"/disable", h.operatorKey(), nil) }, []string{"echo", "mod.lookup"}},
		{"disable the server", func() { h.patch(id, map[string]any{"enabled": false}) }, []string{"mod.lookup"}},
		{"enable the server", func() { h.patch(id, map[string]any{"enabled": true}) }, []string{"echo", "mod.lookup"}},
		{"a registration changes a tool", func() {
			if r := h.do("POST", "/v1/mcp/servers/register", h.module(), changed); r.status != http.StatusOK {
				t.Fatalf("register again: %d %s", r.status, r.body)
			}
		}, []string{"echo"}},
	}
	for i, st := range steps {
		st.do()
		waitFor(t, st.what+": list_changed", 10*time.Second, func() bool { return s.changes.Load() >= int64(i+1) })
		if got := toolNames(t, s); !slices.Equal(got, st.want) {
			t.Fatalf("%s: tools %v, want %v", st.what, got, st.want)
		}
	}
}
