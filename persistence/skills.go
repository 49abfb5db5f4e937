package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	Annotations json.RawMessage // nil when the tool declares none
	// ChangedAt is set when a re-registration or a re-import changed the tool's definition, or a
	// registration moved its server's endpoint (which disabled it); PreviousDefinition is the definition
	// before that change ({description, input_schema, annotations}, with "endpoint", the endpoint it was
	// approved with, after a move). Both are cleared when an operator enables the tool again.
	ChangedAt          *time.Time
	PreviousDefinition json.RawMessage
}

// Tool is a tool as a server advertises it (the MCP tool shape).
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	Annotations json.RawMessage // nil or a JSON object
}

const skillColumns = `skill_id, tenant_id, server_id, name, description, input_schema, enabled, available, orphaned_at, updated_at,
	annotations, changed_at, previous_definition`

func scanSkill(row pgx.Row) (Skill, error) {
	var k Skill
	err := row.Scan(&k.SkillID, &k.TenantID, &k.ServerID, &k.Name, &k.Description, &k.InputSchema,
		&k.Enabled, &k.Available, &k.OrphanedAt, &k.UpdatedAt, &k.Annotations, &k.ChangedAt, &k.PreviousDefinition)
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

// catalogueWrite is one write of a server's catalogue by its owning source: the server is found by
// (TenantID, ModuleName) and written only if its origin is Origin, so a registration never writes an
// administrator's catalogue and an import never writes a self-registered one.
type catalogueWrite struct {
	TenantID   uuid.UUID
	ModuleName string
	Origin     Origin
	Tools      []Tool
	Available  bool // the availability of kept and new tools
	By         uuid.UUID
	TraceID    string
	At         time.Time
}

// queueSkillUpsert queues the statements that write a server's tools: new ones start disabled, kept
// ones keep their enabled flag and become available (if Available) — unless their definition
// (description, input schema, annotations) changed, which disables them, records the old definition on
// the skill and appends the change to tool_changes (a changed tool is a new tool) — and vanished ones
// are orphaned (kept, marked, unavailable). The statements can follow the server's upsert in the same
// batch. readSkillUpsert reads their results.
func queueSkillUpsert(b *pgx.Batch, w catalogueWrite) {
	names := make([]string, len(w.Tools))
	descs := make([]string, len(w.Tools))
	schemas := make([]string, len(w.Tools))
	anns := make([]string, len(w.Tools))
	for i, t := range w.Tools {
		names[i], descs[i] = t.Name, t.Description
		schemas[i] = "{}"
		if len(t.InputSchema) > 0 && string(t.InputSchema) != "null" {
			schemas[i] = string(t.InputSchema)
		}
		if len(t.Annotations) > 0 && string(t.Annotations) != "null" {
			anns[i] = string(t.Annotations)
		}
	}
	var by any
	if w.By != uuid.Nil {
		by = w.By
	}
	b.Queue(`WITH srv AS (
			SELECT m.server_id FROM mcp_servers m
			WHERE m.tenant_id = $1 AND m.module_name = $2
			  AND coalesce((SELECT c.origin FROM server_config c WHERE c.server_id = m.server_id), 'module') = $9
		), t AS (
			SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS t(name, descr, schema, ann)
		), changed AS (
			SELECT k.skill_id, k.tenant_id, k.server_id, k.name, k.enabled,
				jsonb_build_object('description', k.description, 'input_schema', k.input_schema, 'annotations', k.annotations) AS old_def,
				jsonb_build_object('description', t.descr, 'input_schema', t.schema::jsonb, 'annotations', nullif(t.ann, '')::jsonb) AS new_def
			FROM skill_registry k JOIN srv ON k.server_id = srv.server_id JOIN t ON t.name = k.name
			WHERE k.description IS DISTINCT FROM t.descr OR k.input_schema IS DISTINCT FROM t.schema::jsonb
			   OR k.annotations IS DISTINCT FROM nullif(t.ann, '')::jsonb
		), logged AS (
			INSERT INTO tool_changes (change_id, tenant_id, server_id, skill_id, name, source, old_definition,
				new_definition, was_enabled, changed_by, trace_id, changed_at)
			SELECT gen_random_uuid(), tenant_id, server_id, skill_id, name, $10, old_def, new_def, enabled, $11, nullif($12, ''), $8
			FROM changed
		), up AS (
			INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, description, input_schema, annotations,
				enabled, available, created_at, updated_at)
			SELECT gen_random_uuid(), $1, srv.server_id, t.name, t.descr, t.schema::jsonb, nullif(t.ann, '')::jsonb, false, $7, $8, $8
			FROM srv, t
			ON CONFLICT (server_id, name) DO UPDATE SET description = EXCLUDED.description,
				input_schema = EXCLUDED.input_schema, annotations = EXCLUDED.annotations,
				enabled = skill_registry.enabled AND NOT EXISTS (SELECT 1 FROM changed c WHERE c.skill_id = skill_registry.skill_id),
				changed_at = coalesce((SELECT $8::timestamptz FROM changed c WHERE c.skill_id = skill_registry.skill_id), skill_registry.changed_at),
				previous_definition = coalesce(skill_registry.previous_definition, (SELECT c.old_def FROM changed c WHERE c.skill_id = skill_registry.skill_id)),
				available = $7, orphaned_at = NULL, updated_at = $8
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM changed WHERE enabled)`,
		w.TenantID, w.ModuleName, names, descs, schemas, anns, w.Available, w.At, string(w.Origin),
		w.Origin.CatalogueSource(), by, w.TraceID)
	b.Queue(`UPDATE skill_registry k SET available = false, orphaned_at = $4, updated_at = $4
		FROM mcp_servers m
		WHERE m.tenant_id = $1 AND m.module_name = $2 AND k.server_id = m.server_id
		  AND coalesce((SELECT c.origin FROM server_config c WHERE c.server_id = m.server_id), 'module') = $5
		  AND k.orphaned_at IS NULL AND NOT (k.name = ANY($3::text[]))`,
		w.TenantID, w.ModuleName, names, w.At, string(w.Origin))
}

// catalogueResult is what one queueSkillUpsert did.
type catalogueResult struct {
	Changed  int64 // tools whose definition changed
	Disabled int64 // of those, how many were enabled (and are now disabled)
	Orphaned int64
}

// readSkillUpsert reads the results of queueSkillUpsert.
func readSkillUpsert(br pgx.BatchResults) (catalogueResult, error) {
	var r catalogueResult
	if err := br.QueryRow().Scan(&r.Changed, &r.Disabled); err != nil {
		return r, fmt.Errorf("upsert skills: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return r, fmt.Errorf("orphan skills: %w", err)
	}
	r.Orphaned = tag.RowsAffected()
	return r, nil
}

// ReconcileSkills makes every skill of tenantID agree with its server's status: available exactly when
// the server is healthy or degraded and the skill is not orphaned. It is the level-triggered repair of
// the cascade after a crash, and returns how many rows it changed.
func (s *Store) ReconcileSkills(ctx context.Context, tenantID uuid.UUID) (int64, error) {
	var n int64
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		// The join hashes every server of the tenant: at 250,000 that is ~17 MB, which the default
		// work_mem (4 MB) would spill to temporary files in batches.
		if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, reconcileSkillsSQL)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile skills: %w", err)
	}
	return n, nil
}

