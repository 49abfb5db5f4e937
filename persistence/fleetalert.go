package persistence

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// FleetAlertPayload is the body of a fleet-level alert: one alert for many servers.
type FleetAlertPayload struct {
	EventID    uuid.UUID `json:"event_id"`
	Kind       string    `json:"kind"`
	TenantID   uuid.UUID `json:"tenant_id"`
	Held       int       `json:"held"`   // servers held at degraded so far in this episode
	Budget     int       `json:"budget"` // servers released to unhealthy per monitor period
	Detail     string    `json:"detail"`
	OccurredAt time.Time `json:"occurred_at"`
}

// FleetAlertCmd writes one fleet-level alert to the outbox (no server row changes).
type FleetAlertCmd struct {
	Payload FleetAlertPayload
}

// Tenant implements Command.
func (c *FleetAlertCmd) Tenant() uuid.UUID { return c.Payload.TenantID }

// Queue implements Command.
func (c *FleetAlertCmd) Queue(b *pgx.Batch) {
	body, _ := json.Marshal(c.Payload)
	b.Queue(`INSERT INTO alert_outbox (event_id, tenant_id, server_id, kind, payload, created_at, next_attempt_at)
		VALUES ($1, $2, NULL, $3, $4::jsonb, $5, $5) ON CONFLICT (event_id) DO NOTHING`,
		c.Payload.EventID, c.Payload.TenantID, c.Payload.Kind, string(body), c.Payload.OccurredAt)
}

// Read implements Command.
func (c *FleetAlertCmd) Read(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("fleet alert: %w", err)
	}
	return nil
}
