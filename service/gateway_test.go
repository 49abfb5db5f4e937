package service_test

// Issue 4: the tool-call gateway — against real MCP servers (mcpclient/mcptest) and a real PostgreSQL.
// Every guard rail has a test here that fails if the guard is removed.

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// A text answer, end to end: the call, its events, and the contact it stamps.
func TestGatewayTextAnswer(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.GatewayTools(t)
	id, skills := h.gatewayServer("tools", srv.URL, false, "text", "echo")
	c := h.mustCall(callBody("run-1", skills["text"].SkillID, nil))
	if c.State != "succeeded" || c.outcome() != "ok" || c.content() != "hello from text" || c.Result.IsError ||
		c.Result.Truncated || len(c.Result.Dropped) != 0 || c.ServerID != id || c.ServerName != "tools" || c.Tool != "text" ||
		c.LatencyMS == nil || c.StartedAt == nil || c.FinishedAt == nil {
		t.Fatalf("call %+v", c)
	}
	if got := h.getCall(c.CallID); got.State != "succeeded" || got.content() != "hello from text" {
		t.Errorf("GET %+v", got)
	}
	// By server_id and tool name, with arguments.
	e := h.mustCall(map[string]any{"run_id": "run-1", "server_id": id, "tool": "echo", "arguments": map[string]any{"text": "hi"}})
	if e.State != "succeeded" || e.content() != "echo: hi" || e.SkillID == nil || *e.SkillID != skills["echo"].SkillID ||
		string(e.Arguments) != `{"text":"hi"}` {
		t.Fatalf("echo %+v", e)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Errorf("text arrived %d times", n)
	}
	ev := h.runEvents("run-1")
	want := []string{"call.requested", "call.started", "call.succeeded:ok", "call.requested", "call.started", "call.succeeded:ok"}
	if got := eventKinds(ev); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	last := ev[2]
	if *last.CallID != c.CallID || *last.ServerID != id || *last.Tool != "text" || *last.State != "succeeded" || last.LatencyMS == nil {
		t.Errorf("succeeded event %+v", last)
	}
	// Observed liveness: the call stamped the server's last contact.
	if obj := h.fetchServer(id); obj["last_contact"] == nil || obj["last_latency_ms"] == nil {
		t.Errorf("no contact stamped by a call: %v", obj)
	}
}

func TestGatewayShapesAnswers(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.GatewayTools(t)
	_, skills := h.gatewayServer("tools", srv.URL, false, "mixed", "image_only", "big_text", "big_mixed")
	call := func(tool string) callView { return h.mustCall(callBody("run-shape", skills[tool].SkillID, nil)) }

	mixed := call("mixed")
	note := "[mcpfleet: dropped 4 non-text blocks from the answer: 1 image, 1 audio, 1 resource, 1 resource_link]"
	if mixed.State != "succeeded" || mixed.content() != note+"\nbefore\nafter" {
		t.Errorf("mixed content %q", mixed.content())
	}
	if d := mixed.Result.Dropped; d["image"] != 1 || d["audio"] != 1 || d["resource"] != 1 || d["resource_link"] != 1 || len(d) != 4 {
		t.Errorf("mixed dropped %v", d)
	}

	img := call("image_only")
	if img.State != "succeeded" || img.content() != "[mcpfleet: dropped 1 non-text block from the answer: 1 image]" || img.Result.Dropped["image"] != 1 {
		t.Errorf("image only: %+v %q", img, img.content())
	}

	big := call("big_text")
	if !big.Result.Truncated || len(big.content()) > mcpclient.MaxShapedBytes || len(big.content()) < mcpclient.MaxShapedBytes-3 ||
		!utf8.ValidString(big.content()) || !strings.HasPrefix(mcptest.BigText(), big.content()) {
		t.Errorf("big text: truncated %v, %d bytes", big.Result.Truncated, len(big.content()))
	}

	bm := call("big_mixed")
	if !bm.Result.Truncated || len(bm.content()) > mcpclient.MaxShapedBytes ||
		!strings.HasPrefix(bm.content(), "[mcpfleet: dropped 1 non-text block from the answer: 1 image]\nhéllo") {
		t.Errorf("big mixed: truncated %v, %d bytes, starts %q", bm.Result.Truncated, len(bm.content()), bm.content()[:80])
	}
}

