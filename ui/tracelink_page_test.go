package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// TestTraceLinks: with MCPFLEET_TRACE_URL set, the trace ids of a call (parked, then in the recent
// calls) and of an import link to the tracing UI, and the API answers a call's trace_id; without it
// (every other test's dashboard) they are plain text, as the timeline of TestServerCard shows.
func TestTraceLinks(t *testing.T) {
	e := &env{servicetest.Start(t, servicetest.MCPClient, func(c *service.Config, _ *service.Options) { c.TraceURL = traceTemplate })}
	admin := e.Keys[persistence.RoleAdmin]
	id := e.configure("modern", mcptest.Modern(t).URL, "internal")
	const importTrace, callTrace = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
	if r := e.Do("POST", "/v1/mcp/servers/"+id+"/import", admin, []byte{}, "traceparent", "00-"+importTrace+"-b7ad6b7169203331-01"); r.Status != http.StatusOK {
		t.Fatalf("import: %d %s", r.Status, r.Body)
	}
	skill := skillID(t, e, id, "echo")
	if st, m := e.api("POST", "/v1/mcp/skills/"+skill+"/enable", admin, nil); st != http.StatusOK {
		t.Fatalf("enable: %d %v", st, m)
	}
	r := e.Do("POST", "/v1/mcp/calls", e.agentKey(), map[string]any{"run_id": "run-1", "skill_id": skill, "arguments": map[string]any{"text": "hi"}},
		"traceparent", "00-"+callTrace+"-00f067aa0ba902b7-01")
	var call map[string]any
	_ = json.Unmarshal(r.Body, &call)
	if r.Status != http.StatusAccepted || call["trace_id"] != callTrace {
		t.Fatalf("park a traced call: %d %s", r.Status, r.Body)
	}
	link := func(trace string) string {
		return `<a class="trace" href="` + strings.ReplaceAll(traceTemplate, "{trace_id}", trace) + `"`
	}
	c := newClient(t, e.url())
	page := c.signIn(admin)
	parked := regexp.MustCompile(`(?s)<tr data-call-id="` + call["call_id"].(string) + `">.*?</tr>`).FindString(page)
	if !strings.Contains(parked, link(callTrace)) {
		t.Fatalf("the parked call's trace is not linked:\n%s", parked)
	}
	if st, _, body := c.post("/ui/calls/"+call["call_id"].(string)+"/approve", url.Values{"csrf_token": {token(t, page)}, "return_to": {"/ui/"}}, "Origin", e.url()); st != http.StatusSeeOther {
		t.Fatalf("approve: %d\n%s", st, body)
	}
	_, page = c.get("/ui/servers/" + id)
	recent := page[strings.Index(page, `id="calls-h"`):]
	if !strings.Contains(recent, link(callTrace)) {
		t.Fatalf("the recent calls do not link the call's trace:\n%s", recent)
	}
	if !strings.Contains(page, link(importTrace)) {
		t.Fatalf("the card does not link the last import's trace")
	}
	// A page names the template for the script, which links the live feed's trace ids.
	if !strings.Contains(page, `data-trace-template="`+traceTemplate+`"`) {
		t.Fatalf("the page does not carry the trace URL template")
	}
}
