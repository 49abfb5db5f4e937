package persistence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// Two stores on one database (two nodes) race for the mass-silence permits of a tenant, many requests
// at once in each period: the grants of a period never exceed the tenant's budget (read from
// tenant_server_counts: 30 servers × 0.1 = 3, above Min = 2), and an episode is announced once across
// both, until a period without refusals ends it.
func TestSilencePermitsAreTheTenants(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	other, err := persistence.Open(ctx, d.db.AppURL, persistence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	for i := range 30 {
		d.server(d.tenant, fmt.Sprintf("m%02d", i), health.Healthy, i)
	}
	guard := lifecycle.NewMassSilence(lifecycle.MassSilenceConfig{Fraction: 0.1, Min: 2})
	const iv = 5 * time.Second
	p0 := time.Now().Truncate(iv)
	// period runs 2×8 concurrent requests (each for 1 or 2 servers) in the period starting at p, and
	// returns the permits granted and the episodes announced.
	period := func(p time.Time, requests int) (granted, announced int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range requests {
			store := d.store
			if i%2 == 1 {
				store = other
			}
			wg.Go(func() {
				var g int
				var a bool
				err := store.TakeSilencePermits(ctx, d.tenant, func(c lifecycle.SilenceCount, servers int) lifecycle.SilenceCount {
					c, _, _ = c.At(p, iv)
					c, g, a = c.Take(1+i%2, guard.Budget(servers))
					return c
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				granted += g
				if a {
					announced++
				}
			})
		}
		wg.Wait()
		return granted, announced
	}
	for i, want := range []struct{ granted, announced int }{{3, 1}, {3, 0}, {3, 0}} {
		if g, a := period(p0.Add(time.Duration(i)*iv), 16); g != want.granted || a != want.announced {
			t.Fatalf("period %d: %d granted, %d announced; want %d and %d", i, g, a, want.granted, want.announced)
		}
	}
	if g, a := period(p0.Add(3*iv), 1); g != 1 || a != 0 { // no refusal: the episode ends with this period
		t.Fatalf("quiet period: %d granted, %d announced", g, a)
	}
	if g, a := period(p0.Add(4*iv), 16); g != 3 || a != 1 {
		t.Fatalf("new episode: %d granted, %d announced; want 3 and 1", g, a)
	}
	if n := d.count(`SELECT count(*) FROM mass_silence_periods`); n != 1 {
		t.Fatalf("%d rows, want one per tenant", n)
	}
}
