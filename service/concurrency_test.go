package service_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// Registrations racing for the same module_name end with one server and one server_id.
func TestConcurrentRegistrationsOfOneModule(t *testing.T) {
	h := newHarness(t)
	var wg sync.WaitGroup
	ids := make(chan string, 64)
	for range 64 {
		wg.Go(func() {
			r := h.do("POST", "/v1/mcp/servers/register", h.module(), registration("calendar", "list_events"))
			if r.status != http.StatusCreated && r.status != http.StatusOK {
				t.Errorf("register: %d %s", r.status, r.body)
				return
			}
			ids <- r.json(t)["server_id"].(string)
		})
	}
	wg.Wait()
	close(ids)
	first, created := "", 0
	for id := range ids {
		if first == "" {
			first = id
		}
		if id != first {
			t.Fatalf("two server ids for one module: %s and %s", first, id)
		}
	}
	var n int
	err := pgx.BeginFunc(context.Background(), h.DB.AppPool(t), func(tx pgx.Tx) error {
		_ = persistence.SetTenant(context.Background(), tx, h.Tenant)
		return tx.QueryRow(context.Background(), "SELECT count(*) FROM mcp_servers").Scan(&n)
	})
	if err != nil || n != 1 {
		t.Fatalf("%d rows in mcp_servers (err %v), want 1", n, err)
	}
	for _, e := range h.audit(first) {
		if e.Kind == "mcp.server.registered" {
			created++
		}
	}
	if created != 64 {
		t.Fatalf("%d registered audit events for 64 acknowledged registrations", created)
	}
}

// Heartbeats racing a deregistration: every answer is 200 (before) or 409 (after); once the
// deregistration is acknowledged no heartbeat is accepted; the final state is deregistered with its
// skills unavailable; nothing panics.
func TestHeartbeatsRacingDeregistration(t *testing.T) {
	h := newHarness(t)
	id := h.register("calendar", "list_events")
	var deregistered atomic.Bool
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var accepted, refused, late atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				before := deregistered.Load()
				r := h.heartbeat(id)
				switch r.status {
				case http.StatusOK:
					accepted.Add(1)
					if before {
						late.Add(1) // sent after the deregistration was acknowledged, yet accepted
					}
				case http.StatusConflict:
					refused.Add(1)
				default:
					t.Errorf("heartbeat: %d %s", r.status, r.body)
					return
				}
			}
		})
	}
	waitFor(t, "some heartbeats", 10*time.Second, func() bool { return accepted.Load() > 100 })
	r := h.do("POST", "/v1/mcp/servers/deregister", h.module(), map[string]string{"server_id": id})
	if r.status != 200 {
		t.Fatalf("deregister: %d %s", r.status, r.body)
	}
	deregistered.Store(true)
	waitFor(t, "heartbeats to be refused", 10*time.Second, func() bool { return refused.Load() > 100 })
	close(stop)
	wg.Wait()
	if late.Load() > 0 {
		t.Fatalf("%d heartbeats accepted after the deregistration was acknowledged", late.Load())
	}
	if s := h.status(id); s != "deregistered" {
		t.Fatalf("final status %s", s)
	}
	if h.skills(id)[0].Available {
		t.Fatal("skills available after deregistration")
	}
}

// Thousands of concurrent heartbeats over many servers while the monitor runs: every heartbeat is
// accepted, no server moves, and the stamps reach PostgreSQL.
func TestThousandsOfConcurrentHeartbeatsWithMonitor(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 200 {
		ids = append(ids, h.register(sprintf("m-%03d", i)))
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 50 {
		wg.Go(func() {
			for i := range 100 {
				if r := h.heartbeat(ids[(w*7+i)%len(ids)]); r.status != 200 {
					failed.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			h.runMonitor()
		}
	})
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of 5000 heartbeats failed", failed.Load())
	}
	counts := map[string]int{}
	r := h.do("GET", "/v1/mcp/servers?limit=1000", h.Keys[persistence.RoleOperator], nil)
	for _, s := range r.json(t)["servers"].([]any) {
		counts[s.(map[string]any)["status"].(string)]++
	}
	if counts["healthy"] != 200 {
		t.Fatalf("statuses after the storm: %v", counts)
	}
}
