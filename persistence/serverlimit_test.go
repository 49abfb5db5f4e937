package persistence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// batchCounter counts the batches the store sends (each group commit, and each retry of one command
// alone, is one batch).
type batchCounter struct{ n atomic.Int64 }

func (c *batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A tenant at its server limit is refused (ErrServerLimit) inside the group commit, without failing it:
// the other tenant's registrations and transitions of the same batch commit in that one batch, with no
// per-command retry. The same holds for a module key's refused re-registration of an administrator's
// server (ErrNotOwned).
func TestServerLimitDoesNotFailTheGroup(t *testing.T) {
	testServerLimitDoesNotFailTheGroup(t, func(c persistence.Command) persistence.Command { return c })
}

// The production path: every server write fenced with its shard's epoch (WithFence). A refused command
// consumes every result it queued, so the next command of the batch reads its own results and the group
// commits in one batch. Fenced twice, the outer fence applies the inner command through fencedCmd's own
// Queue and Read (not the step's set_config), the path that must read its reset statement after a refusal.
func TestFencedServerLimitDoesNotFailTheGroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		times int
	}{{"fenced", 1}, {"fenced twice", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			var d *dash
			fences := map[int]persistence.Fence{}
			testServerLimitDoesNotFailTheGroupOn(t, func(dd *dash) { d = dd }, func(c persistence.Command) persistence.Command {
				var srv uuid.UUID
				switch c := c.(type) {
				case *persistence.RegisterCmd:
					srv = c.ServerID
				case *persistence.TransitionCmd:
					srv = c.ServerID
				case *persistence.ConfigureCmd:
					srv = c.ServerID
				default:
					t.Fatalf("no server id in %T", c)
				}
				f, ok := fences[shard.Of(srv)]
				if !ok {
					f = d.claim(srv, "n1")
					fences[shard.Of(srv)] = f
				}
				for range tc.times {
					c = persistence.WithFence(c, f)
				}
				return c
			})
		})
	}
}

func testServerLimitDoesNotFailTheGroup(t *testing.T, wrap func(persistence.Command) persistence.Command) {
	testServerLimitDoesNotFailTheGroupOn(t, func(*dash) {}, wrap)
}

// testServerLimitDoesNotFailTheGroupOn runs the test with every command of the mixed batches passed
// through wrap (onDash sees the test's database first).
func testServerLimitDoesNotFailTheGroupOn(t *testing.T, onDash func(*dash), wrap func(persistence.Command) persistence.Command) {
	var batches batchCounter
	d := newDashWith(t, persistence.Options{MaxServersPerTenant: 3, Tracer: &batches})
	onDash(d)
	ctx := context.Background()
	a, b := d.tenant, d.newTenant("other")
	reg := func(tenant uuid.UUID, module string) *persistence.RegisterCmd {
		return &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: tenant, ModuleName: module,
			Version: "1", Protocols: []string{"2025-11-25"}, At: t0}
	}
	var setup []persistence.Command
	for _, m := range []string{"a1", "a2", "a0"} {
		setup = append(setup, reg(a, m))
	}
	bExisting := reg(b, "b0")
	cfg := persistence.DefaultServerConfig(b, uuid.New())
	adminSrv := &persistence.ConfigureCmd{EventID: uuid.New(), ServerID: cfg.ServerID, TenantID: b, ModuleName: "b-admin", Version: "1", Config: cfg, At: t0}
	setup = append(setup, bExisting, adminSrv)
	for i, err := range d.store.Commit(ctx, setup) {
		if err != nil {
			t.Fatalf("setup %d: %v", i, err)
		}
	}

	overLimit := reg(a, "a3")
	aAgain := reg(a, "a1") // a re-registration creates nothing: never refused by the limit
	bNew := reg(b, "b1")
	bAgain := reg(b, "b0")
	bTransition := &persistence.TransitionCmd{EventID: uuid.New(), TenantID: b, ServerID: bExisting.Server.ServerID,
		ModuleName: "b0", Version: "1", From: health.Healthy, To: health.Degraded, At: t0.Add(20 * time.Second), LastEvidence: t0}
	notOwned := reg(b, "b-admin")
	overConfigure := &persistence.ConfigureCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: a, ModuleName: "a-admin",
		Version: "1", Config: persistence.DefaultServerConfig(a, uuid.New()), At: t0}
	batch := []persistence.Command{overLimit, bNew, aAgain, bTransition, notOwned, overConfigure, bAgain}
	for i := range batch {
		batch[i] = wrap(batch[i])
	}
	before := batches.n.Load()
	errs := d.store.Commit(ctx, batch)
	if n := batches.n.Load() - before; n != 1 {
		t.Errorf("the batch took %d batches, want 1 (no per-command retries)", n)
	}
	for i, want := range []error{persistence.ErrServerLimit, nil, nil, nil, persistence.ErrNotOwned, persistence.ErrServerLimit, nil} {
		if (want == nil) != (errs[i] == nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("command %d: %v, want %v", i, errs[i], want)
		}
	}
	if !bNew.Created || !bTransition.Applied || aAgain.Created || aAgain.Server.ServerID != setup[0].(*persistence.RegisterCmd).Server.ServerID {
		t.Fatalf("results: b1 created %v, transition applied %v, a1 again %+v", bNew.Created, bTransition.Applied, aAgain.Server)
	}
	var nA, nB int
	if err := d.owner.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = $1), count(*) FILTER (WHERE tenant_id = $2) FROM mcp_servers`, a, b).Scan(&nA, &nB); err != nil {
		t.Fatal(err)
	}
	if nA != 3 || nB != 3 {
		t.Fatalf("servers: tenant A %d (want 3), tenant B %d (want 3)", nA, nB)
	}
	// Two new servers of one tenant in one batch, with one place left: the first takes it, the second
	// sees it taken (the count is the transaction's own) and is refused.
	c := d.newTenant("third")
	for _, m := range []string{"c1", "c2"} {
		if errs := d.store.Commit(ctx, []persistence.Command{reg(c, m)}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	cLast, cOver := reg(c, "c3"), reg(c, "c4")
	before = batches.n.Load()
	errs = d.store.Commit(ctx, []persistence.Command{wrap(cLast), wrap(cOver)})
	if errs[0] != nil || !cLast.Created || !errors.Is(errs[1], persistence.ErrServerLimit) {
		t.Fatalf("the last place: %v, created %v", errs, cLast.Created)
	}
	if n := batches.n.Load() - before; n != 1 {
		t.Errorf("the last place took %d batches, want 1", n)
	}
	// The refused commands alone, outside a group, are refused the same way.
	if errs := d.store.Commit(ctx, []persistence.Command{reg(a, "a4")}); !errors.Is(errs[0], persistence.ErrServerLimit) {
		t.Fatalf("alone: %v", errs[0])
	}
}
