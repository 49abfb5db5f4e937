package persistence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// Two deliverers on one database (two nodes) sweep the same outbox at once: every alert is delivered,
// once, and never by both at the same time.
func TestTwoDeliverersNeverShareAnAlert(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	other, err := persistence.Open(ctx, d.db.AppURL, persistence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	const n = 60
	now := time.Now()
	for range n {
		d.exec(d.tenant, `INSERT INTO alert_outbox (event_id, tenant_id, kind, payload, created_at, next_attempt_at)
			VALUES ($1, $2, 'mcp.server.unhealthy', '{}', $3, $3)`, uuid.New(), d.tenant, now.Add(-time.Minute))
	}
	var mu sync.Mutex
	inFlight := map[uuid.UUID]bool{}
	delivered := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	for _, store := range []*persistence.Store{d.store, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				als, err := store.ClaimAlerts(ctx, d.tenant, time.Now(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if len(als) == 0 {
					return
				}
				al := als[0]
				mu.Lock()
				if inFlight[al.EventID] {
					t.Errorf("alert %s claimed while the other deliverer was delivering it", al.EventID)
				}
				inFlight[al.EventID] = true
				mu.Unlock()
				mu.Lock() // "deliver"
				delivered[al.EventID]++
				delete(inFlight, al.EventID)
				mu.Unlock()
				if ok, err := store.MarkAlertDelivered(ctx, al, al.Attempts+1, time.Now()); !ok || err != nil {
					t.Errorf("mark delivered: %v %v", ok, err)
				}
			}
		}()
	}
	wg.Wait()
	if len(delivered) != n {
		t.Fatalf("%d alerts delivered, want %d", len(delivered), n)
	}
	for id, c := range delivered {
		if c != 1 {
			t.Errorf("alert %s delivered %d times", id, c)
		}
	}
	if left := d.count(`SELECT count(*) FROM alert_outbox WHERE delivered_at IS NULL`); left != 0 {
		t.Fatalf("%d alerts left undelivered", left)
	}
}

// A claimed alert is invisible to other deliverers until its lease ends; then it is claimed again (at
// least once), and the first deliverer's late outcome is not recorded over the second's claim.
func TestAlertLeaseExpiresAndTheStaleClaimIsIgnored(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	id := uuid.New()
	now := time.Now()
	d.exec(d.tenant, `INSERT INTO alert_outbox (event_id, tenant_id, kind, payload, created_at, next_attempt_at)
		VALUES ($1, $2, 'mcp.server.unhealthy', '{}', $3, $3)`, id, d.tenant, now)
	first, err := d.store.ClaimAlerts(ctx, d.tenant, now, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("first claim: %v %v", first, err)
	}
	if again, err := d.store.ClaimAlerts(ctx, d.tenant, now.Add(persistence.AlertLease-time.Second), 10); err != nil || len(again) != 0 {
		t.Fatalf("claimed within the lease: %v %v", again, err)
	}
	second, err := d.store.ClaimAlerts(ctx, d.tenant, now.Add(persistence.AlertLease+time.Second), 10)
	if err != nil || len(second) != 1 || second[0].Claim == first[0].Claim {
		t.Fatalf("claim after the lease: %v %v", second, err)
	}
	if ok, err := d.store.MarkAlertFailed(ctx, first[0], 1, now, "late"); ok || err != nil {
		t.Fatalf("the stale claim's outcome: %v %v", ok, err)
	}
	if ok, err := d.store.MarkAlertDelivered(ctx, second[0], 1, now); !ok || err != nil {
		t.Fatalf("the current claim's outcome: %v %v", ok, err)
	}
	if n := d.count(`SELECT count(*) FROM alert_outbox WHERE delivered_at IS NOT NULL AND last_error IS NULL`); n != 1 {
		t.Fatal("the delivery was not recorded")
	}
}
