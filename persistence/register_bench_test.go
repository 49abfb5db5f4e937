package persistence_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// BenchmarkRegisterGroupCommit measures registration in PostgreSQL as the writer does it: one group commit
// of 128 fenced RegisterCmds of one tenant, each a module advertising one tool, new modules ("new") or
// the same modules again ("again", a fleet re-registering after an outage). It reports registrations/s
// of the one connection a group commit uses. A measurement, not a test: run with
// -bench RegisterGroupCommit -run '^$'; BENCH_BATCH sets the commands per group commit (default 128).
func BenchmarkRegisterGroupCommit(b *testing.B) {
	for _, again := range []bool{false, true} {
		name := "new"
		if again {
			name = "again"
		}
		b.Run(name, func(b *testing.B) { benchRegister(b, newDash(b), again) })
	}
}

func benchRegister(b *testing.B, d *dash, again bool) {
	ctx := context.Background()
	n := benchBatch()
	fences, err := d.store.ClaimShards(ctx, shard.All(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	tools := []persistence.Tool{{Name: "ping", Description: "answers pong", InputSchema: []byte(`{"type":"object"}`)}}
	batch := func(i int) []persistence.Command {
		cmds := make([]persistence.Command, n)
		for j := range cmds {
			id, mod := uuid.New(), fmt.Sprintf("m-%d-%d", i, j)
			if again {
				mod = fmt.Sprintf("m-%d", j)
			}
			cmds[j] = persistence.WithFence(&persistence.RegisterCmd{EventID: uuid.New(), ServerID: id, TenantID: d.tenant,
				ModuleName: mod, Version: "1", Protocols: []string{"2025-11-25"}, Tools: tools,
				At: t0.Add(time.Duration(i) * time.Second)}, fences[shard.Of(id)])
		}
		return cmds
	}
	commit := func(cmds []persistence.Command) {
		for _, err := range d.store.Commit(ctx, cmds) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	if again {
		commit(batch(0))
	}
	b.ResetTimer()
	for i := 1; b.Loop(); i++ {
		commit(batch(i))
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "registrations/s")
}

func benchBatch() int {
	if v, err := strconv.Atoi(os.Getenv("BENCH_BATCH")); err == nil {
		return v
	}
	return 128
}
