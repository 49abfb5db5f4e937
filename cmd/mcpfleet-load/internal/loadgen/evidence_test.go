package loadgen

import (
	"sync"
	"testing"
)

const sec = int64(1e9)

// TestSweepJudgesOnlyCommittedEvidence: a page proves the service wrong only
// with a 2xx answered before the page was asked for and sent less than 2H
// before the page's answer (H = 10 s here, late = 20 s).
func TestSweepJudgesOnlyCommittedEvidence(t *testing.T) {
	late := 20 * sec
	for _, tc := range []struct {
		name            string
		marks           []okMark
		asked, answered int64
		want            bool
	}{
		{"no evidence", nil, 30 * sec, 31 * sec, false},
		{"fresh and committed", []okMark{{10 * sec, 11 * sec}}, 20 * sec, 21 * sec, true},
		{"old", []okMark{{10 * sec, 11 * sec}}, 40 * sec, 41 * sec, false},
		// The 250,000 run's case: the recovery was sent in time but answered
		// after the page was asked for; the page may have been read before it.
		{"answered after the ask", []okMark{{25 * sec, 33 * sec}}, 30 * sec, 34 * sec, false},
		{"the earlier one was committed", []okMark{{5 * sec, 6 * sec}, {15 * sec, 33 * sec}}, 20 * sec, 24 * sec, true},
		{"the earlier one is old", []okMark{{1 * sec, 2 * sec}, {15 * sec, 33 * sec}}, 20 * sec, 24 * sec, false},
		// The page's answer is later than its read: a slow page stretches the
		// window against the service's favour, never for it.
		{"slow page", []okMark{{10 * sec, 11 * sec}}, 20 * sec, 31 * sec, false},
		{"exactly 2H", []okMark{{10 * sec, 11 * sec}}, 20 * sec, 30 * sec, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e evidence
			for _, m := range tc.marks {
				e.add(m)
			}
			if got := e.wronglyLate(tc.asked, tc.answered, late); got != tc.want {
				t.Errorf("wronglyLate(%d, %d) = %v, want %v", tc.asked/sec, tc.answered/sec, got, tc.want)
			}
		})
	}
}

// TestEvidenceKeepsTheLatestTwo: answers arriving out of order keep the two
// latest by send time, and add returns the latest sent before the new one.
func TestEvidenceKeepsTheLatestTwo(t *testing.T) {
	var e evidence
	if got := e.add(okMark{10, 50}); got != 0 {
		t.Fatalf("first add = %d, want 0", got)
	}
	if got := e.add(okMark{30, 35}); got != 10 {
		t.Fatalf("second add = %d, want 10", got)
	}
	if got := e.add(okMark{20, 60}); got != 10 { // late answer of an older request
		t.Fatalf("out-of-order add = %d, want 10", got)
	}
	if e.last != (okMark{30, 35}) || e.prev != (okMark{20, 60}) {
		t.Fatalf("kept %+v %+v, want {30 35} {20 60}", e.last, e.prev)
	}
	if got := e.add(okMark{5, 70}); got != 0 { // older than both: dropped
		t.Fatalf("stale add = %d, want 0", got)
	}
	if e.last != (okMark{30, 35}) || e.prev != (okMark{20, 60}) {
		t.Fatalf("a stale mark replaced a newer one: %+v %+v", e.last, e.prev)
	}
	if got := e.committedBy(40); got != 30 {
		t.Fatalf("committedBy(40) = %d, want 30", got)
	}
	if got := e.committedBy(34); got != 0 {
		t.Fatalf("committedBy(34) = %d, want 0", got)
	}
}

func TestEvidenceConcurrent(t *testing.T) {
	var e evidence
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				e.add(okMark{int64(g*1000 + i + 1), int64(g*1000 + i + 2)})
				e.committedBy(int64(i))
			}
		})
	}
	wg.Wait()
	if e.last.sent != 4000 || e.prev.sent != 3999 {
		t.Fatalf("kept %+v %+v, want sent 4000 and 3999", e.last, e.prev)
	}
}