// isError and every way a call fails are failed tool results naming the server, HTTP 200 with state
// failed, recorded as call.failed with their class and latency; the call is never retried.
func TestGatewayFailedCalls(t *testing.T) {
	h := newHarness(t, withMCP) // 2 s deadline
	srv := mcptest.GatewayTools(t)
	id, skills := h.gatewayServer("tools", srv.URL, false, "is_error", "hang", "drop")

	c := h.mustCall(callBody("run-f", skills["is_error"].SkillID, nil))
	if c.State != "failed" || c.outcome() != "tool_error" || !c.Result.IsError ||
		c.content() != `[mcpfleet: server "tools" answered that tool "is_error" failed]`+"\nboom" {
		t.Fatalf("is_error: %+v %q", c, c.content())
	}
	// The server answered: that is a contact.
	if obj := h.fetchServer(id); obj["last_contact"] == nil {
		t.Errorf("an isError answer did not stamp the contact")
	}

	start := time.Now()
	c = h.mustCall(callBody("run-f", skills["hang"].SkillID, nil))
	if c.State != "failed" || c.outcome() != "timeout" || !c.Result.IsError || !strings.Contains(c.content(), `server "tools"`) ||
		!strings.Contains(c.content(), "(timeout)") {
		t.Fatalf("hang: %+v %q", c, c.content())
	}
	if d := time.Since(start); d < 2*time.Second || d > 8*time.Second {
		t.Errorf("the deadline took %s, want about 2 s", d)
	}
	if c.LatencyMS == nil || *c.LatencyMS < 1900 {
		t.Errorf("hang latency %v", c.LatencyMS)
	}
	waitCancelled(t, srv)

	c = h.mustCall(callBody("run-f", skills["drop"].SkillID, nil))
	if c.State != "failed" || c.outcome() != "transport" || !c.Result.IsError || !strings.Contains(c.content(), `server "tools"`) {
		t.Fatalf("drop: %+v %q", c, c.content())
	}
	for _, tool := range []string{"is_error", "hang", "drop"} {
		if n := srv.Calls(tool); n != 1 {
			t.Errorf("%s arrived %d times, want exactly once", tool, n)
		}
	}
	var failed []string
	for _, e := range h.runEvents("run-f") {
		if e.Kind == "call.failed" {
			failed = append(failed, *e.OutcomeClass)
			if e.LatencyMS == nil || *e.ServerID != id || e.Tool == nil {
				t.Errorf("failed event without server, tool or latency: %+v", e)
			}
		}
	}
	if !slices.Equal(failed, []string{"tool_error", "timeout", "transport"}) {
		t.Errorf("call.failed outcomes %v", failed)
	}
	// A failed call fails nothing else: the run carries on.
	if len(h.listCalls("run_id=run-f")) != 3 {
		t.Errorf("calls of the run")
	}
}

// Cancelling a call in flight reaches the server (its handler's context ends; notifications/cancelled
// arrives) and ends the call promptly as cancelled.
func TestGatewayCancelInFlight(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		name := "stateless"
		if stateful {
			name = "stateful"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, withGateway(30*time.Second, 4))
			srv := mcptest.Tools(t)
			if stateful {
				srv = mcptest.ToolsStateful(t)
			}
			_, skills := h.gatewayServer("tools", srv.URL, false, "hang")
			answer := make(chan response, 1)
			go func() { answer <- h.postCall(callBody("run-c", skills["hang"].SkillID, nil)) }()
			waitStarted(t, srv)
			running := h.listCalls("state=running&run_id=run-c")
			if len(running) != 1 {
				t.Fatalf("running calls %+v", running)
			}
			start := time.Now()
			r := h.callDecision(running[0].CallID, "cancel")
			if r.status != http.StatusOK {
				t.Fatalf("cancel: %d %s", r.status, r.body)
			}
			c := decodeCall(t, r)
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("cancel took %s", d)
			}
			if c.State != "cancelled" || c.outcome() != "cancelled" || !c.Result.IsError || !strings.Contains(c.content(), "may already have acted") {
				t.Fatalf("cancelled call %+v %q", c, c.content())
			}
			waitCancelled(t, srv)
			if _, err := srv.WaitFor(ctxTimeout(t, 5*time.Second), func(m mcptest.Received) bool { return m.Method == "notifications/cancelled" }); err != nil {
				t.Errorf("the server was not told: %v", err)
			}
			select {
			case a := <-answer:
				if a.status != http.StatusOK || decodeCall(t, a).State != "cancelled" {
					t.Errorf("the waiting request got %d %s", a.status, a.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiting request never got an answer")
			}
			if n := srv.Calls("hang"); n != 1 {
				t.Errorf("hang arrived %d times", n)
			}
			wantProblem(t, h.callDecision(c.CallID, "cancel"), 409, "call_not_cancellable")
			ev := eventKinds(h.runEvents("run-c"))
			if !slices.Equal(ev, []string{"call.requested", "call.started", "call.cancelled:cancelled"}) {
				t.Errorf("events %v", ev)
			}
		})
	}
}

