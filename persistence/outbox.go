package persistence

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// Alert is an outbox row claimed for delivery (ClaimAlerts).
type Alert struct {
	EventID  uuid.UUID
	TenantID uuid.UUID
	Payload  json.RawMessage
	TraceID  string
	Attempts int
	// Claim is this delivery's claim token: the outcome is recorded only while it is the row's.
	Claim uuid.UUID
}

// AlertLease is how long a claimed alert is reserved for the deliverer that claimed it: longer than a
// delivery can take (the dispatcher's request timeout is 10 s). A deliverer that dies mid-delivery leaves
// the row to be claimed again once the lease is over (at least once).
const AlertLease = time.Minute

// ClaimAlerts claims up to limit undelivered alerts of tenantID due at or before now, oldest first, for
// one deliverer: in one statement it skips rows another deliverer is claiming (FOR UPDATE SKIP LOCKED),
// pushes each claimed row's next_attempt_at to now + AlertLease and gives it a fresh claim token. Until
// the lease ends or the outcome is recorded, no other deliverer — on this node or another sharing the
// database — claims the row, so no two deliver it concurrently. Claim few at a time: the lease covers
// their deliveries one after another.
func (s *Store) ClaimAlerts(ctx context.Context, tenantID uuid.UUID, now time.Time, limit int) ([]Alert, error) {
	var out []Alert
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `WITH due AS (
				SELECT event_id FROM alert_outbox WHERE delivered_at IS NULL AND next_attempt_at <= $1
				ORDER BY created_at, event_id LIMIT $2 FOR UPDATE SKIP LOCKED
			)
			UPDATE alert_outbox o SET next_attempt_at = $1::timestamptz + $3::interval, claim_token = gen_random_uuid()
			FROM due WHERE o.event_id = due.event_id
			RETURNING o.event_id, o.tenant_id, o.payload, coalesce(o.trace_id, ''), o.attempts, o.claim_token, o.created_at`,
			now, limit, AlertLease)
		if err != nil {
			return err
		}
		type claimed struct {
			Alert
			created time.Time
		}
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			err := r.Scan(&c.EventID, &c.TenantID, &c.Payload, &c.TraceID, &c.Attempts, &c.Claim, &c.created)
			return c, err
		})
		slices.SortFunc(cs, func(a, b claimed) int {
			return cmp.Or(a.created.Compare(b.created), bytes.Compare(a.EventID[:], b.EventID[:]))
		})
		for _, c := range cs {
			out = append(out, c.Alert)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim alerts: %w", err)
	}
	return out, nil
}

// MarkAlertDelivered records a 2xx delivery of a claimed alert. It reports false, writing nothing, when
// al's claim is no longer the row's (its lease ran out and another deliverer claimed it since: that one
// records the outcome).
func (s *Store) MarkAlertDelivered(ctx context.Context, al Alert, attempts int, at time.Time) (bool, error) {
	var n int64
	err := s.InTenant(ctx, al.TenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE alert_outbox SET delivered_at = $3, attempts = $4, last_error = NULL, claim_token = NULL
			WHERE event_id = $1 AND claim_token = $2`, al.EventID, al.Claim, at, attempts)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mark alert delivered: %w", err)
	}
	return n == 1, nil
}

// MarkAlertFailed records a failed delivery attempt of a claimed alert and when to try again; like
// MarkAlertDelivered, it reports false, writing nothing, when the claim is no longer the row's.
func (s *Store) MarkAlertFailed(ctx context.Context, al Alert, attempts int, next time.Time, reason string) (bool, error) {
	if len(reason) > 500 {
		reason = reason[:500]
	}
	var n int64
	err := s.InTenant(ctx, al.TenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE alert_outbox SET attempts = $3, next_attempt_at = $4, last_error = $5, claim_token = NULL
			WHERE event_id = $1 AND claim_token = $2`, al.EventID, al.Claim, attempts, next, reason)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mark alert failed: %w", err)
	}
	return n == 1, nil
}
