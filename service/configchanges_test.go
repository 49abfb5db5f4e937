package service_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// configChangeView is a recorded configuration change as the API shows it.
type configChangeView struct {
	ChangeID string `json:"change_id"`
	Seq      int64  `json:"seq"`
	ServerID string `json:"server_id"`
	Changes  []struct {
		Field string `json:"field"`
		Old   any    `json:"old"`
		New   any    `json:"new"`
	} `json:"changes"`
	State       string  `json:"state"`
	RequestedBy *string `json:"requested_by"`
	DecidedBy   *string `json:"decided_by"`
	TraceID     *string `json:"trace_id"`
}

func (c configChangeView) only(field string, old, new any) bool {
	return len(c.Changes) == 1 && c.Changes[0].Field == field && c.Changes[0].Old == old && c.Changes[0].New == new
}

// adminKeyIDs returns the key ids of the tenant's first admin key (adminKey) and its second (SecondAdminKey).
func (h *harness) adminKeyIDs() (string, string) {
	h.T.Helper()
	h.SecondAdminKey()
	keys, err := h.Admin.ListAPIKeys(context.Background(), h.Tenant)
	if err != nil {
		h.T.Fatal(err)
	}
	var ids []string
	for _, k := range keys {
		if k.Role == persistence.RoleAdmin {
			ids = append(ids, k.KeyID.String())
		}
	}
	if len(ids) != 2 {
		h.T.Fatalf("admin keys %v", ids)
	}
	return ids[0], ids[1]
}

