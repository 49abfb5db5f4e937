package actors

import (
	"sync"
	"time"
)

// timers are the heartbeats' answer timers, reused: a timer per heartbeat was ~190 bytes of garbage
// each. Since Go 1.23 a stopped or reset timer delivers no stale tick, so a reused timer only ever
// fires for its current wait.
var timers sync.Pool

// startTimer is a timer that fires after d; give it back with stopTimer.
func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// stopTimer stops t and keeps it for another startTimer.
func stopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
