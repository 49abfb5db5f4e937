package remote_test

import (
	"slices"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// Only switching approval off on a server that requires it is held for a second administrator; the rest of
// the same change applies, and switching it on, or leaving it off, is never held.
func TestHoldApprovalOff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after bool
		held          bool
	}{
		{"off", true, false, true},
		{"stays on", true, true, false},
		{"on", false, true, false},
		{"stays off", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := persistence.ServerConfig{RequiresApproval: tc.before, DataClass: "public"}
			after := persistence.ServerConfig{RequiresApproval: tc.after, DataClass: "internal"}
			held := remote.HoldApprovalOff(before, &after)
			if (len(held) > 0) != tc.held {
				t.Fatalf("held %v, want held %v", held, tc.held)
			}
			if tc.held {
				if !after.RequiresApproval || held[0] != (persistence.ConfigChange{Field: "requires_approval", Old: true, New: false}) {
					t.Fatalf("held %v, after %+v", held, after)
				}
			} else if after.RequiresApproval != tc.after {
				t.Fatalf("after %+v", after)
			}
			if after.DataClass != "internal" {
				t.Fatalf("another field was held back: %+v", after)
			}
		})
	}
}

// ChangeLines shows old → new ("none" for none), and for a credential only what happened to it.
func TestChangeLines(t *testing.T) {
	got := remote.ChangeLines([]persistence.ConfigChange{
		{Field: "requires_approval", Old: true, New: false},
		{Field: "data_class", Old: "internal", New: nil},
		{Field: "auth.credential", New: "replaced"},
	})
	want := []string{"requires_approval: true → false", "data_class: internal → none", "auth.credential: replaced"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}
