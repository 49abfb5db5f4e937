package actors_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// BenchmarkColdStart measures what a restart or a failover waits for: actors.Start on a real PostgreSQL
// holding N servers (COLDSTART_N, default 100,000, each with a capability advertisement) of COLDSTART_TENANTS
// tenants (default 1; the servers dealt round-robin, so every tenant's rows lie across the whole table),
// from the call to a ready fleet — every server's actor spawned, the skill cascade repaired. It reports
// the time to ready per start, the CPU time this process spent in it (a figure a loaded machine changes
// less), and the times ServerTotals and LoadFleet alone take to read the fleet and ReconcileSkills alone to check the skill
// cascade (before each start, not timed in it). A measurement, not a test: run with
// -run '^$' -bench ColdStart -benchtime 3x (bench/REPORT.md records it).
func BenchmarkColdStart(b *testing.B) {
	n, nt := envInt("COLDSTART_N", 100000), envInt("COLDSTART_TENANTS", 1)
	ctx := context.Background()
	db, tenant, owner := benchDatabase(b)
	tenants := []uuid.UUID{tenant}
	if nt > 1 {
		admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
		if err != nil {
			b.Fatal(err)
		}
		for i := 1; i < nt; i++ {
			t, err := admin.CreateTenant(ctx, "tenant-"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			tenants = append(tenants, t)
		}
		admin.Close()
	}
	conn, err := owner.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	// Seeded without the triggers (the server count, the fence flag's test): the rows are what matters here.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols,
			capability_advertisement, status, last_heartbeat_at, registered_at, trace_id)
		SELECT gen_random_uuid(), ($1::uuid[])[1 + i % cardinality($1::uuid[])], 'm-' || i, '1.0.0', '{2025-11-25}',
			'{"tools":{"listChanged":true},"logging":{}}', 'healthy', now(), now(), lpad(to_hex(i), 32, '0')
		FROM generate_series(1, $2) i`, tenants, n); err != nil {
		b.Fatal(err)
	}
	// The tenants' server counts, which the count trigger would have kept: the fleet sizes its maps by them and
	// LoadServers reads a small tenant in one part.
	for _, q := range []string{`RESET session_replication_role`,
		`INSERT INTO tenant_server_counts (tenant_id, servers) SELECT tenant_id, count(*) FROM mcp_servers GROUP BY tenant_id
			ON CONFLICT (tenant_id) DO UPDATE SET servers = EXCLUDED.servers`,
		`VACUUM ANALYZE mcp_servers`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	store, err := persistence.Open(ctx, db.AppURL, persistence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var total, read, repair, cpu time.Duration
	for b.Loop() {
		start := time.Now()
		rows := 0
		totals, err := store.ServerTotals(ctx, tenants)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.LoadFleet(ctx, tenants, totals, func(persistence.Server) error { rows++; return nil }); err != nil || rows != n {
			b.Fatalf("load fleet: %d rows, want %d, %v", rows, n, err)
		}
		read += time.Since(start)
		start = time.Now()
		if _, err := actors.ReconcileSkills(ctx, store); err != nil {
			b.Fatal(err)
		}
		repair += time.Since(start)
		start, cpu0 := time.Now(), processCPU()
		f, err := actors.Start(ctx, actors.Config{ManualMonitor: true}, store, actors.Deps{Log: log})
		if err != nil {
			b.Fatal(err)
		}
		total, cpu = total+time.Since(start), cpu+processCPU()-cpu0
		b.StopTimer()
		if err := f.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-ready")
	b.ReportMetric(read.Seconds()/float64(b.N), "s-to-read-alone")
	b.ReportMetric(repair.Seconds()/float64(b.N), "s-to-repair-alone")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "s-cpu-to-ready")
	b.ReportMetric(float64(n), "servers")
	b.ReportMetric(float64(nt), "tenants")
}

// benchDatabase returns a fresh database with one tenant, "acme", the tenant's id and a pool of the
// database's owner (for seeding rows the runtime role could not write).
func benchDatabase(b *testing.B) (*pgtest.DB, uuid.UUID, *pgxpool.Pool) {
	ctx := context.Background()
	db := pgtest.New(b)
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	tenant, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		b.Fatal(err)
	}
	return db, tenant, db.AdminPool(b)
}

// envInt is the positive whole number in the environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