func (h *harness) configChanges(id, key string) []configChangeView {
	h.T.Helper()
	r := h.do("GET", "/v1/mcp/servers/"+id+"/config-changes", key, nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("config changes of %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Changes []configChangeView }
	if err := json.Unmarshal(r.body, &out); err != nil {
		h.T.Fatal(err)
	}
	return out.Changes
}

func decodeChange(t testing.TB, raw any) configChangeView {
	t.Helper()
	b, _ := json.Marshal(raw)
	var c configChangeView
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// nextConfigured waits for the next mcp.server.configured event of a stream.
func nextConfigured(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			if e.data.Kind == "mcp.server.configured" {
				return e
			}
		case <-deadline:
			t.Fatal("no mcp.server.configured event within 10 s")
		}
	}
}

// Finding 2's threat by configuration: the admin key that asks for calls switches approval off and calls
// again. Switching approval off is a pending change: the requesting key cannot confirm it (403
// self_confirmation), operators and module keys cannot either, another tenant's admin does not find it
// (404); the rest of the same PATCH applies. Until another admin of the tenant confirms it, every call still
// parks; after, a call runs without approval, while the call parked before stays parked. Every change is
// recorded (the creation too) with who and old → new, listed for operators and streamed as
// mcp.server.configured.
func TestApprovalOffNeedsASecondAdministrator(t *testing.T) {
	h := newHarness(t, withMCP)
	srv := mcptest.Tools(t)
	id, skills := h.gatewayServer("tools", srv.URL, true, "text")
	first, second := h.adminKeyIDs()
	events := h.openEvents(h.operatorKey(), "")

	r := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"requires_approval": false, "data_class": "confidential"})
	if r.status != http.StatusAccepted {
		t.Fatalf("switching approval off: %d %s, want 202 with a pending change", r.status, r.body)
	}
	body := r.json(t)
	pending := decodeChange(t, body["pending_change"])
	if body["requires_approval"] != true || body["data_class"] != "confidential" || pending.State != "pending" ||
		!pending.only("requires_approval", true, false) || pending.RequestedBy == nil || *pending.RequestedBy != first {
		t.Fatalf("the PATCH answer: %s", r.body)
	}
	parked := decodeCall(t, h.postCall(callBody("run-gate", skills["text"].SkillID, map[string]any{"text": "a"})))
	if parked.State != "awaiting_approval" {
		t.Fatalf("a call while approval off is pending: %+v", parked)
	}

	confirm := "/v1/mcp/servers/" + id + "/config-changes/" + pending.ChangeID + "/confirm"
	wantProblem(t, h.do("POST", confirm, h.adminKey(), nil), http.StatusForbidden, "self_confirmation")
	wantProblem(t, h.do("POST", confirm, h.operatorKey(), nil), http.StatusForbidden, "forbidden")
	wantProblem(t, h.do("POST", confirm, h.module(), nil), http.StatusForbidden, "forbidden")
	otherTenant, otherKeys := h.NewTenant("globex")
	other := &harness{h.As(otherTenant, otherKeys)}
	wantProblem(t, other.do("POST", confirm, otherKeys[persistence.RoleAdmin], nil), http.StatusNotFound, "not_found")
	wantProblem(t, other.do("GET", "/v1/mcp/servers/"+id+"/config-changes", otherKeys[persistence.RoleOperator], nil), http.StatusNotFound, "not_found")
	wantProblem(t, h.do("GET", "/v1/mcp/servers/"+id+"/config-changes", h.module(), nil), http.StatusForbidden, "forbidden")
	if got := h.fetchServer(id); got["requires_approval"] != true {
		t.Fatalf("approval after the refused confirmations: %v", got["requires_approval"])
	}
	if c := decodeCall(t, h.postCall(callBody("run-gate", skills["text"].SkillID, map[string]any{"text": "b"}))); c.State != "awaiting_approval" {
		t.Fatalf("a call after the refused confirmations: %+v", c)
	}

	r = h.do("POST", confirm, h.SecondAdminKey(), nil)
	if r.status != http.StatusOK {
		t.Fatalf("confirmed by a second administrator: %d %s", r.status, r.body)
	}
	decided := decodeChange(t, r.json(t)["change"])
	if decided.State != "confirmed" || decided.DecidedBy == nil || *decided.DecidedBy != second ||
		r.json(t)["server"].(map[string]any)["requires_approval"] != false {
		t.Fatalf("the confirmation: %s", r.body)
	}
	wantProblem(t, h.do("POST", confirm, h.SecondAdminKey(), nil), http.StatusConflict, "change_not_pending")
	if c := h.mustCall(callBody("run-gate", skills["text"].SkillID, map[string]any{"text": "c"})); c.State != "succeeded" {
		t.Fatalf("a call after the confirmation: %+v", c)
	}
	if got := h.getCall(parked.CallID); got.State != "awaiting_approval" {
		t.Fatalf("the call parked before the confirmation: %+v", got)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/calls/"+parked.CallID+"/approve", h.adminKey(), nil), http.StatusForbidden, "self_approval")

	log := h.configChanges(id, h.operatorKey())
	if len(log) != 3 {
		t.Fatalf("recorded changes: %+v", log)
	}
	created, classed, off := log[0], log[1], log[2]
	if created.State != "applied" || *created.RequestedBy != first || len(created.Changes) != 7 /* no credential */ {
		t.Errorf("the creation: %+v", created)
	}
	if classed.State != "applied" || !classed.only("data_class", "internal", "confidential") || *classed.RequestedBy != first {
		t.Errorf("the data class change: %+v", classed)
	}
	if off.ChangeID != pending.ChangeID || off.State != "confirmed" || !off.only("requires_approval", true, false) ||
		*off.RequestedBy != first || *off.DecidedBy != second || off.TraceID == nil {
		t.Errorf("the approval change: %+v", off)
	}

	for _, want := range []struct{ from, status, by, change string }{
		{"", "applied", first, classed.ChangeID}, {"", "pending", first, pending.ChangeID}, {"pending", "confirmed", second, pending.ChangeID},
	} {
		e := nextConfigured(t, events)
		if e.data.ServerID != id || e.data.From != want.from || e.data.Status != want.status || e.data.By != want.by ||
			e.data.ChangeID != want.change || e.data.Changes != 1 {
			t.Fatalf("event %+v, want %+v", e.data, want)
		}
	}
}

// The requester may withdraw its own pending change; nothing of it applies, and it cannot be confirmed
// afterwards.
func TestApprovalOffCancelled(t *testing.T) {
	h := newHarness(t, withMCP)
	id := h.configureID(configureBody("tools", mcptest.Tools(t).URL))
	r := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"requires_approval": false})
	if r.status != http.StatusAccepted {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	change := decodeChange(t, r.json(t)["pending_change"])
	// Asking again records no second request.
	if again := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"requires_approval": false}); again.status != http.StatusAccepted ||
		decodeChange(t, again.json(t)["pending_change"]).ChangeID != change.ChangeID {
		t.Fatalf("asked twice: %d %s", again.status, again.body)
	}
	base := "/v1/mcp/servers/" + id + "/config-changes/" + change.ChangeID
	r = h.do("POST", base+"/cancel", h.adminKey(), nil)
	if r.status != http.StatusOK || decodeChange(t, r.json(t)["change"]).State != "cancelled" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	wantProblem(t, h.do("POST", base+"/confirm", h.SecondAdminKey(), nil), http.StatusConflict, "change_not_pending")
	if got := h.fetchServer(id); got["requires_approval"] != true {
		t.Fatalf("approval after a cancelled change: %v", got["requires_approval"])
	}
	wantProblem(t, h.do("POST", base+"/confirm", h.SecondAdminKey(), map[string]any{"force": true}), http.StatusBadRequest, "unknown_field")
}
