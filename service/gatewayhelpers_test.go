package service_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/service"
)

// callView is a call as the API shows it.
type callView struct {
	CallID       string  `json:"call_id"`
	RunID        string  `json:"run_id"`
	ServerID     string  `json:"server_id"`
	ServerName   string  `json:"server_name"`
	SkillID      *string `json:"skill_id"`
	Tool         string  `json:"tool"`
	State        string  `json:"state"`
	OutcomeClass *string `json:"outcome_class"`
	Reason       *string `json:"reason"`
	Result       *struct {
		Content   string         `json:"content"`
		IsError   bool           `json:"is_error"`
		Dropped   map[string]int `json:"dropped"`
		Truncated bool           `json:"truncated"`
	} `json:"result"`
	LatencyMS         *int64          `json:"latency_ms"`
	Arguments         json.RawMessage `json:"arguments"`
	IdempotencyKey    *string         `json:"idempotency_key"`
	RequestedBy       string          `json:"requested_by"`
	DecidedBy         *string         `json:"decided_by"`
	CreatedAt         time.Time       `json:"created_at"`
	ApprovalExpiresAt *time.Time      `json:"approval_expires_at"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
}

func (c callView) outcome() string {
	if c.OutcomeClass == nil {
		return ""
	}
	return *c.OutcomeClass
}

func (c callView) content() string {
	if c.Result == nil {
		return ""
	}
	return c.Result.Content
}

// eventView is a run event as the API shows it.
type eventView struct {
	EventID      int64   `json:"event_id"`
	Kind         string  `json:"kind"`
	CallID       *string `json:"call_id"`
	ServerID     *string `json:"server_id"`
	Tool         *string `json:"tool"`
	State        *string `json:"state"`
	OutcomeClass *string `json:"outcome_class"`
	LatencyMS    *int64  `json:"latency_ms"`
	Detail       *string `json:"detail"`
	At           string  `json:"at"`
}

func decodeCall(t testing.TB, r response) callView {
	t.Helper()
	var c callView
	if err := json.Unmarshal(r.body, &c); err != nil || c.CallID == "" {
		t.Fatalf("not a call (%d): %v: %s", r.status, err, r.body)
	}
	return c
}

// withGateway is withMCP with a longer MCP deadline (calls that must outlive the test's own steps) and
// the gateway's settings.
func withGateway(timeout time.Duration, perServer int) harnessOpt {
	return func(c *service.Config, o *service.Options) {
		withMCP(c, o)
		c.MCPTimeout = timeout
		c.CallsPerServer = perServer
	}
}

// gatewayServer configures module at url with a data class and the given approval requirement, imports
// its catalogue and enables tools. It returns the server_id and the skills by name.
func (h *harness) gatewayServer(module, url string, approval bool, tools ...string) (string, map[string]fullSkill) {
	h.T.Helper()
	b := configureBody(module, url)
	b["data_class"] = "internal"
	b["requires_approval"] = approval
	id := h.configureID(b)
	h.importCatalogue(id)
	skills := h.fullSkills(id)
	for _, name := range tools {
		k, ok := skills[name]
		if !ok {
			h.T.Fatalf("server %s has no tool %q", module, name)
		}
		if r := h.do("POST", "/v1/mcp/skills/"+k.SkillID+"/enable", h.adminKey(), nil); r.status != http.StatusOK {
			h.T.Fatalf("enable %s: %d %s", name, r.status, r.body)
		}
	}
	return id, h.fullSkills(id)
}

func callBody(run, skillID string, args any) map[string]any {
	b := map[string]any{"run_id": run, "skill_id": skillID}
	if args != nil {
		b["arguments"] = args
	}
	return b
}

// postCall asks for a call with the admin key.
func (h *harness) postCall(body map[string]any, hdr ...string) response {
	h.T.Helper()
	return h.do("POST", "/v1/mcp/calls", h.adminKey(), body, hdr...)
}

// mustCall asks for a call that must be answered 200 (it ran) and returns it.
func (h *harness) mustCall(body map[string]any, hdr ...string) callView {
	h.T.Helper()
	r := h.postCall(body, hdr...)
	if r.status != http.StatusOK {
		h.T.Fatalf("call %v: %d %s", body, r.status, r.body)
	}
	return decodeCall(h.T, r)
}

func (h *harness) getCall(id string) callView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/calls/"+id, h.adminKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("get call %s: %d %s", id, r.status, r.body)
	}
	return decodeCall(h.T, r)
}

// callDecision approves, denies or cancels call id with the approver's key: postCall asks with
// adminKey, and a key never approves its own call.
func (h *harness) callDecision(id, op string) response {
	h.T.Helper()
	return h.do("POST", "/v1/mcp/calls/"+id+"/"+op, h.approverKey(), nil)
}

// approverKey is a second admin key of the tenant (not safe for concurrent first use).
func (h *harness) approverKey() string { return h.SecondAdminKey() }

func (h *harness) listCalls(query string) []callView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/calls?"+query, h.adminKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("list calls: %d %s", r.status, r.body)
	}
	var out struct{ Calls []callView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	return out.Calls
}

func (h *harness) runEvents(run string) []eventView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/runs/"+run+"/events", h.adminKey(), nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("run events %s: %d %s", run, r.status, r.body)
	}
	var out struct{ Events []eventView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	return out.Events
}

func eventKinds(events []eventView) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Kind
		if e.OutcomeClass != nil {
			out[i] += ":" + *e.OutcomeClass
		}
	}
	return out
}

// waitStarted waits for the "hang" handler of s to start.
func waitStarted(t testing.TB, s *mcptest.Server) {
	t.Helper()
	select {
	case <-s.HandlerStarted():
	case <-time.After(10 * time.Second):
		t.Fatal("the hang handler never started")
	}
}

// waitCancelled waits for the "hang" handler of s to see its context cancelled.
func waitCancelled(t testing.TB, s *mcptest.Server) {
	t.Helper()
	select {
	case <-s.HandlerCancelled():
	case <-time.After(10 * time.Second):
		t.Fatal("the hang handler's context was never cancelled")
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
