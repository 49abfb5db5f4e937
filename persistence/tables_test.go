package persistence_test

import (
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// TestTablesAreTheCallersOwn checks that editing a returned list changes neither the next answer nor
// what the validators accept.
func TestTablesAreTheCallersOwn(t *testing.T) {
	classes := persistence.DataClasses()
	classes[0] = "anything"
	if persistence.ValidDataClass("anything") || !persistence.ValidDataClass("public") {
		t.Fatal("a caller's edit of DataClasses reached the validator")
	}
	kinds := persistence.AuditKinds()
	if len(kinds) != 5 {
		t.Fatalf("%d audit kinds, want 5", len(kinds))
	}
	kinds[0] = "x"
	if persistence.AuditKinds()[0] != persistence.KindRegistered {
		t.Fatal("a caller's edit of AuditKinds reached the next answer")
	}
}
