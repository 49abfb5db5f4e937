package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// every sends msg to pid through the root context every interval until stop is called; stop waits for
// the sending goroutine to end, so nothing is sent after it returns. It replaces protoactor's
// scheduler.SendRepeatedly, whose timer reads its state without synchronisation (a data race that
// `go test -race` reports at cancel time).
func every(system *actor.ActorSystem, interval time.Duration, pid *actor.PID, msg any) (stop func()) {
	return repeat(interval, func() { system.Root.Send(pid, msg) })
}

// repeat calls f every interval, on a goroutine of its own, until stop is called; stop waits for that
// goroutine to end, so f is not running and never runs again once it returns.
func repeat(interval time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done); wg.Wait() })
	}
}