// A client that goes away does not cancel its call, and a retry with the same Idempotency-Key gets the
// call it already made: each call arrives exactly once.
func TestGatewayClientDisconnectExactlyOnce(t *testing.T) {
	h := newHarness(t, withGateway(10*time.Second, 4))
	srv := mcptest.GatewayTools(t)
	_, skills := h.gatewayServer("tools", srv.URL, false, "slow")
	body := callBody("run-d", skills["slow"].SkillID, map[string]any{"ms": 1500})
	buf, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", h.Svc.URL()+"/v1/mcp/calls", strings.NewReader(string(buf)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.adminKey())
	req.Header.Set("Idempotency-Key", "k-1")
	if _, err := (&http.Client{Timeout: 300 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("the impatient client got an answer")
	}
	// The retry waits for the call the first request made, and does not make another.
	c := h.mustCall(body, "Idempotency-Key", "k-1")
	if c.State != "succeeded" || c.content() != "done after 1500 ms" || *c.IdempotencyKey != "k-1" {
		t.Fatalf("retried call %+v", c)
	}
	again := h.mustCall(body, "Idempotency-Key", "k-1")
	if again.CallID != c.CallID {
		t.Errorf("a second retry made call %s, want %s", again.CallID, c.CallID)
	}
	if n := srv.Calls("slow"); n != 1 {
		t.Fatalf("slow arrived %d times, want exactly once", n)
	}
	if calls := h.listCalls("run_id=run-d"); len(calls) != 1 {
		t.Errorf("%d calls recorded", len(calls))
	}
	// The same key for another call is refused; another key is another call.
	body["arguments"] = map[string]any{"ms": 1}
	wantProblem(t, h.postCall(body, "Idempotency-Key", "k-1"), 400, "idempotency_key_reused")
	if c := h.mustCall(body, "Idempotency-Key", "k-2"); c.CallID == again.CallID || c.State != "succeeded" {
		t.Errorf("a new key: %+v", c)
	}
	if n := srv.Calls("slow"); n != 2 {
		t.Errorf("slow arrived %d times, want 2", n)
	}
	// Idempotency-Key is scoped to its run.
	body["run_id"] = "run-d2"
	if c := h.mustCall(body, "Idempotency-Key", "k-1"); c.RunID != "run-d2" {
		t.Errorf("key in another run: %+v", c)
	}
}

// A restart mid-call: the call in flight is cancelled and marked interrupted, never re-sent — not by
// the new process, and not by a client retrying with the same key.
func TestGatewayRestartMidCall(t *testing.T) {
	h := newHarness(t, withGateway(30*time.Second, 4))
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, false, "hang", "text")
	body := callBody("run-r", skills["hang"].SkillID, nil)
	answer := make(chan response, 1)
	go func() { answer <- h.postCall(body, "Idempotency-Key", "k-r") }()
	waitStarted(t, srv)
	h.Restart()
	waitCancelled(t, srv)
	select {
	case a := <-answer:
		if a.status == http.StatusOK && decodeCall(t, a).outcome() != "interrupted" {
			t.Errorf("the waiting request got %s", a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request never ended")
	}
	calls := h.listCalls("run_id=run-r")
	if len(calls) != 1 || calls[0].State != "failed" || calls[0].outcome() != "interrupted" || !strings.Contains(calls[0].content(), "never re-sent") {
		t.Fatalf("after the restart: %+v", calls)
	}
	c := h.mustCall(body, "Idempotency-Key", "k-r")
	if c.CallID != calls[0].CallID || c.State != "failed" {
		t.Errorf("the retry after the restart: %+v", c)
	}
	// No sleep to wait for a replay that should not come: a later call to the same server, completed end to
	// end, is the condition after which one would have arrived (the new process sends nothing of its own).
	if c := h.mustCall(callBody("run-r2", skills["text"].SkillID, nil)); c.State != "succeeded" || srv.Calls("text") != 1 {
		t.Fatalf("a later call to the same server: %+v", c)
	}
	if n := srv.Calls("hang"); n != 1 {
		t.Fatalf("hang arrived %d times, want exactly once", n)
	}
}

// A process that died mid-call leaves its call running: the next start marks it interrupted and never
// sends it.
func TestGatewayCrashLeavesNoReplay(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	id, skills := h.gatewayServer("tools", srv.URL, false, "text")
	admin := h.DB.AdminPool(t)
	ctx := context.Background()
	sent, unsent := uuid.New(), uuid.New()
	for _, c := range []struct {
		id      uuid.UUID
		started any
	}{{sent, time.Now()}, {unsent, nil}} {
		if _, err := admin.Exec(ctx, `INSERT INTO mcp_calls (call_id, tenant_id, run_id, server_id, skill_id, tool, arguments, state,
				requested_by, created_at, started_at)
			VALUES ($1, $2, 'run-x', $3, $4, 'text', '{}', 'running', $5, now(), $6)`,
			c.id, h.Tenant, id, skills["text"].SkillID, uuid.New(), c.started); err != nil {
			t.Fatal(err)
		}
	}
	h.Restart()
	a, b := h.getCall(sent.String()), h.getCall(unsent.String())
	if a.State != "failed" || a.outcome() != "interrupted" || !strings.Contains(a.content(), "may have acted on it") {
		t.Errorf("a call in flight at the crash: %+v %q", a, a.content())
	}
	if b.State != "failed" || b.outcome() != "interrupted" || !strings.Contains(b.content(), "the server was not asked") {
		t.Errorf("a call not yet sent at the crash: %+v %q", b, b.content())
	}
	if ev := eventKinds(h.runEvents("run-x")); !slices.Equal(ev, []string{"call.failed:interrupted", "call.failed:interrupted"}) {
		t.Errorf("events %v", ev)
	}
	// No sleep to wait for a replay that should not come: a later call to the same tool, completed end to
	// end, is the condition after which one would have arrived; it must be the only one.
	if c := h.mustCall(callBody("run-y", skills["text"].SkillID, nil)); c.State != "succeeded" {
		t.Fatalf("a later call to the same server: %+v", c)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Fatalf("a call left running was re-sent (%d arrivals, want only the later call)", n)
	}
	// A terminal state never changes again, even written directly.
	if _, err := h.DB.AdminPool(t).Exec(ctx, `UPDATE mcp_calls SET state = 'running' WHERE call_id = $1`, sent); err == nil {
		t.Error("a failed call was set running again")
	}
}

// The budget: the N+1th call of a run is refused without contacting the server, at the tenant's N and at
// the default 20.
func TestGatewayBudget(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, false, "text")
	text := skills["text"].SkillID
	for i := 0; i < 20; i++ {
		h.mustCall(callBody("run-default", text, nil))
	}
	p := wantProblem(t, h.postCall(callBody("run-default", text, nil)), 409, "budget_exhausted")
	if p["max_calls_per_run"] != float64(20) || p["used"] != float64(20) || p["server_asked"] != false ||
		!strings.Contains(p["detail"].(string), "the server was not asked") {
		t.Errorf("refusal %v", p)
	}
	if n := srv.Calls("text"); n != 20 {
		t.Fatalf("text arrived %d times, want 20", n)
	}

	r := h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": 3})
	if r.status != 200 || r.json(t)["max_calls_per_run"] != float64(3) || r.json(t)["source"] != "tenant" {
		t.Fatalf("PUT settings: %d %s", r.status, r.body)
	}
	for i := 0; i < 3; i++ {
		h.mustCall(callBody("run-3", text, nil))
	}
	wantProblem(t, h.postCall(callBody("run-3", text, nil)), 409, "budget_exhausted")
	if n := srv.Calls("text"); n != 23 {
		t.Fatalf("text arrived %d times, want 23", n)
	}
	ev := h.runEvents("run-3")
	if last := ev[len(ev)-1]; last.Kind != "call.refused" || *last.OutcomeClass != "budget_exhausted" || *last.Tool != "text" {
		t.Errorf("last event %+v", last)
	}
	// Another run has its own budget; the budget shows in the run's events answer.
	h.mustCall(callBody("run-4", text, nil))
	r = h.do("GET", "/v1/mcp/runs/run-3/events", h.adminKey(), nil)
	if b := r.json(t)["budget"].(map[string]any); b["max_calls_per_run"] != float64(3) || b["used"] != float64(3) {
		t.Errorf("budget %v", b)
	}
	// Back to the default.
	if r := h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": nil}); r.json(t)["max_calls_per_run"] != float64(20) || r.json(t)["source"] != "default" {
		t.Errorf("PUT null: %s", r.body)
	}
	wantProblem(t, h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": 0}), 400, "invalid_field")
	wantProblem(t, h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": 1001}), 400, "invalid_field")
	wantProblem(t, h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{}), 400, "missing_field")
}

// Concurrent calls of one run cannot together exceed the budget.
func TestGatewayBudgetConcurrent(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, false, "text")
	h.do("PUT", "/v1/mcp/settings", h.adminKey(), map[string]any{"max_calls_per_run": 5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			r := h.postCall(callBody("run-burst", skills["text"].SkillID, nil))
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 5 || codes[409] != 11 {
		t.Fatalf("answers %v, want 5 × 200 and 11 × 409", codes)
	}
	if n := srv.Calls("text"); n != 5 {
		t.Fatalf("text arrived %d times, want 5", n)
	}
}

// Approval: parked, approved (runs once), denied, expired — and what the server declares cannot waive it.
func TestGatewayApproval(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.GatewayTools(t)
	_, skills := h.gatewayServer("tools", srv.URL, true, "safe", "text")
	// "safe" claims to be read-only and idempotent: it is parked all the same.
	r := h.postCall(callBody("run-a", skills["safe"].SkillID, nil))
	if r.status != http.StatusAccepted || !strings.HasPrefix(r.header.Get("Location"), "/v1/mcp/calls/") {
		t.Fatalf("a call to a server requiring approval: %d %s", r.status, r.body)
	}
	c := decodeCall(t, r)
	if c.State != "awaiting_approval" || c.Result != nil || c.ApprovalExpiresAt == nil ||
		!c.ApprovalExpiresAt.Equal(c.CreatedAt.Add(15*time.Minute)) {
		t.Fatalf("parked call %+v", c)
	}
	if parked := h.listCalls("state=awaiting_approval"); len(parked) != 1 || parked[0].CallID != c.CallID {
		t.Errorf("parked calls %+v", parked)
	}
	if n := srv.Calls("safe"); n != 0 {
		t.Fatalf("a parked call reached the server")
	}
	// No sleep to show it stays parked: the approved call below, completed end to end, must be the only
	// arrival ("safe arrived 1 times"), so one sent while parked would show there.
	r = h.callDecision(c.CallID, "approve")
	if r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	a := decodeCall(t, r)
	if a.State != "succeeded" || a.content() != "safe" || a.DecidedBy == nil {
		t.Fatalf("approved call %+v", a)
	}
	wantProblem(t, h.callDecision(c.CallID, "approve"), 409, "call_not_awaiting_approval")
	wantProblem(t, h.callDecision(c.CallID, "deny"), 409, "call_not_awaiting_approval")
	if n := srv.Calls("safe"); n != 1 {
		t.Fatalf("safe arrived %d times", n)
	}
	if ev := eventKinds(h.runEvents("run-a")); !slices.Equal(ev, []string{"call.requested", "call.awaiting_approval", "call.started", "call.succeeded:ok"}) {
		t.Errorf("events %v", ev)
	}

	// Denied: a failed tool result, never sent.
	d := decodeCall(t, h.postCall(callBody("run-a", skills["text"].SkillID, nil)))
	r = h.callDecision(d.CallID, "deny")
	if r.status != 200 {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	if d = decodeCall(t, r); d.State != "denied" || d.outcome() != "denied" || !d.Result.IsError || !strings.Contains(d.content(), `server "tools"`) {
		t.Fatalf("denied call %+v", d)
	}
	wantProblem(t, h.callDecision(d.CallID, "approve"), 409, "call_not_awaiting_approval")

	// Cancelled while parked: never sent.
	x := decodeCall(t, h.postCall(callBody("run-a", skills["text"].SkillID, nil)))
	if r := h.callDecision(x.CallID, "cancel"); r.status != 200 || decodeCall(t, r).State != "cancelled" {
		t.Fatalf("cancel parked: %d %s", r.status, r.body)
	}

	// Expired: approving after the window is refused and the call is a failed tool result.
	e := decodeCall(t, h.postCall(callBody("run-a", skills["text"].SkillID, nil)))
	h.advance(15*time.Minute + time.Second)
	wantProblem(t, h.callDecision(e.CallID, "approve"), 409, "approval_expired")
	if e = h.getCall(e.CallID); e.State != "failed" || e.outcome() != "approval_expired" || !e.Result.IsError {
		t.Fatalf("expired call %+v", e)
	}
	// The sweep expires a parked call nobody reads.
	s := decodeCall(t, h.postCall(callBody("run-a", skills["text"].SkillID, nil)))
	h.advance(15*time.Minute + time.Second)
	if err := h.Svc.Gateway().ExpireApprovals(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ev := h.runEvents("run-a")
	if last := ev[len(ev)-1]; last.Kind != "call.failed" || *last.OutcomeClass != "approval_expired" || *last.CallID != s.CallID {
		t.Errorf("last event %+v", last)
	}
	if n := srv.Calls("text"); n != 0 {
		t.Errorf("text arrived %d times; denied, cancelled and expired calls are never sent", n)
	}
}

// Four eyes: the key that requested a call cannot approve it — 403 self_approval, the call stays parked
// and unsent — another admin key can, and both keys are on the call; the requester may still deny or
// cancel its own call.
func TestGatewayFourEyes(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, true, "text")
	c := decodeCall(t, h.postCall(callBody("run-4", skills["text"].SkillID, nil)))
	wantProblem(t, h.do("POST", "/v1/mcp/calls/"+c.CallID+"/approve", h.adminKey(), nil), 403, "self_approval")
	if got := h.getCall(c.CallID); got.State != "awaiting_approval" || got.DecidedBy != nil {
		t.Fatalf("a refused self-approval changed the call: %+v", got)
	}
	if n := srv.Calls("text"); n != 0 {
		t.Fatalf("a self-approved call reached the server %d times", n)
	}
	r := h.callDecision(c.CallID, "approve")
	a := decodeCall(t, r)
	if r.status != 200 || a.State != "succeeded" || a.RequestedBy != c.RequestedBy || a.DecidedBy == nil || *a.DecidedBy == a.RequestedBy {
		t.Fatalf("approved by the other admin key: %d %+v", r.status, a)
	}
	if l := h.listCalls("run_id=run-4"); len(l) != 1 || l[0].RequestedBy != c.RequestedBy || l[0].DecidedBy == nil || *l[0].DecidedBy != *a.DecidedBy {
		t.Fatalf("listed %+v", l)
	}
	// The requester withdraws its own calls: denying and cancelling need no second pair of eyes.
	d := decodeCall(t, h.postCall(callBody("run-4", skills["text"].SkillID, nil)))
	r = h.do("POST", "/v1/mcp/calls/"+d.CallID+"/deny", h.adminKey(), nil)
	if d = decodeCall(t, r); r.status != 200 || d.State != "denied" || d.DecidedBy == nil || *d.DecidedBy != d.RequestedBy {
		t.Fatalf("the requester denies its own call: %d %+v", r.status, d)
	}
	x := decodeCall(t, h.postCall(callBody("run-4", skills["text"].SkillID, nil)))
	if r := h.do("POST", "/v1/mcp/calls/"+x.CallID+"/cancel", h.adminKey(), nil); r.status != 200 || decodeCall(t, r).State != "cancelled" {
		t.Fatalf("the requester cancels its own call: %d %s", r.status, r.body)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Errorf("text arrived %d times, want 1", n)
	}
}

// The approval window is configurable; approval re-checks the preconditions; a parked call survives a
// restart and is approved once.
func TestGatewayApprovalWindowAndRecheck(t *testing.T) {
	h := newHarness(t, withMCP, func(c *service.Config, _ *service.Options) { c.ApprovalWindow = time.Minute })
	srv := mcptest.Tools(t)
	id, skills := h.gatewayServer("tools", srv.URL, true, "text")
	c := decodeCall(t, h.postCall(callBody("run-w", skills["text"].SkillID, nil)))
	if !c.ApprovalExpiresAt.Equal(c.CreatedAt.Add(time.Minute)) {
		t.Fatalf("window %v → %v", c.CreatedAt, c.ApprovalExpiresAt)
	}
	h.Restart()
	h.patch(id, map[string]any{"enabled": false})
	r := h.callDecision(c.CallID, "approve")
	if a := decodeCall(t, r); r.status != 200 || a.State != "failed" || a.outcome() != "server_disabled" {
		t.Fatalf("approving a call whose server was disabled meanwhile: %d %s", r.status, r.body)
	}
	h.patch(id, map[string]any{"enabled": true})
	c = decodeCall(t, h.postCall(callBody("run-w", skills["text"].SkillID, nil)))
	h.Restart()
	if a := decodeCall(t, h.callDecision(c.CallID, "approve")); a.State != "succeeded" {
		t.Fatalf("approving after a restart: %+v", a)
	}
	if n := srv.Calls("text"); n != 1 {
		t.Errorf("text arrived %d times", n)
	}
}

// Every refusal is a machine-readable problem, recorded as call.refused; the server is never asked.
func TestGatewayRefusals(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.GatewayTools(t)
	id, skills := h.gatewayServer("tools", srv.URL, false, "echo", "text")
	run := "run-refusals"
	refused := func(body map[string]any, status int, slug string) map[string]any {
		t.Helper()
		p := wantProblem(t, h.postCall(body), status, slug)
		if p["server_asked"] != false || p["run_id"] != run {
			t.Errorf("%s: %v", slug, p)
		}
		ev := h.runEvents(run)
		if last := ev[len(ev)-1]; last.Kind != "call.refused" || *last.OutcomeClass != slug || last.EventID != int64(p["event_id"].(float64)) {
			t.Errorf("%s: last event %+v", slug, last)
		}
		return p
	}
	refused(callBody(run, uuid.NewString(), nil), 404, "skill_not_found")
	refused(map[string]any{"run_id": run, "server_id": id, "tool": "nope"}, 404, "skill_not_found")
	refused(callBody(run, skills["mixed"].SkillID, nil), 409, "skill_disabled")

	p := refused(callBody(run, skills["echo"].SkillID, map[string]any{"text": 5}), 400, "invalid_arguments")
	if p["field"] != "arguments.text" || p["argument"] != "text" || !strings.Contains(p["detail"].(string), "expected string") {
		t.Errorf("invalid argument %v", p)
	}
	p = refused(callBody(run, skills["echo"].SkillID, map[string]any{}), 400, "invalid_arguments")
	if p["field"] != "arguments.text" || !strings.Contains(p["detail"].(string), "required") {
		t.Errorf("missing argument %v", p)
	}
	refused(callBody(run, skills["echo"].SkillID, []int{1}), 400, "invalid_arguments")

	h.patch(id, map[string]any{"enabled": false})
	refused(callBody(run, skills["text"].SkillID, nil), 409, "server_disabled")
	h.patch(id, map[string]any{"enabled": true, "data_class": nil})
	refused(callBody(run, skills["text"].SkillID, nil), 409, "no_data_class")
	h.patch(id, map[string]any{"data_class": "internal"})

	h.advance(35 * time.Second)
	h.runMonitor()
	r := h.postCall(callBody(run, skills["text"].SkillID, nil))
	p = wantProblem(t, r, 503, "skill_unavailable")
	if p["retry_after"] != float64(10) || r.header.Get("Retry-After") != "10" {
		t.Errorf("retry_after %v, header %q", p["retry_after"], r.header.Get("Retry-After"))
	}
	since := timeField(t, p, "since")
	var unhealthyAt time.Time
	if err := h.DB.AdminPool(t).QueryRow(context.Background(), `SELECT max(occurred_at) FROM audit_events WHERE server_id = $1 AND kind = 'mcp.server.unhealthy'`, id).Scan(&unhealthyAt); err != nil {
		t.Fatal(err)
	}
	if !since.Equal(unhealthyAt) {
		t.Errorf("since %v, want the unhealthy transition at %v", since, unhealthyAt)
	}

	// A pushed module has no endpoint to call.
	mod := h.register("pushed", "lookup")
	h.patch(mod, map[string]any{"data_class": "public", "requires_approval": false})
	lookup := h.fullSkills(mod)["lookup"]
	h.do("POST", "/v1/mcp/skills/"+lookup.SkillID+"/enable", h.adminKey(), nil)
	refused(callBody(run, lookup.SkillID, map[string]any{"q": "x"}), 409, "no_endpoint")

	for _, tool := range []string{"echo", "text", "mixed", "nope"} {
		if n := srv.Calls(tool); n != 0 {
			t.Errorf("%s reached the server %d times", tool, n)
		}
	}
	// Malformed requests are plain problems (no run to record them in).
	wantProblem(t, h.postCall(map[string]any{"skill_id": skills["text"].SkillID}), 400, "missing_field")
	wantProblem(t, h.postCall(map[string]any{"run_id": "bad run", "skill_id": skills["text"].SkillID}), 400, "invalid_field")
	wantProblem(t, h.postCall(map[string]any{"run_id": run, "skill_id": skills["text"].SkillID, "tool": "text"}), 400, "invalid_field")
	wantProblem(t, h.postCall(map[string]any{"run_id": run, "server_id": id}), 400, "missing_field")
}

// A per-server bound on calls in flight: a slow server holds at most its own slots, and other servers'
// calls go on.
func TestGatewayCallsPerServer(t *testing.T) {
	h := newHarness(t, withGateway(30*time.Second, 2))
	slow := mcptest.Tools(t)
	other := mcptest.Tools(t)
	slowID, slowSkills := h.gatewayServer("slow", slow.URL, false, "hang")
	_, otherSkills := h.gatewayServer("other", other.URL, false, "text")
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Go(func() { h.postCall(callBody("run-p", slowSkills["hang"].SkillID, nil)) })
	}
	waitFor(t, "two hang calls to arrive", 10*time.Second, func() bool { return slow.Calls("hang") == 2 })
	if c := h.mustCall(callBody("run-p", otherSkills["text"].SkillID, nil)); c.State != "succeeded" {
		t.Errorf("another server's call while the slow one is full: %+v", c)
	}
	// The third call waits for a slot, unsent: once it is queued, nothing more can reach the server.
	waitFor(t, "the third hang call to queue for a slot", 10*time.Second, func() bool {
		return h.Svc.Gateway().Queued(uuid.MustParse(slowID)) == 1
	})
	if n := slow.Calls("hang"); n != 2 {
		t.Fatalf("%d calls in flight to a server bounded to 2", n)
	}
	var started, waiting []callView
	for _, c := range h.listCalls("state=running&run_id=run-p") {
		if c.StartedAt != nil {
			started = append(started, c)
		} else {
			waiting = append(waiting, c)
		}
	}
	if len(started) != 2 || len(waiting) != 1 {
		t.Fatalf("started %d, waiting %d", len(started), len(waiting))
	}
	h.callDecision(started[0].CallID, "cancel")
	waitFor(t, "the waiting call to take the freed slot", 10*time.Second, func() bool { return slow.Calls("hang") == 3 })
	for _, c := range h.listCalls("state=running&run_id=run-p") {
		h.callDecision(c.CallID, "cancel")
	}
	wg.Wait()
}

// A completed call is liveness evidence: it brings a degraded server back to healthy; a failed one does
// not stamp the contact.
func TestGatewayCallIsLivenessEvidence(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.GatewayTools(t)
	id, skills := h.gatewayServer("tools", srv.URL, false, "text", "drop")
	h.advance(25 * time.Second)
	h.runMonitor()
	if s := h.status(id); s != "degraded" {
		t.Fatalf("precondition: %s", s)
	}
	imported := timeField(t, h.fetchServer(id), "last_contact") // the import's contact
	if c := h.mustCall(callBody("run-l", skills["drop"].SkillID, nil)); c.outcome() != "transport" {
		t.Fatalf("drop %+v", c)
	}
	if obj := h.fetchServer(id); obj["status"] != "degraded" || !timeField(t, obj, "last_contact").Equal(imported) {
		t.Fatalf("after a failed call: %v", obj)
	}
	h.mustCall(callBody("run-l", skills["text"].SkillID, nil))
	if obj := h.fetchServer(id); obj["status"] != "healthy" || !timeField(t, obj, "last_contact").After(imported) || obj["last_latency_ms"] == nil {
		t.Fatalf("after a completed call: %v", obj)
	}
}

// Remote tools always require an administrator: every step is 403 for other keys, and changes nothing.
func TestGatewayAdminOnly(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, true, "text")
	c := decodeCall(t, h.postCall(callBody("run-o", skills["text"].SkillID, nil)))
	for _, role := range []persistence.Role{persistence.RoleModule, persistence.RoleOperator} {
		key := h.Keys[role]
		for _, rq := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/mcp/calls", callBody("run-o", skills["text"].SkillID, nil)},
			{"GET", "/v1/mcp/calls", nil},
			{"GET", "/v1/mcp/calls/" + c.CallID, nil},
			{"POST", "/v1/mcp/calls/" + c.CallID + "/approve", nil},
			{"POST", "/v1/mcp/calls/" + c.CallID + "/deny", nil},
			{"POST", "/v1/mcp/calls/" + c.CallID + "/cancel", nil},
			{"GET", "/v1/mcp/runs/run-o/events", nil},
			{"GET", "/v1/mcp/settings", nil},
			{"PUT", "/v1/mcp/settings", map[string]any{"max_calls_per_run": 100}},
		} {
			wantProblem(t, h.do(rq.method, rq.path, key, rq.body), 403, "forbidden")
		}
	}
	wantProblem(t, h.do("GET", "/v1/mcp/calls/"+c.CallID, "", nil), 401, "unauthorized")
	if got := h.getCall(c.CallID); got.State != "awaiting_approval" {
		t.Errorf("a refused request changed the call: %+v", got)
	}
	if calls := h.listCalls("run_id=run-o"); len(calls) != 1 {
		t.Errorf("a refused request made a call: %d", len(calls))
	}
	if r := h.do("GET", "/v1/mcp/settings", h.adminKey(), nil); r.json(t)["max_calls_per_run"] != float64(20) {
		t.Errorf("settings %s", r.body)
	}
	if n := srv.Calls("text"); n != 0 {
		t.Errorf("text arrived %d times", n)
	}
}

