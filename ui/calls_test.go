package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/ui"
)

// The call gateway (issue 4) does not exist yet: these tests hold the dashboard's side of the
// contract (ui.Calls) with a stand-in gateway, so the approvals section is exercised in a real browser
// now and the gateway only has to implement the interface.

type fakeCalls struct {
	mu      sync.Mutex
	parked  []ui.ParkedCall
	decided map[uuid.UUID]bool
	by      map[uuid.UUID]persistence.Principal
}

func (f *fakeCalls) AwaitingApproval(_ context.Context, _, serverID uuid.UUID, _ int) ([]ui.ParkedCall, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ui.ParkedCall
	for _, c := range f.parked {
		if _, done := f.decided[c.CallID]; !done && (serverID == uuid.Nil || serverID == c.ServerID) {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeCalls) Decide(_ context.Context, p persistence.Principal, callID uuid.UUID, approve bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, done := f.decided[callID]; done {
		return "", ui.ErrNotParked
	}
	for _, c := range f.parked {
		if c.CallID == callID {
			f.decided[callID], f.by[callID] = approve, p
			if approve {
				return "running", nil
			}
			return "denied", nil
		}
	}
	return "", persistence.ErrNotFound
}

func (f *fakeCalls) RecentEvents(_ context.Context, _, _ uuid.UUID, _ int) ([]ui.CallEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ui.CallEvent
	for id, ok := range f.decided {
		kind := "call.started"
		if !ok {
			kind = "call.failed"
		}
		out = append(out, ui.CallEvent{Kind: kind, CallID: id, Tool: "echo", State: kind[5:], At: time.Now()})
	}
	return out, nil
}

// noRemote is the MCP client side of a dashboard that has no servers.
type noRemote struct{ ui.Remote }

func (noRemote) Describe(context.Context, uuid.UUID, []uuid.UUID) (map[uuid.UUID]remote.Description, error) {
	return map[uuid.UUID]remote.Description{}, nil
}

func TestApprovals(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	store, err := persistence.Open(ctx, db.AppURL, persistence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	tenant, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	adminKey, err := admin.CreateAPIKey(ctx, tenant, persistence.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	server := uuid.New()
	approveID, denyID := uuid.New(), uuid.New()
	calls := &fakeCalls{decided: map[uuid.UUID]bool{}, by: map[uuid.UUID]persistence.Principal{}, parked: []ui.ParkedCall{
		{CallID: approveID, RunID: "run-1", ServerID: server, ModuleName: "calendar", Tool: "create_event",
			Arguments: json.RawMessage(`{"title":"<b>standup</b>"}`), RequestedAt: time.Now()},
		{CallID: denyID, RunID: "run-1", ServerID: server, ModuleName: "calendar", Tool: "delete_event",
			Arguments: json.RawMessage(`{"id":7}`), RequestedAt: time.Now()},
	}}
	dash, err := ui.New(ui.Config{}, ui.Deps{Store: store, Auth: httpapi.New(httpapi.Config{}, httpapi.Deps{Store: store}), Remote: noRemote{}, Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	dash.Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	b := newBrowser(t)
	b.signIn(srv.URL, adminKey.APIKey)
	if got := b.text(`tr[data-call-id="` + approveID.String() + `"] td[data-label="Arguments"]`); got != `{"title":"<b>standup</b>"}` {
		t.Fatalf("arguments shown as %q", got)
	}
	b.navigate("approve", chromedp.Click(chromedp.CSS(`form[action="/ui/calls/`+approveID.String()+`/approve"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "Call approved") {
		t.Fatalf("after approving: %q", got)
	}
	b.navigate("deny", chromedp.Click(chromedp.CSS(`form[action="/ui/calls/`+denyID.String()+`/deny"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "Call denied") {
		t.Fatalf("after denying: %q", got)
	}
	if got := b.text("#approvals"); !strings.Contains(got, "No call is awaiting approval") {
		t.Fatalf("approvals after both decisions: %q", got)
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if ok, done := calls.decided[approveID]; !done || !ok {
		t.Fatal("the approval did not reach the gateway")
	}
	if ok, done := calls.decided[denyID]; !done || ok {
		t.Fatal("the denial did not reach the gateway")
	}
	if p := calls.by[approveID]; p.TenantID != tenant || p.Role != persistence.RoleAdmin {
		t.Fatalf("decided by %+v", p)
	}
}

// Against the real gateway: an operator's dashboard shows nothing of calls — no parked call, argument,
// result or run event — as the API keeps calls admin only; an administrator sees them with the keys that
// requested and decided them, cannot approve a call its own key requested (four eyes), may deny it, and
// approves the agent's call.
func TestCallsFourEyesAndOperators(t *testing.T) {
	e := newEnv(t)
	id := e.configure("modern", mcptest.Modern(t).URL, "internal") // requires approval, as every new server
	admin := e.Keys[persistence.RoleAdmin]
	if st, m := e.api("POST", "/v1/mcp/servers/"+id+"/import", admin, nil); st != http.StatusOK {
		t.Fatalf("import: %d %v", st, m)
	}
	skill := skillID(t, e, id, "echo")
	if st, m := e.api("POST", "/v1/mcp/skills/"+skill+"/enable", admin, nil); st != http.StatusOK {
		t.Fatalf("enable: %d %v", st, m)
	}
	const secret = "quarterly-figures-7f3a"
	agentCall := e.parkCall(skill, `{"text":"`+secret+`"}`)
	ownCall := e.parkCallAs(admin, skill, `{"text":"own-`+secret+`"}`)
	base := e.url()

	op := newClient(t, base)
	hidden := func(when string) {
		t.Helper()
		for _, path := range []string{"/ui/", "/ui/servers/" + id} {
			st, page := op.get(path)
			if st != http.StatusOK || !strings.Contains(page, "shown to administrators only") {
				t.Fatalf("%s: an operator's %s: %d\n%s", when, path, st, page)
			}
			for _, leak := range []string{secret, agentCall, ownCall, "run-1", "Awaiting approval", "Recent calls", "data-call-id"} {
				if strings.Contains(page, leak) {
					t.Fatalf("%s: an operator's %s shows %q", when, path, leak)
				}
			}
		}
	}
	page := op.signIn(e.Keys[persistence.RoleOperator])
	hidden("parked")
	if st, _, _ := op.post("/ui/calls/"+agentCall+"/approve", url.Values{"csrf_token": {token(t, page)}, "return_to": {"/ui/"}}, "Origin", base); st != http.StatusForbidden {
		t.Fatalf("an operator approves: %d", st)
	}

	adm := newClient(t, base)
	page = adm.signIn(admin)
	csrf := token(t, page)
	if !strings.Contains(page, secret) {
		t.Fatalf("the administrator does not see the agent's arguments:\n%s", page)
	}
	own := regexp.MustCompile(`(?s)<tr data-call-id="` + ownCall + `">.*?</tr>`).FindString(page)
	if !strings.Contains(own, "(your key)") || !strings.Contains(own, "data-own-call") ||
		!regexp.MustCompile(`<button type="submit" disabled[^>]*>Approve</button>`).MatchString(own) {
		t.Fatalf("the administrator's own call is not marked as such, or its Approve is enabled:\n%s", own)
	}
	decide := func(call, op string) (int, string) {
		t.Helper()
		st, _, body := adm.post("/ui/calls/"+call+"/"+op, url.Values{"csrf_token": {csrf}, "return_to": {"/ui/"}}, "Origin", base)
		return st, body
	}
	if st, body := decide(ownCall, "approve"); st != http.StatusForbidden || !strings.Contains(body, "another administrator") {
		t.Fatalf("a self-approval through the dashboard: %d\n%s", st, body)
	}
	if st, m := e.api("GET", "/v1/mcp/calls/"+ownCall, admin, nil); st != http.StatusOK || m["state"] != "awaiting_approval" {
		t.Fatalf("after a refused self-approval: %d %v", st, m)
	}
	if st, body := decide(agentCall, "approve"); st != http.StatusSeeOther {
		t.Fatalf("approving the agent's call: %d\n%s", st, body)
	}
	if st, body := decide(ownCall, "deny"); st != http.StatusSeeOther {
		t.Fatalf("denying one's own call: %d\n%s", st, body)
	}
	st, m := e.api("GET", "/v1/mcp/calls/"+agentCall, admin, nil)
	if st != http.StatusOK || m["state"] != "succeeded" || m["decided_by"] == nil || m["decided_by"] == m["requested_by"] {
		t.Fatalf("the agent's call: %d %v", st, m)
	}
	adminKeyID := m["decided_by"].(string)
	if _, m := e.api("GET", "/v1/mcp/calls/"+ownCall, admin, nil); m["state"] != "denied" || m["requested_by"] != adminKeyID || m["decided_by"] != adminKeyID {
		t.Fatalf("the denied own call: %v", m)
	}
	_, page = adm.get("/ui/")
	if !strings.Contains(page, adminKeyID+" (your key)") || !strings.Contains(page, m["requested_by"].(string)) {
		t.Fatalf("recent calls do not show who requested and decided:\n%s", page)
	}
	hidden("decided") // the answer (echo's text is the secret) stays hidden too
}
