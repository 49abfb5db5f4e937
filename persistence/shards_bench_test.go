package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// BenchmarkGroupCommit measures the cost of the fence: one group commit of 256 transitions (each server
// flips healthy ↔ degraded), unfenced and fenced by every shard's current epoch. A measurement, not a
// test: run with -bench GroupCommit -run '^$'.
func BenchmarkGroupCommit(b *testing.B) {
	for _, fenced := range []bool{false, true} {
		name := "unfenced"
		if fenced {
			name = "fenced"
		}
		b.Run(name, func(b *testing.B) { benchGroupCommit(b, newDash(b), fenced) })
	}
}

func benchGroupCommit(b *testing.B, d *dash, fenced bool) {
	ctx := context.Background()
	const n = 256
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = d.server(d.tenant, "m"+uuid.NewString()[:8], health.Healthy, i)
	}
	fences, err := d.store.ClaimShards(ctx, shard.All(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	status := []health.Status{health.Healthy, health.Degraded}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cmds := make([]persistence.Command, n)
		for j, id := range ids {
			c := &persistence.TransitionCmd{EventID: uuid.New(), TenantID: d.tenant, ServerID: id, ModuleName: "m", Version: "1",
				From: status[i%2], To: status[(i+1)%2], At: t0.Add(time.Duration(i) * time.Second)}
			cmds[j] = c
			if fenced {
				cmds[j] = persistence.WithFence(c, fences[shard.Of(id)])
			}
		}
		for _, err := range d.store.Commit(ctx, cmds) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
