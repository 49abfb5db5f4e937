package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// AlertPayload is the JSON body of an unhealthy alert (TASK-OBS-007), as stored in the outbox and POSTed
// to the webhook. EventID is stable across deliveries, for de-duplication by the receiver.
type AlertPayload struct {
	EventID        uuid.UUID     `json:"event_id"`
	Kind           string        `json:"kind"`
	TenantID       uuid.UUID     `json:"tenant_id"`
	ServerID       uuid.UUID     `json:"server_id"`
	ModuleName     string        `json:"module_name"`
	Version        string        `json:"version"`
	From           health.Status `json:"from"`
	Status         health.Status `json:"status"`
	LastEvidenceAt time.Time     `json:"last_evidence_at"`
	OccurredAt     time.Time     `json:"occurred_at"`
	TraceID        string        `json:"trace_id"`
	FlapCount      int           `json:"flap_count,omitempty"`
}

// The kinds of alert.
const (
	AlertUnhealthy   = "mcp.server.unhealthy"   // a server turned unhealthy
	AlertFlapping    = "mcp.server.flapping"    // a server keeps turning unhealthy: one alert for the episode
	AlertMassSilence = "mcp.fleet.mass_silence" // the mass-silence guard is holding servers at degraded
)

// Alert is a pending outbox row.
type Alert struct {
	EventID  uuid.UUID
	TenantID uuid.UUID
	Payload  json.RawMessage
	TraceID  string
	Attempts int
}

// PendingAlerts returns up to limit undelivered alerts of tenantID due at or before now, oldest first.
func (s *Store) PendingAlerts(ctx context.Context, tenantID uuid.UUID, now time.Time, limit int) ([]Alert, error) {
	var out []Alert
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id, tenant_id, payload, coalesce(trace_id, ''), attempts FROM alert_outbox
			WHERE delivered_at IS NULL AND next_attempt_at <= $1 ORDER BY created_at, event_id LIMIT $2`, now, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alert, error) {
			var a Alert
			err := r.Scan(&a.EventID, &a.TenantID, &a.Payload, &a.TraceID, &a.Attempts)
			return a, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pending alerts: %w", err)
	}
	return out, nil
}

// MarkAlertDelivered records a 2xx delivery of an alert.
func (s *Store) MarkAlertDelivered(ctx context.Context, tenantID, eventID uuid.UUID, attempts int, at time.Time) error {
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE alert_outbox SET delivered_at = $2, attempts = $3, last_error = NULL WHERE event_id = $1`, eventID, at, attempts)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark alert delivered: %w", err)
	}
	return nil
}

// MarkAlertFailed records a failed delivery attempt and when to try again.
func (s *Store) MarkAlertFailed(ctx context.Context, tenantID, eventID uuid.UUID, attempts int, next time.Time, reason string) error {
	if len(reason) > 500 {
		reason = reason[:500]
	}
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE alert_outbox SET attempts = $2, next_attempt_at = $3, last_error = $4 WHERE event_id = $1`, eventID, attempts, next, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark alert failed: %w", err)
	}
	return nil
}
