package actors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// BenchmarkServerMemory reports the live heap a server costs in the actor system — its actor, mailbox,
// record, the fleet's entries and deadline bound — for 100,000 servers loaded at start (as after a
// restart) and heartbeated once each, over the fake store (whose own copy of the servers is not
// counted: it is in the heap before the fleet starts). Run it with -benchtime=1x;
// MCPFLEET_HEAP_PROFILE=<file> writes the heap profile with the servers live.
func BenchmarkServerMemory(b *testing.B) {
	const n = 100000
	h, ids, before := loadedFleet(b, n)
	defer h.stop()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if _, err := h.fleet.Heartbeat(context.Background(), h.tenant, ids[i], carrier{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/server")
	// Objects, not bytes, are what a collection's mark phase walks: every cycle visits each one.
	b.ReportMetric(float64(after.HeapObjects-before.HeapObjects)/n, "objects/server")
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
}

// loadedFleet starts a fleet over a fake store holding n healthy servers of one tenant, loaded at
// start, and returns it, the servers' ids and the memory statistics before the start, after a
// collection (the store's copy of the servers included).
func loadedFleet(b *testing.B, n int) (*harness, []uuid.UUID, runtime.MemStats) {
	return loadedFleetOf(b, n, health.Healthy, nil)
}

// loadedFleetOf is loadedFleet with servers of status, and mod applied to the fleet's configuration.
func loadedFleetOf(b *testing.B, n int, status health.Status, mod func(*Config)) (*harness, []uuid.UUID, runtime.MemStats) {
	store := newFakeStore()
	tenant := uuid.New()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		store.servers[ids[i]] = persistence.Server{ServerID: ids[i], TenantID: tenant, ModuleName: fmt.Sprintf("module-%06d", i),
			Version: "1.0.0", SupportedProtocols: []string{"2025-06-18"}, Status: status}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	h := &harness{t: &testing.T{}, store: store, clock: health.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		events: make(chan string, 100), tenant: tenant}
	h.start(mod)
	return h, ids, before
}

// BenchmarkDormantMemory reports what a deregistered server's actor costs while it runs and what its
// server costs once the actor went asleep (sleep.go): 100,000 deregistered servers loaded at start,
// each woken by a heartbeat (answered 409), then left quiet. Run it with -benchtime=1x.
func BenchmarkDormantMemory(b *testing.B) {
	const n = 100000
	h, ids, before := loadedFleetOf(b, n, health.Deregistered, func(c *Config) { c.DormantAfter = 2 * time.Second })
	defer h.stop()
	heap := func() float64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc-before.HeapAlloc) / n
	}
	dormant := heap()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if _, err := h.fleet.Heartbeat(context.Background(), h.tenant, ids[i], carrier{}); !errors.Is(err, ErrDeregistered) {
					b.Errorf("heartbeat of a deregistered server: %v", err)
				}
			}
		})
	}
	wg.Wait()
	awake := heap()
	for deadline := time.Now().Add(time.Minute); len(serverActors(h.fleet)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d server actors still running after a minute", len(serverActors(h.fleet)))
		}
	}
	b.ReportMetric(dormant, "loaded-B/server")
	b.ReportMetric(awake, "awake-B/server")
	b.ReportMetric(heap(), "asleep-B/server")
}

// BenchmarkMonitorTick is the cost of one monitor pass over a fleet of 100,000 healthy servers loaded
// at start, none of them due: with the deadline heap it checks none of them (the cost of a pass
// before it was a check sent to every server). The share of the service's CPU the monitor takes is
// this per pass ÷ the monitor period.
func BenchmarkMonitorTick(b *testing.B) {
	h, _, _ := loadedFleet(b, 100000)
	defer h.stop()
	h.monitor() // every actor has started and sent its deadline
	start := processCPU(b)
	for b.Loop() {
		h.monitor()
	}
	b.ReportMetric(float64(processCPU(b)-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/pass")
}
