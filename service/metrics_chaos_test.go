//go:build chaos

package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Actor restarts and respawns are counted on /metrics.
func TestMetricsCountActorRestarts(t *testing.T) {
	h := newHarness(t)
	id := uuid.MustParse(h.register("restarts", "tool"))
	h.Svc.Fleet().CrashServer(id)
	waitFor(t, "the restart to be counted", 10*time.Second, func() bool {
		return strings.Contains(h.scrape(), `mcpfleet_actor_restarts_total{event="server_actor_restart"} 1`)
	})
	h.Svc.Fleet().StopServer(id)
	waitFor(t, "the respawn to be counted", 10*time.Second, func() bool {
		return strings.Contains(h.scrape(), `mcpfleet_actor_restarts_total{event="server_actor_respawn"} 1`)
	})
	h.mustHeartbeat(id.String())
}
