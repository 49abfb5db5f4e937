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

// TestSetStatementsRunOnGenericPlans: in a group commit, the registration set's and the transition
// set's statements run on generic plans (planning them and the foreign-key checks
// they fire was a fifth of PostgreSQL's CPU per registration), and every other command's statements,
// after them in the same transaction, on custom plans again.
func TestSetStatementsRunOnGenericPlans(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	tools := []persistence.Tool{{Name: "echo", Description: "echo", InputSchema: []byte(`{"type":"object"}`)}}
	var ids []uuid.UUID
	var regs []persistence.Command
	for _, m := range []string{"a", "b", "c"} {
		id := uuid.New()
		ids = append(ids, id)
		regs = append(regs, persistence.WithFence(&persistence.RegisterCmd{EventID: uuid.New(), ServerID: id, TenantID: d.tenant,
			ModuleName: m, Version: "1", Protocols: []string{"2025-11-25"}, Tools: tools, At: t0}, fences[shard.Of(id)]))
	}
	probe := func(like string) *persistence.PlanProbe {
		return &persistence.PlanProbe{TenantID: d.tenant, Like: like}
	}
	servers := probe("INSERT INTO mcp_servers")
	transitions := probe("/* transition set */")
	fenced := probe("INSERT INTO mcp_servers") // a fenced command's step opens with the fence's own statement
	cmds := append(regs, persistence.WithFence(fenced, fences[0]), servers)
	for i, err := range d.store.Commit(ctx, cmds) {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	var trs []persistence.Command
	for i, id := range ids {
		trs = append(trs, persistence.WithFence(&persistence.TransitionCmd{EventID: uuid.New(), TenantID: d.tenant, ServerID: id,
			ModuleName: []string{"a", "b", "c"}[i], Version: "1", From: health.Healthy, To: health.Degraded, At: t0.Add(time.Minute)},
			fences[shard.Of(id)]))
	}
	for i, err := range d.store.Commit(ctx, append(trs, transitions)) {
		if err != nil {
			t.Fatalf("transition %d: %v", i, err)
		}
	}
	for _, p := range []*persistence.PlanProbe{fenced, servers, transitions} {
		if p.Mode != "force_custom_plan" {
			t.Errorf("a command after the sets ran with plan_cache_mode %q, want force_custom_plan", p.Mode)
		}
		if p.Generic < 1 || p.Custom != 0 {
			t.Errorf("statements with %q: %d generic and %d custom plans, want only generic ones", p.Like, p.Generic, p.Custom)
		}
	}
}

// TestPlanModeIsPerStepAcrossTenants: in a group commit of two tenants, each tenant's steps are placed
// together (in tenant id order), so one tenant's registration set follows the other tenant's last step;
// every step sets its own plan mode, so each tenant's set runs generic and each command after it custom.
func TestPlanModeIsPerStepAcrossTenants(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []persistence.Command
	var probes []*persistence.PlanProbe
	for _, tenant := range []uuid.UUID{d.tenant, d.newTenant("other")} {
		id := uuid.New()
		cmds = append(cmds, persistence.WithFence(&persistence.RegisterCmd{EventID: uuid.New(), ServerID: id, TenantID: tenant,
			ModuleName: "m", Version: "1", Protocols: []string{"2025-11-25"}, At: t0}, fences[shard.Of(id)]))
		probes = append(probes, &persistence.PlanProbe{TenantID: tenant, Like: "INSERT INTO mcp_servers"})
	}
	for _, p := range probes {
		cmds = append(cmds, p)
	}
	for i, err := range d.store.Commit(ctx, cmds) {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	for i, p := range probes {
		if p.Mode != "force_custom_plan" {
			t.Errorf("tenant %d: a command after its set ran with plan_cache_mode %q", i, p.Mode)
		}
		if p.Generic < 1 || p.Custom != 0 {
			t.Errorf("tenant %d: registration statements had %d generic and %d custom plans, want only generic ones", i, p.Generic, p.Custom)
		}
	}
}
