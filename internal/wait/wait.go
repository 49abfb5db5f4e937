// Package wait is the tests' one way to wait for a condition instead of sleeping: For polls until the
// condition holds and fails the test, naming what it waited for, when it does not hold in time.
package wait

import (
	"testing"
	"time"
)

// Interval is how often For evaluates its condition.
const Interval = 10 * time.Millisecond

// For calls cond every Interval until it returns true, and fails tb with tb.Fatalf (so it must be called
// from the test's goroutine) if it has not within the given time. cond is called at least once, and once
// more after the deadline, so a condition that holds at the last moment passes.
func For(tb testing.TB, what string, within time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			if cond() {
				return
			}
			tb.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}
