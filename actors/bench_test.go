package actors

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// BenchmarkServerMemory reports the live heap a registered, heartbeating server costs in the actor
// system (its actor, mailbox, record, the fleet's entries and deadline bound), over the fake store —
// whose own bookkeeping of the commands is counted too, so the figure is an upper bound. Run it with
// -benchtime=1x; MCPFLEET_HEAP_PROFILE=<file> writes the heap profile with the servers live.
func BenchmarkServerMemory(b *testing.B) {
	const n = 20000
	h := newHarness(&testing.T{}, nil)
	defer h.stop()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				ids[i] = h.register(fmt.Sprintf("module-%06d", i))
				if _, err := h.fleet.Heartbeat(context.Background(), h.tenant, ids[i], carrier{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	h.store.mu.Lock()
	h.store.committed = nil // the fake store's log of commands is not the service's memory
	h.store.mu.Unlock()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/server")
	if path := os.Getenv("MCPFLEET_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(ids)
}

// BenchmarkMonitorTick is the cost of one monitor pass over a fleet of 100,000 healthy servers loaded
// at start, none of them due: with the deadline heap it checks none of them (the cost of a pass
// before it was a check sent to every server). The share of the service's CPU the monitor takes is
// this per pass ÷ the monitor period.
func BenchmarkMonitorTick(b *testing.B) {
	const n = 100000
	store := newFakeStore()
	tenant := uuid.New()
	for i := range n {
		id := uuid.New()
		store.servers[id] = persistence.Server{ServerID: id, TenantID: tenant, ModuleName: fmt.Sprintf("module-%06d", i), Status: health.Healthy}
	}
	h := &harness{t: &testing.T{}, store: store, clock: health.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		events: make(chan string, 100), tenant: tenant}
	h.start(nil)
	defer h.stop()
	h.monitor() // every actor has started and sent its deadline
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	for b.Loop() {
		h.monitor()
	}
	b.ReportMetric(float64(cpu()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/pass")
}
