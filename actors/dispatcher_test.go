package actors

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// goroutineID is the running goroutine's number, from its stack header ("goroutine N [running]:").
func goroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(buf[:bytes.IndexByte(buf, ' ')]), 10, 64)
	return id
}

// TestWorkersReuseTheirGoroutines: runs scheduled while a worker is idle run on that worker, so two
// runs share a goroutine (the default dispatcher starts one per run: every id differs, and this fails).
func TestWorkersReuseTheirGoroutines(t *testing.T) {
	w := newWorkers(1)
	defer w.stop()
	seen := map[uint64]int{}
	wait.For(t, "two runs on one worker goroutine", 10*time.Second, func() bool {
		ran := make(chan uint64)
		w.Schedule(func() { ran <- goroutineID() })
		id := <-ran
		seen[id]++
		return seen[id] > 1
	})
}

// TestWorkersNeverBlockTheScheduler: with every worker busy (blocked in its run), a Schedule still runs
// its function at once, on a goroutine of its own; after stop, too. Without the fallback Schedule
// would wait for a worker that never frees, and the run would not come.
func TestWorkersNeverBlockTheScheduler(t *testing.T) {
	w := newWorkers(2)
	release := make(chan struct{})
	var busy sync.WaitGroup
	busy.Add(2)
	for range 2 {
		// Until both are taken, a Schedule may start a goroutine instead of reaching a worker; keep going.
		w.Schedule(func() { busy.Done(); <-release })
	}
	busy.Wait()
	ran := make(chan struct{})
	go w.Schedule(func() { close(ran) }) // without the fallback this Schedule waits for a free worker

	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a Schedule with every worker busy did not run")
	}
	close(release)
	w.stop()
	after := make(chan struct{})
	w.Schedule(func() { close(after) })
	select {
	case <-after:
	case <-time.After(10 * time.Second):
		t.Fatal("a Schedule after stop did not run")
	}
}