// Another tenant sees none of it.
func TestGatewayTenantIsolation(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	_, skills := h.gatewayServer("tools", srv.URL, true, "text")
	c := decodeCall(t, h.postCall(callBody("run-t", skills["text"].SkillID, nil)))
	_, other := h.NewTenant("globex")
	key := other[persistence.RoleAdmin]
	for _, op := range []string{"approve", "deny", "cancel"} {
		wantProblem(t, h.do("POST", "/v1/mcp/calls/"+c.CallID+"/"+op, key, nil), 404, "not_found")
	}
	wantProblem(t, h.do("GET", "/v1/mcp/calls/"+c.CallID, key, nil), 404, "not_found")
	if r := h.do("GET", "/v1/mcp/runs/run-t/events", key, nil); !strings.Contains(string(r.body), `"events":[]`) {
		t.Errorf("another tenant's run events: %s", r.body)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/calls", key, callBody("run-t", skills["text"].SkillID, nil)), 404, "skill_not_found")
	if r := h.do("GET", "/v1/mcp/calls", key, nil); !strings.Contains(string(r.body), `"calls":[]`) {
		t.Errorf("another tenant's calls: %s", r.body)
	}
	// Row-level security is forced on every new table.
	rows, err := h.DB.AdminPool(t).Query(context.Background(), `SELECT relname FROM pg_class
		WHERE relname IN ('mcp_calls','mcp_run_events','mcp_run_budgets','tenant_settings') AND relrowsecurity AND relforcerowsecurity`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if n != 4 {
		t.Errorf("%d of 4 tables have forced row-level security", n)
	}
}

func TestGatewayConfigFromEnv(t *testing.T) {
	env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://cyberos_app@127.0.0.1/x"}
	getenv := func(k string) string { return env[k] }
	c, err := service.FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxCallsPerRun != 20 || c.ApprovalWindow != 15*time.Minute || c.CallsPerServer != 4 {
		t.Errorf("defaults %d %s %d", c.MaxCallsPerRun, c.ApprovalWindow, c.CallsPerServer)
	}
	env["MCPFLEET_MAX_CALLS_PER_RUN"], env["MCPFLEET_APPROVAL_WINDOW"], env["MCPFLEET_CALLS_PER_SERVER"] = "7", "2m", "9"
	if c, err = service.FromEnv(getenv); err != nil || c.MaxCallsPerRun != 7 || c.ApprovalWindow != 2*time.Minute || c.CallsPerServer != 9 {
		t.Errorf("set: %d %s %d %v", c.MaxCallsPerRun, c.ApprovalWindow, c.CallsPerServer, err)
	}
	for k, v := range map[string]string{"MCPFLEET_MAX_CALLS_PER_RUN": "0", "MCPFLEET_APPROVAL_WINDOW": "soon", "MCPFLEET_CALLS_PER_SERVER": "-1"} {
		old := env[k]
		env[k] = v
		if _, err := service.FromEnv(getenv); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
		env[k] = old
	}
	env["MCPFLEET_APPROVAL_WINDOW"] = "10ms"
	c, _ = service.FromEnv(getenv)
	if err := c.Validate(); err == nil {
		t.Error("a 10 ms approval window was accepted")
	}
}
