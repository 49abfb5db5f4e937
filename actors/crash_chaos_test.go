//go:build chaos

package actors

import (
	"testing"

	"github.com/mcpfleet/mcpfleet/health"
)

// TestCrashRestartsWithState: a server actor that panics is restarted in place with its status and
// deadline, and the next durable steps run in order.
func TestCrashRestartsWithState(t *testing.T) {
	h := newHarness(t, nil)
	id := h.register("a")
	h.clock.Advance(2 * testH)
	h.monitor()
	h.fleet.CrashServer(id)
	h.waitEvent("server_actor_restart")
	h.clock.Advance(testH)
	h.monitor()
	h.barrier(id)
	wantStatuses(t, h.statuses(id), health.Degraded, health.Unhealthy)
}
