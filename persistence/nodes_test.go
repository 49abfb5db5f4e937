package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// The start-up sweep of running calls touches only calls of nodes that are gone: not this node's own,
// not a live node's (touched within the lease); a node not seen for the lease, one that never touched
// (single-node mode: every earlier process) and calls from before the node column are interrupted.
func TestInterruptRunningOnlyTouchesGoneNodes(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := d.server(d.tenant, "tools", health.Healthy, 0)
	stores := map[string]*persistence.Store{}
	for _, node := range []string{"self", "live", "stale", "silent"} {
		s, err := persistence.Open(ctx, d.db.AppURL, persistence.Options{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores[node] = s
	}
	calls := map[string]uuid.UUID{}
	for node, s := range stores {
		c, _, err := s.CreateCall(ctx, persistence.Call{CallID: uuid.New(), TenantID: d.tenant, RunID: "run-" + node, ServerID: srv,
			Tool: "t", State: persistence.CallRunning, RequestedBy: uuid.New(), CreatedAt: t0}, 100)
		if err != nil {
			t.Fatal(err)
		}
		calls[node] = c.CallID
	}
	legacy := uuid.New()
	d.exec(d.tenant, `INSERT INTO mcp_calls (call_id, tenant_id, run_id, server_id, tool, arguments, state, requested_by, created_at)
		VALUES ($1, $2, 'run-legacy', $3, 't', '{}', 'running', $4, now())`, legacy, d.tenant, srv, uuid.New())
	calls["legacy"] = legacy
	for _, node := range []string{"live", "stale"} {
		if err := stores["self"].TouchNode(ctx, persistence.ClusterNode{Node: node, Addr: "10.0.0.1:7101", Shards: 3, Servers: 7, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.owner.Exec(ctx, `UPDATE cluster_nodes SET seen_at = now() - $1::interval WHERE node = 'stale'`, persistence.NodeLease+time.Second); err != nil {
		t.Fatal(err)
	}
	live, err := stores["self"].ClusterNodes(ctx)
	if err != nil || len(live) != 1 || live[0].Node != "live" || live[0].Addr != "10.0.0.1:7101" || live[0].Shards != 3 || live[0].Servers != 7 {
		t.Fatalf("live nodes: %+v %v", live, err)
	}

	n, err := stores["self"].InterruptRunning(ctx, d.tenant, t0, func(persistence.Call) (string, persistence.CallResult) {
		return "interrupted", persistence.CallResult{Content: "x", IsError: true}
	})
	if err != nil || n != 3 {
		t.Fatalf("interrupted %d calls (%v), want 3: stale, silent, legacy", n, err)
	}
	for node, want := range map[string]string{"self": "running", "live": "running", "stale": "failed", "silent": "failed", "legacy": "failed"} {
		var state string
		if err := d.owner.QueryRow(ctx, `SELECT state FROM mcp_calls WHERE call_id = $1`, calls[node]).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != want {
			t.Errorf("the call of node %s is %s, want %s", node, state, want)
		}
	}
	// A node that leaves is gone at once.
	if err := stores["live"].LeaveNode(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	if n, err := stores["self"].InterruptRunning(ctx, d.tenant, t0, func(persistence.Call) (string, persistence.CallResult) {
		return "interrupted", persistence.CallResult{Content: "x", IsError: true}
	}); err != nil || n != 1 {
		t.Fatalf("after the live node left: interrupted %d (%v), want 1", n, err)
	}
}
