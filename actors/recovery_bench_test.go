package actors_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// BenchmarkRecoveryWave measures a fleet climbing back after it went degraded at once (a partition
// between the modules and the service ended): N servers (RECOVERY_N, default 100,000) persisted
// degraded in a real PostgreSQL, loaded at start, and every one heartbeated once by RECOVERY_WORKERS
// (default 64) closed loops — each heartbeat a recovery, durable before it is answered. A heartbeat
// answered 503 is tried again after the rest (a module's next beat). It reports the time until every
// server is healthy, recoveries per second, the 503s on the way and this process's CPU per recovery
// (without RECOVERY_BUSY).
// RECOVERY_BUSY=K adds K goroutines that stay runnable (each a loop of ~50 µs of work and a yield), standing
// in for the request goroutines of a service short of CPU: every wait of the writer's commit on the
// network then ends behind them in the scheduler's queue, as on a saturated node.
// A measurement, not a test: run with -run '^$' -bench RecoveryWave -benchtime 1x.
func BenchmarkRecoveryWave(b *testing.B) {
	n, workers, busy := envInt("RECOVERY_N", 100000), envInt("RECOVERY_WORKERS", 64), envInt("RECOVERY_BUSY", 0)
	ctx := context.Background()
	db, tenant, owner := benchDatabase(b)
	store, err := persistence.Open(ctx, db.AppURL, persistence.Options{Node: "n1"})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	// The node owns every shard under claimed epochs, as `serve` does: every transition is fenced, so a
	// group commit's transitions are applied as one set (persistence.transitionSet).
	all := make([]int, shard.Count)
	for i := range all {
		all[i] = i
	}
	fences, err := store.ClaimShards(ctx, all, "n1")
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var took, cpu time.Duration
	var refused atomic.Int64
	for b.Loop() {
		b.StopTimer()
		if _, err := owner.Exec(ctx, `DELETE FROM mcp_servers`); err != nil {
			b.Fatal(err)
		}
		if _, err := owner.Exec(ctx, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols,
				status, last_heartbeat_at, registered_at)
			SELECT gen_random_uuid(), $1, 'm-' || i, '1.0.0', '{2025-11-25}', 'degraded', now(), now()
			FROM generate_series(1, $2) i`, tenant, n); err != nil {
			b.Fatal(err)
		}
		if _, err := owner.Exec(ctx, `VACUUM ANALYZE mcp_servers`); err != nil {
			b.Fatal(err)
		}
		var ids []uuid.UUID
		if err := store.LoadServers(ctx, tenant, func(s persistence.Server) error { ids = append(ids, s.ServerID); return nil }); err != nil {
			b.Fatal(err)
		}
		f, err := actors.Start(ctx, actors.Config{ManualMonitor: true}, store, actors.Deps{Log: log, Fences: fences})
		if err != nil {
			b.Fatal(err)
		}
		stopBusy := keepBusy(busy)
		b.StartTimer()
		start, cpu0 := time.Now(), processCPU()
		work := make(chan uuid.UUID, len(ids))
		for _, id := range ids {
			work <- id
		}
		var left sync.WaitGroup
		left.Add(len(ids))
		var failed atomic.Pointer[error] // the first failure (an atomic.Value would panic on a second of another type)
		for range workers {
			go func() {
				for id := range work {
					res, err := f.Heartbeat(ctx, tenant, id, telemetry.Carrier{})
					switch {
					case errors.Is(err, actors.ErrUnavailable):
						refused.Add(1)
						work <- id
						continue
					case err != nil:
						failed.CompareAndSwap(nil, &err)
					case res.Status != health.Healthy:
						err = errors.New("answered " + string(res.Status))
						failed.CompareAndSwap(nil, &err)
					}
					left.Done()
				}
			}()
		}
		left.Wait()
		close(work)
		took, cpu = took+time.Since(start), cpu+processCPU()-cpu0
		b.StopTimer()
		stopBusy()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		if err := f.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	per := float64(b.N)
	b.ReportMetric(took.Seconds()/per, "s-to-healthy")
	b.ReportMetric(float64(n)*per/took.Seconds(), "recoveries/s")
	b.ReportMetric(float64(refused.Load())/per, "503s")
	if busy == 0 { // the busy goroutines' CPU is not the recoveries'
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n)/per, "cpu-ms/recovery")
	}
}

// keepBusy starts k goroutines that stay runnable until the returned func is called.
func keepBusy(k int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				for end := time.Now().Add(50 * time.Microsecond); time.Now().Before(end); {
				}
				runtime.Gosched()
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
