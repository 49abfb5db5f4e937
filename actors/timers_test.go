package actors

import (
	"testing"
	"time"
)

// TestReusedTimerHasNoStaleTick: a heartbeat timer that expired unread and was given back fires, once
// reused, only for its new wait (Go ≥ 1.23 timer channels; with the old buffered ones, under
// GODEBUG=asynctimerchan=1 or a go.mod before 1.23, the stale tick would answer the next heartbeat
// with a timeout at once).
func TestReusedTimerHasNoStaleTick(t *testing.T) {
	tm := startTimer(time.Nanosecond)
	<-time.After(10 * time.Millisecond) // timers fire in order: tm has expired (unread) when this one has
	timers.Put(tm)                      // given back as it is, expired and unread (stopTimer would stop it first)
	again := startTimer(time.Hour)
	defer stopTimer(again)
	select {
	case <-again.C:
		t.Fatal("a reused timer delivered the tick of its previous wait")
	default:
	}
}
