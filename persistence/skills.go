package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Skill is a row of skill_registry.
type Skill struct {
	SkillID     uuid.UUID
	TenantID    uuid.UUID
	ServerID    uuid.UUID
	Name        string
	Description string
	InputSchema json.RawMessage
	Enabled     bool
	Available   bool
	OrphanedAt  *time.Time
	UpdatedAt   time.Time
}

// Tool is a tool as a server advertises it (the MCP tool shape).
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

const skillColumns = `skill_id, tenant_id, server_id, name, description, input_schema, enabled, available, orphaned_at, updated_at`

func scanSkill(row pgx.Row) (Skill, error) {
	var k Skill
	err := row.Scan(&k.SkillID, &k.TenantID, &k.ServerID, &k.Name, &k.Description, &k.InputSchema,
		&k.Enabled, &k.Available, &k.OrphanedAt, &k.UpdatedAt)
	return k, err
}

// ListSkills returns the skills of one server of tenantID, by name.
func (s *Store) ListSkills(ctx context.Context, tenantID, serverID uuid.UUID) ([]Skill, error) {
	var out []Skill
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+skillColumns+` FROM skill_registry WHERE server_id = $1 ORDER BY name`, serverID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Skill, error) { return scanSkill(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list skills: %w", err)
	}
	return out, nil
}

// queueSkillUpsert queues the statements that write a server's advertised tools: new ones start
// disabled, existing ones keep their enabled flag and become available (if available is true), vanished
// ones are orphaned (kept, marked, unavailable). The server is found by (tenant, module name), so the
// statements can follow its upsert in the same batch. readSkillUpsert reads their results.
func queueSkillUpsert(b *pgx.Batch, tenantID uuid.UUID, moduleName string, tools []Tool, available bool, at time.Time) {
	names := make([]string, len(tools))
	descs := make([]string, len(tools))
	schemas := make([]string, len(tools))
	for i, t := range tools {
		names[i], descs[i] = t.Name, t.Description
		schemas[i] = "{}"
		if len(t.InputSchema) > 0 && string(t.InputSchema) != "null" {
			schemas[i] = string(t.InputSchema)
		}
	}
	b.Queue(`INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, description, input_schema, enabled, available, created_at, updated_at)
		SELECT gen_random_uuid(), $1, m.server_id, t.name, t.descr, t.schema::jsonb, false, $6, $7, $7
		FROM mcp_servers m, unnest($3::text[], $4::text[], $5::text[]) AS t(name, descr, schema)
		WHERE m.tenant_id = $1 AND m.module_name = $2
		ON CONFLICT (server_id, name) DO UPDATE SET description = EXCLUDED.description,
			input_schema = EXCLUDED.input_schema, available = $6, orphaned_at = NULL, updated_at = $7`,
		tenantID, moduleName, names, descs, schemas, available, at)
	b.Queue(`UPDATE skill_registry k SET available = false, orphaned_at = $4, updated_at = $4
		FROM mcp_servers m
		WHERE m.tenant_id = $1 AND m.module_name = $2 AND k.server_id = m.server_id
		  AND k.orphaned_at IS NULL AND NOT (k.name = ANY($3::text[]))`,
		tenantID, moduleName, names, at)
}

// readSkillUpsert reads the results of queueSkillUpsert and returns how many skills it orphaned.
func readSkillUpsert(br pgx.BatchResults) (orphaned int64, err error) {
	if _, err := br.Exec(); err != nil {
		return 0, fmt.Errorf("upsert skills: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, fmt.Errorf("orphan skills: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ReconcileSkills makes every skill of tenantID agree with its server's status: available exactly when
// the server is healthy or degraded and the skill is not orphaned. It is the level-triggered repair of
// the cascade after a crash, and returns how many rows it changed.
func (s *Store) ReconcileSkills(ctx context.Context, tenantID uuid.UUID) (int64, error) {
	var n int64
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE skill_registry k
			SET available = (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL), updated_at = now()
			FROM mcp_servers m
			WHERE m.server_id = k.server_id
			  AND k.available IS DISTINCT FROM (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL)`)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile skills: %w", err)
	}
	return n, nil
}
