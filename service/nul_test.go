package service_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// A NUL character (U+0000) cannot be stored by PostgreSQL (text, jsonb), so it must never reach a
// statement from the far side or from a caller. Against a real Go SDK server that sends NULs:
// call arguments with a NUL are refused with 400 invalid_arguments (problem+json), and a tool name with
// one with 400 invalid_field, and the server is not asked; an answer with a NUL is recorded with U+FFFD in its place (the call ends, it is not left
// running); an imported tool whose definition holds a NUL is skipped with its reason, the rest imported.
func TestNULFromCallersAndServers(t *testing.T) {
	h := newHarness(t, withGateway(5*time.Second, 2))
	srv := mcptest.NULs(t)
	b := configureBody("nuls", srv.URL)
	b["data_class"] = "internal"
	b["requires_approval"] = false
	id := h.configureID(b)

	rep := h.importCatalogue(id)
	if rep["import_status"] != "succeeded" {
		t.Fatalf("import: %v", rep)
	}
	skipped := map[string]string{}
	for _, s := range rep["skipped"].([]any) {
		m := s.(map[string]any)
		skipped[m["name"].(string)] = m["reason"].(string)
	}
	if !strings.Contains(skipped["nul_description"], "NUL") {
		t.Fatalf("nul_description not skipped for its NUL: %v", rep["skipped"])
	}
	skills := h.fullSkills(id)
	if _, ok := skills["nul_description"]; ok {
		t.Fatal("the tool with a NUL in its description was imported")
	}
	if k, ok := skills["nul_schema"]; ok && strings.Contains(string(k.InputSchema), `\u0000`) {
		t.Fatalf("a NUL was stored in an input schema: %s", k.InputSchema)
	}
	for _, name := range []string{"echo", "nul_text"} {
		k, ok := skills[name]
		if !ok {
			t.Fatalf("tool %s was not imported (skipped: %v)", name, skipped)
		}
		if r := h.do("POST", "/v1/mcp/skills/"+k.SkillID+"/enable", h.adminKey(), nil); r.status != http.StatusOK {
			t.Fatalf("enable %s: %d %s", name, r.status, r.body)
		}
	}

	p := wantProblem(t, h.postCall(callBody("run-nul", skills["echo"].SkillID, map[string]any{"text": "a\x00b"})), http.StatusBadRequest, "invalid_arguments")
	if d, _ := p["detail"].(string); !strings.Contains(d, "NUL") {
		t.Fatalf("detail %q does not name the NUL", d)
	}
	byName := map[string]any{"run_id": "run-nul", "server_id": id, "tool": "ec\x00ho"}
	wantProblem(t, h.postCall(byName), http.StatusBadRequest, "invalid_field")
	if n := srv.Calls("echo"); n != 0 {
		t.Fatalf("the server was asked %d times with refused arguments", n)
	}

	c := h.mustCall(callBody("run-nul", skills["nul_text"].SkillID, nil))
	if c.State != "succeeded" || c.content() != strings.ReplaceAll(mcptest.NULText, "\x00", "\uFFFD") {
		t.Fatalf("the call with a NUL in its answer: state %s, content %q", c.State, c.content())
	}
	if got := h.getCall(c.CallID); got.State != "succeeded" || got.content() != c.content() {
		t.Fatalf("the call as recorded: %+v", got)
	}
}