// ReconcileTenants is ReconcileSkills for each of tenants and returns how many rows it changed in all
// (with an error, in the tenants repaired before it). It finds, loadGroupTenants tenants at a time in one
// read-only transaction and one round trip, the tenants whose skills disagree with their servers
// (skillsDriftSQL), and repairs those of the group, each in a transaction of its own as ReconcileSkills
// does, before it checks the next group: a node with thousands of tenants checks them all at start without
// a transaction per tenant (10,000 small tenants: 8 s one by one), and a repair holds its tenant's rows
// locked no longer than before.
func (s *Store) ReconcileTenants(ctx context.Context, tenants []uuid.UUID) (int64, error) {
	var n int64
	for group := range slices.Chunk(tenants, loadGroupTenants) {
		var drifted []uuid.UUID
		err := s.readTenants(ctx, group, skillsDriftPrelude, skillsDriftSQL, func(t uuid.UUID, rows pgx.Rows) error {
			drift, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
			if drift {
				drifted = append(drifted, t)
			}
			return err
		})
		if err != nil {
			return n, fmt.Errorf("reconcile skills: %w", err)
		}
		for _, t := range drifted {
			k, err := s.ReconcileSkills(ctx, t)
			if err != nil {
				return n, err
			}
			n += k
		}
	}
	return n, nil
}

