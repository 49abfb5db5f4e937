package persistence

import "testing"

// The analysis is due at 1,000 created servers and then each time the count doubles, never twice at once,
// and counting nothing starts nothing.
func TestFleetAnalyzerThresholds(t *testing.T) {
	var a fleetAnalyzer
	if a.add(0) || a.add(999) {
		t.Fatal("an analysis started before 1,000 servers")
	}
	if !a.add(1) {
		t.Fatal("no analysis at 1,000 servers")
	}
	if a.add(5000) {
		t.Fatal("a second analysis started while one runs")
	}
	a.done(nil)
	// 6,000 created, the next was due at 2,000: the next add starts one, and the one after waits for 2 × 6,001.
	if !a.add(1) {
		t.Fatal("no analysis once past the doubled count")
	}
	a.done(nil)
	if a.add(6000) {
		t.Fatal("an analysis before the count doubled again (12,001 < 12,002)")
	}
	if !a.add(1) {
		t.Fatal("no analysis at twice the count of the last one")
	}
	if a.runs != 2 {
		t.Errorf("runs = %d, want 2", a.runs)
	}
}
