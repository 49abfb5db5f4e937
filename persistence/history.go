package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// StatusWindow is one server's status history over a window, for the dashboard's status strip:
// the events in the window oldest first, and what held at its start.
type StatusWindow struct {
	// Before is the last event before the window (its status held at the window's start); nil when
	// the server registered within the window, or when Truncated.
	Before *AuditEvent
	// Events are the events at or after the window's start, oldest first: at most the limit asked
	// for, the newest ones.
	Events []AuditEvent
	// Truncated is set when the window holds more events than the limit: the oldest are left out, so
	// what held before the first of Events is not known.
	Truncated bool
}

// ServerStatusWindow returns serverID's audit events since from (at most limit, the newest) and the
// event before them. It reads the server's newest events through audit_events_server, newest first,
// and stops at the first one older than from: its cost is bounded by limit, whatever the history's
// length. ErrNotFound is not returned: a server without events has an empty window.
func (s *Store) ServerStatusWindow(ctx context.Context, tenantID, serverID uuid.UUID, from time.Time, limit int) (StatusWindow, error) {
	var out StatusWindow
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id, seq, tenant_id, kind, server_id, module_name, version, status,
				coalesce(from_status, ''), coalesce(trace_id, ''), occurred_at
			FROM audit_events WHERE tenant_id = $1 AND server_id = $2 ORDER BY seq DESC LIMIT $3`, tenantID, serverID, limit+1)
		if err != nil {
			return err
		}
		events, err := pgx.CollectRows(rows, scanAuditEvent)
		if err != nil {
			return err
		}
		for i := range events {
			e := events[i]
			if e.OccurredAt.Before(from) {
				out.Before = &e
				break
			}
			if len(out.Events) == limit {
				out.Truncated = true
				break
			}
			out.Events = append(out.Events, e)
		}
		for i, j := 0, len(out.Events)-1; i < j; i, j = i+1, j-1 {
			out.Events[i], out.Events[j] = out.Events[j], out.Events[i]
		}
		return nil
	})
	if err != nil {
		return StatusWindow{}, fmt.Errorf("server status window: %w", err)
	}
	return out, nil
}

func scanAuditEvent(r pgx.CollectableRow) (AuditEvent, error) {
	var e AuditEvent
	var kind, status, from string
	err := r.Scan(&e.EventID, &e.Seq, &e.TenantID, &kind, &e.ServerID, &e.ModuleName, &e.Version, &status, &from, &e.TraceID, &e.OccurredAt)
	e.Kind, e.Status, e.From = AuditKind(kind), health.Status(status), health.Status(from)
	return e, err
}

// StatusFlow counts the transitions of one tenant's servers from one status to another within one
// bucket of a window (From "" for a server's first registration).
type StatusFlow struct {
	Bucket   int
	From, To health.Status
	N        int
}

// FleetStatusFlows counts tenantID's audit events since from by bucket (bucket i holds the events at
// from + i·width up to the next), previous status and new status: what the dashboard needs to rebuild
// the tenant's counts by status over the window from the counts now. It reads the window through
// audit_events_tenant_time (migration 0017) and returns one row per (bucket, from, to) that occurred.
func (s *Store) FleetStatusFlows(ctx context.Context, tenantID uuid.UUID, from time.Time, width time.Duration) ([]StatusFlow, error) {
	if width <= 0 {
		return nil, fmt.Errorf("fleet status flows: bucket width %s", width)
	}
	var out []StatusFlow
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT floor(extract(epoch FROM occurred_at - $2) / $3)::int AS bucket,
				coalesce(from_status, ''), status, count(*)
			FROM audit_events WHERE tenant_id = $1 AND occurred_at >= $2
			GROUP BY 1, 2, 3 ORDER BY 1`, tenantID, from, width.Seconds())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusFlow, error) {
			var f StatusFlow
			var fromStatus, to string
			err := r.Scan(&f.Bucket, &fromStatus, &to, &f.N)
			f.From, f.To = health.Status(fromStatus), health.Status(to)
			return f, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleet status flows: %w", err)
	}
	return out, nil
}

// LastImport is the newest catalogue import event of a server.
type LastImport struct {
	Status  string // succeeded or failed
	TraceID string // "" when the import was not traced
	At      time.Time
}

// LastImportEvent returns serverID's newest import event, ok false when it was never imported.
func (s *Store) LastImportEvent(ctx context.Context, tenantID, serverID uuid.UUID) (LastImport, bool, error) {
	var out LastImport
	found := false
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT import_status, coalesce(trace_id, ''), occurred_at FROM import_events
			WHERE tenant_id = $1 AND server_id = $2 ORDER BY seq DESC LIMIT 1`, tenantID, serverID).Scan(&out.Status, &out.TraceID, &out.At)
		if err == pgx.ErrNoRows {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return LastImport{}, false, fmt.Errorf("last import event: %w", err)
	}
	return out, found, nil
}

// LastHeartbeats returns the committed last_heartbeat_at of each of ids that is tenantID's (at most
// a page of servers: the event stream's heartbeat watch). Heartbeat stamps are committed within the
// stamp flush interval, so a value is at most that much behind the service's memory.
func (s *Store) LastHeartbeats(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	out := make(map[uuid.UUID]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT server_id, last_heartbeat_at FROM mcp_servers
			WHERE tenant_id = $1 AND server_id = ANY($2::uuid[])`, tenantID, ids)
		if err != nil {
			return err
		}
		var id uuid.UUID
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
			out[id] = at
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("last heartbeats: %w", err)
	}
	return out, nil
}