// skillsDriftPrelude is what the drift check runs before its first tenant: the tables it joins locked
// before its snapshot, as readLocked does (a rewrite committing in between would hide the drift),
// ReconcileSkills' work_mem for a large tenant's join, and no parallel workers — at a start the check runs
// beside the fleet's load, whose decoding needs the cores (serve to ready at 250,000 servers with a tool
// each, alternated with the code before: 5–10 % slower with them, as fast as before without).
var skillsDriftPrelude = []string{"LOCK TABLE mcp_servers, skill_registry IN ACCESS SHARE MODE", "SET LOCAL work_mem = '64MB'",
	"SET LOCAL max_parallel_workers_per_gather = 0"}

// skillsDriftSQL tells whether a skill of the tenant ($1; row-level security scopes it too) disagrees
// with its server's status — what reconcileSkillsSQL repairs. A count, not EXISTS: the usual answer, none,
// reads every skill of the tenant, and an EXISTS is planned to stop at its first row (the start above was
// as slow with one as with parallel workers; not measured apart).
const skillsDriftSQL = `SELECT count(*) > 0 FROM skill_registry k JOIN mcp_servers m ON m.server_id = k.server_id
	WHERE k.tenant_id = $1 AND k.available IS DISTINCT FROM (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL)`

// reconcileSkillsSQL repairs the skills of the transaction's tenant (row-level security scopes it). A
// skill row another transaction holds (a cascade or a registration in flight, which sets it itself) is
// skipped, so the repair never waits on a row lock and cannot deadlock with the writes it repairs; if
// that write rolls back, the next reconciliation repairs the row.
const reconcileSkillsSQL = `WITH due AS MATERIALIZED (
		SELECT k.skill_id, (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL) AS want
		FROM skill_registry k JOIN mcp_servers m ON m.server_id = k.server_id
		WHERE k.available IS DISTINCT FROM (m.status IN ('healthy','degraded') AND k.orphaned_at IS NULL)
		FOR NO KEY UPDATE OF k SKIP LOCKED
	)
	UPDATE skill_registry k SET available = due.want, updated_at = now()
	FROM due WHERE k.skill_id = due.skill_id`

// ToolChange is a row of tool_changes: one change of a tool that a re-registration or a re-import made,
// which disabled the tool if it was enabled (WasEnabled) until an operator enabled it again.
type ToolChange struct {
	ChangeID uuid.UUID
	// Seq is the change's place in its tenant's sequence of tool changes (gapless, in commit order).
	Seq      int64
	SkillID  uuid.UUID
	ServerID uuid.UUID
	Name     string
	Source   string // CatalogueAdvertisement or CatalogueImport
	// Cause is "definition" (description, input schema or annotations changed; OldDefinition and
	// NewDefinition differ) or "endpoint" (a registration moved the server from OldEndpoint, "" for none,
	// to NewEndpoint; the definitions are the tool's unchanged one).
	Cause                        string
	OldDefinition, NewDefinition json.RawMessage
	OldEndpoint, NewEndpoint     string
	WasEnabled                   bool
	ChangedBy                    *uuid.UUID // the API key that caused it; nil when unknown
	TraceID                      string
	ChangedAt                    time.Time
}

// Tool change causes.
const (
	CauseDefinition = "definition"
	CauseEndpoint   = "endpoint"
)

// ToolChanges returns up to limit changes of one skill of tenantID with Seq after after, oldest first.
// It returns ErrNotFound for an unknown skill or another tenant's (a skill without changes has none).
func (s *Store) ToolChanges(ctx context.Context, tenantID, skillID uuid.UUID, after int64, limit int) ([]ToolChange, error) {
	var out []ToolChange
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM skill_registry WHERE skill_id = $1)`, skillID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		rows, err := tx.Query(ctx, `SELECT change_id, tenant_seq, skill_id, server_id, name, source, cause, old_definition,
				new_definition, coalesce(old_endpoint, ''), coalesce(new_endpoint, ''), was_enabled, changed_by,
				coalesce(trace_id, ''), changed_at
			FROM tool_changes WHERE skill_id = $1 AND tenant_seq > $2 ORDER BY tenant_seq LIMIT $3`, skillID, after, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ToolChange, error) {
			var c ToolChange
			err := r.Scan(&c.ChangeID, &c.Seq, &c.SkillID, &c.ServerID, &c.Name, &c.Source, &c.Cause, &c.OldDefinition,
				&c.NewDefinition, &c.OldEndpoint, &c.NewEndpoint, &c.WasEnabled, &c.ChangedBy, &c.TraceID, &c.ChangedAt)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tool changes: %w", err)
	}
	return out, nil
}
