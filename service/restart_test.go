package service_test

import (
	"github.com/mcpfleet/mcpfleet/service"
	"net/http"
	"testing"
	"time"
)

// After a restart the fleet is rebuilt from PostgreSQL: the same server answers heartbeats, a server
// persisted as unhealthy stays unhealthy until evidence, and nobody is declared unhealthy before 3H
// after the service is ready again (restart grace), however old the persisted heartbeat.
func TestRestartRebuildsFleetWithGrace(t *testing.T) {
	h := newHarness(t)
	live := h.register("calendar", "list_events")
	dead := h.register("weather", "forecast")
	h.advance(35 * time.Second)
	h.mustHeartbeat(live)
	h.runMonitor()
	if h.status(dead) != "unhealthy" || h.status(live) != "healthy" {
		t.Fatal("precondition")
	}
	h.Restart()
	h.advance(time.Hour) // the service was down for an hour: longer than 3H
	h.Restart()
	h.runMonitor()
	if s := h.status(live); s != "healthy" {
		t.Fatalf("right after restart: %s, want healthy (restart grace)", s)
	}
	if s := h.status(dead); s != "unhealthy" {
		t.Fatalf("a server persisted unhealthy: %s, want unhealthy until evidence", s)
	}
	h.advance(30*time.Second - time.Millisecond)
	h.runMonitor()
	if s := h.status(live); s != "degraded" {
		t.Fatalf("just under 3H after ready: %s, want degraded", s)
	}
	h.advance(time.Millisecond)
	h.runMonitor()
	if s := h.status(live); s != "unhealthy" {
		t.Fatalf("3H after ready: %s, want unhealthy", s)
	}
	if r := h.heartbeat(dead); r.status != http.StatusOK {
		t.Fatalf("heartbeat after restart: %d %s", r.status, r.body)
	}
	if h.status(dead) != "healthy" || !h.skills(dead)[0].Available {
		t.Fatal("a heartbeat after restart did not recover the server and its skills")
	}
}

// Acknowledged heartbeat stamps and transitions survive a graceful shutdown: the stamper and writer
// are drained before the process would exit.
func TestGracefulShutdownDrainsStamps(t *testing.T) {
	h := newHarness(t, func(c *service.Config, _ *service.Options) { c.StampFlushInterval = time.Second })
	id := h.register("calendar")
	h.advance(5 * time.Second)
	hb := h.mustHeartbeat(id)["last_heartbeat_at"].(string)
	h.Restart()
	got := h.fetchServer(id)["last_heartbeat_at"].(string)
	want, _ := time.Parse(time.RFC3339Nano, hb)
	have, _ := time.Parse(time.RFC3339Nano, got)
	if !have.Equal(want.Truncate(time.Microsecond)) {
		t.Fatalf("last_heartbeat_at after shutdown = %s, want the acknowledged %s", got, hb)
	}
}
