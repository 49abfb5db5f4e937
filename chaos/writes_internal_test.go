package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/shard"
)

// The suite's write recording names, for every audit event, the fence of its own server's shard — also
// when one statement wrote the events of several shards (a set of registrations, which names every fence
// that passed in mcpfleet.fence) — so the owner check judges each event by its own shard's epoch.
func TestWritesRecordEachRowsFence(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if err := installWrites(ctx, db.AdminURL); err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open(ctx, db.AppURL, persistence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	tenant, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	fences, err := store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []persistence.Command
	for i := range 20 {
		id := uuid.New()
		cmds = append(cmds, persistence.WithFence(&persistence.RegisterCmd{EventID: uuid.New(), ServerID: id, TenantID: tenant,
			ModuleName: fmt.Sprintf("m%d", i), Version: "1", Protocols: []string{"2025-11-25"}, At: time.Now()}, fences[shard.Of(id)]))
	}
	for i, err := range store.Commit(ctx, cmds) {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	conn := db.AdminPool(t)
	c, err := conn.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	writes, err := readWrites(ctx, c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != len(cmds) {
		t.Fatalf("%d writes recorded, want %d", len(writes), len(cmds))
	}
	for _, w := range writes {
		id := uuid.MustParse(w.ServerID)
		f := fences[shard.Of(id)]
		if want := fmt.Sprintf("%d:%d", f.Shard, f.Epoch); w.Fence != want || w.OwnerEpoch != f.Epoch {
			t.Errorf("server %s: recorded fence %q (owner epoch %d), want %q", id, w.Fence, w.OwnerEpoch, want)
		}
	}
}
