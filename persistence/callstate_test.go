package persistence_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// The call states are a closed set: the six constants, the same six the table's CHECK constraint allows.
func TestCallStatesClosedSet(t *testing.T) {
	want := []persistence.CallState{"awaiting_approval", "running", "succeeded", "failed", "denied", "cancelled"}
	if got := persistence.CallStates(); !slices.Equal(got, want) {
		t.Fatalf("CallStates() = %v, want %v", got, want)
	}
	persistence.CallStates()[0] = "tampered"
	if persistence.CallStates()[0] != persistence.CallAwaitingApproval {
		t.Fatal("CallStates returns a shared slice")
	}
	for _, s := range want {
		if got, ok := persistence.ParseCallState(string(s)); !ok || got != s || !s.Valid() {
			t.Errorf("ParseCallState(%q) = %q, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "Running", "approved", "awaiting approval", "succeeded ", "unknown"} {
		if _, ok := persistence.ParseCallState(s); ok || persistence.CallState(s).Valid() {
			t.Errorf("%q is accepted as a call state", s)
		}
	}

	b, err := os.ReadFile("../migrations/0008_tool_calls.sql")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`CHECK \(state IN \(([^)]*)\)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no CHECK (state IN (...)) in migration 0008")
	}
	var inSchema []persistence.CallState
	for _, q := range strings.Split(string(m[1]), ",") {
		inSchema = append(inSchema, persistence.CallState(strings.Trim(strings.TrimSpace(q), "'")))
	}
	if !slices.Equal(inSchema, want) {
		t.Fatalf("the schema allows %v, the type %v", inSchema, want)
	}
}

// Terminal states and the forward-only moves (the rule the mcp_calls_forward trigger enforces).
func TestCallStateMoves(t *testing.T) {
	finished := map[persistence.CallState]bool{persistence.CallSucceeded: true, persistence.CallFailed: true,
		persistence.CallDenied: true, persistence.CallCancelled: true}
	allowed := map[persistence.CallState][]persistence.CallState{
		persistence.CallAwaitingApproval: {persistence.CallRunning, persistence.CallFailed, persistence.CallDenied, persistence.CallCancelled},
		persistence.CallRunning:          {persistence.CallRunning, persistence.CallSucceeded, persistence.CallFailed, persistence.CallCancelled},
	}
	all := persistence.CallStates()
	for _, from := range all {
		if got := from.Finished(); got != finished[from] {
			t.Errorf("%s.Finished() = %v", from, got)
		}
		if finished[from] && len(allowed[from]) != 0 {
			t.Fatalf("test table: a finished state %s has moves", from)
		}
		for _, to := range append(all, "", "approved") {
			if got, want := from.CanMoveTo(to), slices.Contains(allowed[from], to); got != want {
				t.Errorf("%s → %q: CanMoveTo = %v, want %v", from, to, got, want)
			}
		}
	}
	if persistence.CallState("bogus").CanMoveTo(persistence.CallRunning) || persistence.CallState("bogus").Finished() {
		t.Error("an unknown state moves or is finished")
	}
}
