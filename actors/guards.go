package actors

import (
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/lifecycle"
)

// Guards against false alarms (issue 7). Their rules live in package lifecycle (the monitor's stall
// clock, flapping, the mass-silence permit); the actors make each visible when it acts: a log line, an
// OnEvent event (counted as a metric) and, for the mass-silence guard, one fleet-level alert.

// FlapConfig configures flapping detection (lifecycle.FlapConfig).
type FlapConfig = lifecycle.FlapConfig

// MassSilenceConfig configures the mass-silence guard (lifecycle.MassSilenceConfig); it is off unless
// Fraction > 0.
type MassSilenceConfig = lifecycle.MassSilenceConfig

// permitMsg asks the fleet whether a server may turn unhealthy this monitor period.
type permitMsg struct{ tenantID uuid.UUID }

type permitReply struct{ granted bool }
