package service_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// Two processes on one database (the first one paused by SIGSTOP and resumed after the second started,
// or started twice by mistake): the second claims every shard at start, so the first one's writes are
// refused by PostgreSQL; it gives the shards up and stops its servers' actors. Nothing is written twice:
// the silence both monitors see is recorded once, by the process that owns the server.
func TestSecondProcessFencesTheFirst(t *testing.T) {
	var fenced atomic.Int64
	h := newHarness(t, func(_ *service.Config, o *service.Options) {
		o.OnEvent = func(e string) {
			if e == "shard_fenced" {
				fenced.Add(1)
			}
		}
	})
	id := h.register("calendar", "lookup")
	first := h.Svc

	second, err := service.Start(context.Background(), h.Cfg, service.Options{Clock: h.Clock, ManualMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := second.Close(c); err != nil {
			t.Errorf("close the second service: %v", err)
		}
	})
	owners, err := second.Store().ShardOwners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Node != second.Node() {
			t.Fatalf("shard %d owned by %q after the second start, want %q", o.Shard, o.Node, second.Node())
		}
	}

	// Both see the server silent past 3H; only the first one's monitor runs. Its transition is fenced.
	h.advance(31 * time.Second)
	h.runMonitor()
	if got := h.status(id); got != "healthy" {
		t.Fatalf("status %q after the fenced process's monitor, want healthy (nothing written)", got)
	}
	if got := kinds(h.audit(id)); len(got) != 1 {
		t.Fatalf("audit %v after the fenced process's monitor, want the registration only", got)
	}
	waitFor(t, "the first process to give the fenced shard up", 10*time.Second, func() bool { return fenced.Load() > 0 })
	// The first process no longer runs the server: a heartbeat to it is 503 (retry elsewhere), not 404.
	if r := h.heartbeat(id); r.status != http.StatusServiceUnavailable {
		t.Fatalf("heartbeat to the fenced process: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v1/mcp/servers/register", h.module(), registration("mail")); r.status != http.StatusServiceUnavailable {
		t.Fatalf("registration on the fenced process: %d %s", r.status, r.body)
	}

	// The owner records the silence, once.
	h.Svc = second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := second.Fleet().RunMonitor(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.status(id); got != "unhealthy" {
		t.Fatalf("status %q after the owner's monitor, want unhealthy", got)
	}
	unhealthy := 0
	for _, k := range kinds(h.audit(id)) {
		if k == string(persistence.KindUnhealthy) {
			unhealthy++
		}
	}
	if unhealthy != 1 {
		t.Fatalf("audit %v, want one unhealthy event", kinds(h.audit(id)))
	}
	h.mustHeartbeat(id) // the owner takes heartbeats
	h.Svc = first       // the harness closes the first one
}

// A fenced process that only takes heartbeats (no transition to write) learns it lost its shards from its
// first heartbeat stamp: the stamp is dropped and reported, the shard given up, and the next heartbeat is
// 503 instead of an acknowledgement that nothing records.
func TestFencedStampStopsTheShard(t *testing.T) {
	var fenced atomic.Int64
	h := newHarness(t, func(_ *service.Config, o *service.Options) {
		o.OnEvent = func(e string) {
			if e == "shard_fenced" {
				fenced.Add(1)
			}
		}
	})
	id := h.register("calendar")
	second, err := service.Start(context.Background(), h.Cfg, service.Options{Clock: h.Clock, ManualMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := second.Close(c); err != nil {
			t.Errorf("close the second service: %v", err)
		}
	})
	h.mustHeartbeat(id) // answered from memory; its stamp is fenced at the next flush
	waitFor(t, "the stale stamp to be reported", 10*time.Second, func() bool { return fenced.Load() > 0 })
	if r := h.heartbeat(id); r.status != http.StatusServiceUnavailable {
		t.Fatalf("heartbeat to the fenced process after its stamp was refused: %d %s", r.status, r.body)
	}
}
