package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// EndpointTool is a skill as the MCP endpoint sees it: the skill, what its server is and says, and the
// name it is listed under ("" until one is assigned).
type EndpointTool struct {
	Skill         Skill
	ModuleName    string
	RegisteredAt  time.Time
	Status        health.Status
	ServerEnabled bool   // server_config.enabled (true without a row)
	Origin        Origin // who created the server (OriginModule without a server_config row)
	Liveness      string // push | probe
	// StatusSince is when the server last went down (its last unhealthy or deregistered audit event) if
	// it is down, or came up (its last registered or recovered event) if it is up; nil if unknown.
	StatusSince *time.Time
	// Transitions counts the server's status transitions (degraded, unhealthy, recovered: what the flap
	// detector counts) since the time EndpointTools was given.
	Transitions     int
	LastHeartbeatAt time.Time
	LastContact     *time.Time
	ListedName      string
}

// EndpointTools returns every skill of tenantID with its server and its assigned endpoint name, ordered
// by the server's registration and the skill's name (the order names are assigned in). Each server's
// Transitions counts its status transitions at or after transitionsSince (the zero time: none are
// counted); StatusSince and Transitions are read once per server, not per skill (the server CTE is
// MATERIALIZED: inlined, PostgreSQL ran both subqueries over the tenant's audit events for every skill).
func (s *Store) EndpointTools(ctx context.Context, tenantID uuid.UUID, transitionsSince time.Time) ([]EndpointTool, error) {
	var since *time.Time
	if !transitionsSince.IsZero() {
		u := transitionsSince.UTC()
		since = &u
	}
	var out []EndpointTool
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH srv AS MATERIALIZED (
			    SELECT m.server_id, m.module_name, m.registered_at, m.status, m.last_heartbeat_at,
			           (SELECT max(a.occurred_at) FROM audit_events a WHERE a.tenant_id = m.tenant_id AND a.server_id = m.server_id AND a.kind = ANY(
			               CASE WHEN m.status IN ('unhealthy', 'deregistered') THEN ARRAY['mcp.server.unhealthy', 'mcp.server.deregistered']
			               ELSE ARRAY['mcp.server.registered', 'mcp.server.recovered'] END)) AS status_since,
			           CASE WHEN $1::timestamptz IS NULL THEN 0 ELSE
			               (SELECT count(*) FROM audit_events a WHERE a.tenant_id = m.tenant_id AND a.server_id = m.server_id
			                AND a.occurred_at >= $1 AND a.kind IN ('mcp.server.degraded', 'mcp.server.unhealthy', 'mcp.server.recovered')) END AS transitions
			    FROM mcp_servers m
			    WHERE EXISTS (SELECT 1 FROM skill_registry k WHERE k.server_id = m.server_id))
			SELECT k.skill_id, k.tenant_id, k.server_id, k.name, k.description, k.input_schema, k.enabled, k.available,
			       k.orphaned_at, k.updated_at,
			       m.module_name, m.registered_at, m.status, coalesce(c.enabled, true), coalesce(c.origin, 'module'), coalesce(c.liveness, 'push'),
			       m.status_since, m.transitions, m.last_heartbeat_at, c.last_contact, coalesce(n.name, '')
			FROM skill_registry k
			JOIN srv m ON m.server_id = k.server_id
			LEFT JOIN server_config c ON c.server_id = k.server_id
			LEFT JOIN mcp_tool_names n ON n.skill_id = k.skill_id
			ORDER BY m.registered_at, m.module_name, k.name, k.skill_id`, since)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EndpointTool, error) {
			var t EndpointTool
			k := &t.Skill
			err := r.Scan(&k.SkillID, &k.TenantID, &k.ServerID, &k.Name, &k.Description, &k.InputSchema, &k.Enabled, &k.Available,
				&k.OrphanedAt, &k.UpdatedAt, &t.ModuleName, &t.RegisteredAt, &t.Status, &t.ServerEnabled, &t.Origin, &t.Liveness,
				&t.StatusSince, &t.Transitions, &t.LastHeartbeatAt, &t.LastContact, &t.ListedName)
			return t, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("endpoint tools: %w", err)
	}
	return out, nil
}

// AssignToolNames records the endpoint names of skills that have none yet (skill id → name). A name is
// never changed: a skill that already has one keeps it, and a name another skill of the tenant holds is
// not taken (both are skipped silently; the caller reads the names back with EndpointTools).
func (s *Store) AssignToolNames(ctx context.Context, tenantID uuid.UUID, names map[uuid.UUID]string, at time.Time) error {
	if len(names) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(names))
	vals := make([]string, 0, len(names))
	for id, n := range names {
		ids = append(ids, id)
		vals = append(vals, n)
	}
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			INSERT INTO mcp_tool_names (skill_id, tenant_id, name, assigned_at)
			SELECT u.id, $1, u.name, $4 FROM unnest($2::uuid[], $3::text[]) AS u(id, name)
			ON CONFLICT DO NOTHING`, tenantID, ids, vals, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("assign tool names: %w", err)
	}
	return nil
}
