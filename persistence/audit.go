package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// AuditEvent is a row of audit_events. It carries only what TASK-MEMORY-111 allows: ids, module name,
// version and status.
type AuditEvent struct {
	EventID    uuid.UUID
	Seq        int64
	TenantID   uuid.UUID
	Kind       AuditKind
	ServerID   uuid.UUID
	ModuleName string
	Version    string
	Status     health.Status
	From       health.Status // empty for a first registration
	TraceID    string
	OccurredAt time.Time
}

// AuditFilter selects audit events: of one server (or all when uuid.Nil), after a sequence number.
type AuditFilter struct {
	ServerID uuid.UUID
	AfterSeq int64
	Limit    int
}

// ListAudit returns audit events of tenantID in commit order.
func (s *Store) ListAudit(ctx context.Context, tenantID uuid.UUID, f AuditFilter) ([]AuditEvent, error) {
	var out []AuditEvent
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id, seq, tenant_id, kind, server_id, module_name, version, status,
				coalesce(from_status, ''), coalesce(trace_id, ''), occurred_at
			FROM audit_events WHERE ($1 = '00000000-0000-0000-0000-000000000000'::uuid OR server_id = $1) AND seq > $2
			ORDER BY seq LIMIT $3`, f.ServerID, f.AfterSeq, f.Limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEvent, error) {
			var e AuditEvent
			var kind, status, from string
			err := r.Scan(&e.EventID, &e.Seq, &e.TenantID, &kind, &e.ServerID, &e.ModuleName, &e.Version, &status, &from, &e.TraceID, &e.OccurredAt)
			e.Kind, e.Status, e.From = AuditKind(kind), health.Status(status), health.Status(from)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}
