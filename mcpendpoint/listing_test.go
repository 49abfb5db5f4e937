package mcpendpoint

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
)

func TestAssignNames(t *testing.T) {
	a, b, c, d := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	taken := map[string]bool{"forecast": true}
	got := assignNames([]candidate{
		{SkillID: a, Module: "beta", Tool: "forecast"},
		{SkillID: b, Module: "beta", Tool: "forecast"}, // a second beta.forecast (another skill): id suffix
		{SkillID: c, Module: "we ird/mod", Tool: "alerts"},
		{SkillID: d, Module: "x", Tool: strings.Repeat("t", 130)},
	}, taken)
	want := map[uuid.UUID]string{a: "beta.forecast", b: "beta.forecast." + b.String()[:8], c: "alerts", d: strings.Repeat("t", 128)}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("%s: got %q, want %q", id, got[id], n)
		}
	}
	// A name once taken stays taken: the same tool of a third server is qualified, never renaming others.
	e := uuid.New()
	if n := assignNames([]candidate{{SkillID: e, Module: "gamma", Tool: "forecast"}}, taken)[e]; n != "gamma.forecast" {
		t.Errorf("third forecast: %q", n)
	}
}

// TestAssignNamesNoSquatting: a self-registered server's tools are always qualified, so whatever a module
// key registers first — the tool's bare name, or a module and tool that spell an administrator's dotted
// tool name — the administrator's tool, imported later, still gets its bare name or its own qualified
// name, never the squatter's.
func TestAssignNamesNoSquatting(t *testing.T) {
	squat, squat2, long, admin, dotted := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	taken := map[string]bool{}
	got := assignNames([]candidate{
		{SkillID: squat, Module: "squatter", Tool: "forecast", SelfRegistered: true},
		{SkillID: squat2, Module: "github", Tool: "search", SelfRegistered: true},                 // spells "github.search"
		{SkillID: long, Module: strings.Repeat("m", 128), Tool: "forecast", SelfRegistered: true}, // the cut keeps the "."
	}, taken)
	want := map[uuid.UUID]string{squat: "squatter.forecast", squat2: "github.search", long: strings.Repeat("m", 64) + ".forecast"}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("self-registered %s: got %q, want %q", id, got[id], n)
		}
	}
	got = assignNames([]candidate{
		{SkillID: admin, Module: "weather", Tool: "forecast"},
		{SkillID: dotted, Module: "gh", Tool: "github.search"}, // a dotted name is never bare
	}, taken)
	if got[admin] != "forecast" || got[dotted] != "gh.github.search" {
		t.Errorf("the administrator's tools: %v", got)
	}
	for name := range taken {
		if !strings.Contains(name, ".") && name != "forecast" {
			t.Errorf("bare name %q assigned", name)
		}
	}
}

func TestHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ptr := func(x time.Time) *time.Time { return &x }
	id := uuid.New()
	h := newHolds(5 * time.Second)
	steps := []struct {
		now      int
		st       health.Status
		changed  *time.Time
		flapping bool
		listed   bool
	}{
		{0, health.Healthy, nil, false, true},
		{1, health.Unhealthy, ptr(at(1)), false, true},   // down, hold not yet over
		{5, health.Unhealthy, ptr(at(1)), false, true},   // 4 s
		{6, health.Unhealthy, ptr(at(1)), false, false},  // 5 s: off the list
		{7, health.Healthy, ptr(at(7)), false, false},    // up again
		{9, health.Unhealthy, ptr(at(9)), false, false},  // down within the hold
		{10, health.Degraded, ptr(at(10)), false, false}, // up
		{14, health.Healthy, ptr(at(10)), false, false},  // 4 s up
		{15, health.Healthy, ptr(at(10)), false, true},   // a whole hold up: back
		{16, health.Deregistered, ptr(at(16)), false, true},
		{21, health.Deregistered, ptr(at(16)), false, false},
		{22, health.Healthy, ptr(at(22)), false, false},
		{27, health.Healthy, ptr(at(22)), false, true},
		// The flap detector marks it: off at once, whatever its status, and out while marked.
		{28, health.Healthy, ptr(at(22)), true, false},
		{29, health.Unhealthy, ptr(at(29)), true, false},
		{40, health.Healthy, ptr(at(30)), true, false}, // up for longer than the hold, still marked
		{41, health.Healthy, ptr(at(30)), false, true}, // no longer marked, up for a hold: back
		{42, health.Unhealthy, ptr(at(42)), true, false},
		{60, health.Healthy, ptr(at(58)), false, false}, // unmarked, but up for 2 s only
		{63, health.Healthy, ptr(at(58)), false, true},
	}
	for _, s := range steps {
		if got := h.observe(id, s.st, s.changed, s.flapping, at(s.now)); got != s.listed {
			t.Fatalf("t=%d %s flapping=%v: listed %v, want %v", s.now, s.st, s.flapping, got, s.listed)
		}
	}
	// A server first seen down for longer than the hold is not listed; one just gone down is; one first
	// seen flapping is not.
	if h.observe(uuid.New(), health.Unhealthy, ptr(at(0)), false, at(30)) {
		t.Error("a long-dead server was listed")
	}
	if !h.observe(uuid.New(), health.Unhealthy, ptr(at(29)), false, at(30)) {
		t.Error("a server down for 1 s was hidden")
	}
	if h.observe(uuid.New(), health.Healthy, ptr(at(0)), true, at(30)) {
		t.Error("a flapping server was listed")
	}
}

func TestHostAndOrigin(t *testing.T) {
	e := New(Config{AllowedHosts: []string{"fleet.example.com"}}, Deps{})
	for host, ok := range map[string]bool{"127.0.0.1:8080": true, "localhost": true, "[::1]:80": true, "fleet.example.com:443": true,
		"evil.example": false, "127.0.0.1.evil.example": false, "": false} {
		if e.hostAllowed(host) != ok {
			t.Errorf("host %q: %v", host, !ok)
		}
	}
	for origin, ok := range map[string]bool{"http://localhost:3000": true, "https://fleet.example.com": true, "https://evil.example": false,
		"null": false, "file://": false} {
		if e.originAllowed(origin) != ok {
			t.Errorf("origin %q: %v", origin, !ok)
		}
	}
}

// A skill's schema is normalised again when its stored schema changes, and a schema outside the subset
// stays nil (unlisted) from the cache too.
func TestNormalizedSchemaCache(t *testing.T) {
	h := &hub{schemas: map[uuid.UUID]normalizedSchema{}}
	id := uuid.New()
	a := h.normalized(id, json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`))
	b := h.normalized(id, json.RawMessage(`{"type":"object","properties":{"b":{"type":"string"}}}`))
	if !strings.Contains(string(a), `"a"`) || !strings.Contains(string(b), `"b"`) || strings.Contains(string(b), `"a"`) {
		t.Fatalf("normalised %s, then %s", a, b)
	}
	bad := json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"#/nowhere"}}}`)
	for range 2 {
		if n := h.normalized(id, bad); n != nil {
			t.Fatalf("a schema outside the subset normalised to %s", n)
		}
	}
}
