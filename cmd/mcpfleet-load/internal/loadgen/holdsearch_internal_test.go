package loadgen

import (
	"slices"
	"testing"
	"testing/quick"
)

func TestWindowHeld(t *testing.T) {
	good := PhaseSummary{RatePerSecond: 9_900, ExpectedRatePerSecond: 10_000, P99Ms: 49.9}
	for _, tc := range []struct {
		name  string
		edit  func(*PhaseSummary)
		swept int
		want  bool
	}{
		{"held", func(*PhaseSummary) {}, 0, true},
		{"rate short", func(w *PhaseSummary) { w.RatePerSecond = 9_899 }, 0, false},
		{"p99 at the target", func(w *PhaseSummary) { w.P99Ms = 50 }, 0, false},
		{"an error", func(w *PhaseSummary) { w.Errors.Total = 1 }, 0, false},
		{"a non-healthy answer on time", func(w *PhaseSummary) { w.NonHealthyOnTime = 1 }, 0, false},
		{"a false transition swept", func(*PhaseSummary) {}, 1, false},
		{"nothing expected", func(w *PhaseSummary) { w.ExpectedRatePerSecond = 0 }, 0, false},
	} {
		w := good
		tc.edit(&w)
		if got := windowHeld(w, tc.swept, 50); got != tc.want {
			t.Errorf("%s: windowHeld = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHoldStep(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{250_000, 25_000}, {100_000, 10_000}, {15_500, 1_000}, {9_999, 999}, {40, 4}, {5, 1}, {0, 1}} {
		if got := holdStep(tc.n); got != tc.want {
			t.Errorf("holdStep(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestStepsOn: the step-down goes on while at least a step would be left — never to none.
func TestStepsOn(t *testing.T) {
	for _, tc := range []struct {
		registered, step int
		want             bool
	}{
		{250_000, 25_000, true},
		{125_000, 25_000, true}, // below half: the search goes on
		{50_000, 25_000, true},  // to 25,000: a step left
		{49_000, 25_000, false},
		{2, 1, true},
		{1, 1, false}, // never to none
		{0, 1, false},
	} {
		if got := stepsOn(tc.registered, tc.step); got != tc.want {
			t.Errorf("stepsOn(%d, %d) = %v, want %v", tc.registered, tc.step, got, tc.want)
		}
	}
}

// TestEvenlySpread: k distinct items of the input, in its order, never two of them closer than the
// spacing allows, so that the wheel's remaining beats stay even over H.
func TestEvenlySpread(t *testing.T) {
	prop := func(n uint16, k uint16) bool {
		items := make([]int32, int(n%5000)+1)
		for i := range items {
			items[i] = int32(3 * i)
		}
		k2 := int(k) % (len(items) + 1)
		out := evenlySpread(items, k2)
		if len(out) != k2 || !slices.IsSorted(out) || len(slices.Compact(slices.Clone(out))) != k2 {
			return false
		}
		// Positions in items: consecutive picks are floor(n/k) or ceil(n/k) apart.
		pos := make([]int, len(out))
		for i, v := range out {
			pos[i] = int(v) / 3
		}
		lo, hi := len(items)/max(k2, 1), (len(items)+max(k2, 1)-1)/max(k2, 1)
		for i := 1; i < len(pos); i++ {
			if gap := pos[i] - pos[i-1]; gap < lo || gap > hi {
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, nil); err != nil {
		t.Error(err)
	}
	if got := evenlySpread([]int32{1, 2, 3}, 5); len(got) != 3 {
		t.Errorf("k over n: %v", got)
	}
}
