package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// TestServerStatusWindow: the window's events oldest first with the event before them, bounded by the
// limit (then Truncated and no Before), of one server of one tenant only.
func TestServerStatusWindow(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	t0 := time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)
	a := d.server(d.tenant, "alpha", health.Healthy, 0)
	other := d.newTenant("other")
	b := d.server(other, "beta", health.Healthy, 0)
	steps := []health.Status{health.Healthy, health.Degraded, health.Unhealthy, health.Healthy, health.Deregistered}
	for i, st := range steps {
		d.audit(d.tenant, a, "alpha", persistence.KindDegraded, "", st, t0.Add(time.Duration(i)*time.Minute))
		d.audit(other, b, "beta", persistence.KindDegraded, "", st, t0.Add(time.Duration(i)*time.Minute))
	}
	w, err := d.store.ServerStatusWindow(ctx, d.tenant, a, t0.Add(2*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if w.Truncated || w.Before == nil || w.Before.Status != health.Degraded || len(w.Events) != 3 ||
		w.Events[0].Status != health.Unhealthy || w.Events[2].Status != health.Deregistered || w.Events[0].ServerID != a {
		t.Fatalf("window: %+v", w)
	}
	w, err = d.store.ServerStatusWindow(ctx, d.tenant, a, t0.Add(2*time.Minute), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Truncated || w.Before != nil || len(w.Events) != 2 || w.Events[0].Status != health.Healthy || w.Events[1].Status != health.Deregistered {
		t.Fatalf("truncated window: %+v", w)
	}
	// Another tenant's server has no window here.
	if w, err := d.store.ServerStatusWindow(ctx, d.tenant, b, t0, 10); err != nil || len(w.Events) != 0 || w.Before != nil {
		t.Fatalf("another tenant's server: %+v %v", w, err)
	}

	// The tenant's flows by 2-minute bucket from t0+1m: the events at 1 and 2 min in bucket 0, at 3 and
	// 4 min in bucket 1, one row per bucket and (from, to), nothing of the other tenant's.
	flows, err := d.store.FleetStatusFlows(ctx, d.tenant, t0.Add(time.Minute), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for _, f := range flows {
		got[f.Bucket] += f.N
	}
	if len(flows) != 4 || got[0] != 2 || got[1] != 2 {
		t.Fatalf("flows %+v", flows)
	}
	if _, err := d.store.FleetStatusFlows(ctx, d.tenant, t0, 0); err == nil {
		t.Fatal("a bucket of width 0 was accepted")
	}
	if beats, err := d.store.LastHeartbeats(ctx, d.tenant, []uuid.UUID{a, b}); err != nil || len(beats) != 1 {
		t.Fatalf("last heartbeats: %v %v (another tenant's server must not be there)", beats, err)
	}
}
