package service_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// Break C of the review: the requesting administrator switches approval off. That waits for a second
// administrator (TestApprovalOffNeedsASecondAdministrator); once confirmed it is logged (who, what, old →
// new) and it releases no call already parked: the parked call still refuses its requester's own approval
// and runs only when another administrator approves it.
func TestApprovalSwitchedOffKeepsParkedCallsParked(t *testing.T) {
	var logs logBuffer
	h := newHarness(t, withMCP, withLogs(&logs))
	srv := mcptest.Tools(t)
	id, skills := h.gatewayServer("tools", srv.URL, true, "text")
	c := decodeCall(t, h.postCall(callBody("run-off", skills["text"].SkillID, nil)))
	if c.State != "awaiting_approval" {
		t.Fatalf("call %+v", c)
	}
	if got := h.patch(id, map[string]any{"requires_approval": false}); got["requires_approval"] != false {
		t.Fatalf("approval after a second administrator confirmed switching it off: %v", got["requires_approval"])
	}
	if got := h.getCall(c.CallID); got.State != "awaiting_approval" || got.DecidedBy != nil {
		t.Fatalf("the parked call after approval was switched off: %+v", got)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/calls/"+c.CallID+"/approve", h.adminKey(), nil), http.StatusForbidden, "self_approval")
	if n := srv.Calls("text"); n != 0 {
		t.Fatalf("the parked call reached the server %d times without a second administrator", n)
	}
	r := h.callDecision(c.CallID, "approve")
	if a := decodeCall(t, r); r.status != http.StatusOK || a.State != "succeeded" || a.DecidedBy == nil || *a.DecidedBy == c.RequestedBy {
		t.Fatalf("approved by another administrator: %d %s", r.status, r.body)
	}
	var changed []map[string]any
	for _, rec := range logs.records(t) {
		if rec["msg"] == "server configuration changed" {
			changed = append(changed, rec)
		}
	}
	if len(changed) == 0 {
		t.Fatal("switching approval off was not recorded")
	}
	last := changed[len(changed)-1]
	ch, _ := last["changes"].([]any)
	if last["key_id"] != c.RequestedBy || last["server_id"] != id || last["state"] != "pending" || !slices.Equal(ch, []any{"requires_approval: true → false"}) {
		t.Fatalf("the record of the change: %v", last)
	}
}
