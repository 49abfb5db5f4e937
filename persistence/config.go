package persistence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// Authentication modes as the API writes them to server_config.auth_mode. The column is plain text: a
// stored value that is none of these is shown verbatim and marked unsupported, never read as a fallback.
const (
	AuthModeNone   = ""
	AuthModeBearer = "bearer"
	AuthModeHeader = "header"
)

// Liveness modes: push (the module heartbeats itself) or probe (the service performs the handshake
// every heartbeat interval).
const (
	LivenessPush  = "push"
	LivenessProbe = "probe"
)

// Import statuses. There is no "importing": an import runs to completion inside the request that
// starts it, so nobody could observe that state (ADR-154 §6).
const (
	ImportNever     = "never_imported"
	ImportSucceeded = "succeeded"
	ImportFailed    = "failed"
)

// DataClasses returns the classes of data a server's tools may see, least to most sensitive, in a slice of
// the caller's own. A server declares none by default: its import is refused (fail-closed).
func DataClasses() []string { return []string{"public", "internal", "confidential", "restricted"} }

// ValidDataClass reports whether c is one of DataClasses.
func ValidDataClass(c string) bool { return slices.Contains(DataClasses(), c) }

// ServerConfig is a server's row of server_config: what an operator configured and what was observed
// of the far side. A server without a row has the defaults of DefaultServerConfig (Stored false).
type ServerConfig struct {
	ServerID uuid.UUID
	TenantID uuid.UUID
	Stored   bool // false: the server has no row yet
	// Origin is who created the server (OriginModule for a server without a row); it never changes.
	Origin Origin

	Endpoint       string // "" when none is known
	AuthMode       string // verbatim, see AuthMode*
	AuthHeaderName string
	// Credential is the sealed credential (package secrets), nil when none is configured. This package
	// never sees it in clear.
	Credential       []byte
	DataClass        string // "" when none is declared
	RequiresApproval bool
	Enabled          bool
	Liveness         string

	ImportStatus        string
	ImportError         string
	LastImported        *time.Time
	ToolCount           int
	CatalogueTTL        time.Duration // 0: the server sent no cache hint
	CatalogueFreshUntil *time.Time

	LastContact   *time.Time
	LastLatencyMS *int64

	UpdatedAt *time.Time // the last operator edit
}

// DefaultServerConfig is the configuration of a server that has no server_config row: approval
// required, enabled, push liveness, never imported, no endpoint.
func DefaultServerConfig(tenantID, serverID uuid.UUID) ServerConfig {
	return ServerConfig{
		ServerID: serverID, TenantID: tenantID, RequiresApproval: true, Enabled: true,
		Liveness: LivenessPush, ImportStatus: ImportNever, Origin: OriginModule,
	}
}

const configColumns = `c.server_id, c.tenant_id, coalesce(c.endpoint, ''), c.auth_mode, c.auth_header_name, c.credential,
	coalesce(c.data_class, ''), c.requires_approval, c.enabled, c.liveness, c.import_status, coalesce(c.import_error, ''),
	c.last_imported, c.tool_count, coalesce(c.catalogue_ttl_ms, 0), c.catalogue_fresh_until, c.last_contact,
	c.last_latency_ms, c.updated_at, c.origin`

// scanConfig scans configColumns, then extra.
func scanConfig(row pgx.Row, extra ...any) (ServerConfig, error) {
	var c ServerConfig
	var ttlMS int64
	var updated time.Time
	var origin string
	dest := append([]any{&c.ServerID, &c.TenantID, &c.Endpoint, &c.AuthMode, &c.AuthHeaderName, &c.Credential,
		&c.DataClass, &c.RequiresApproval, &c.Enabled, &c.Liveness, &c.ImportStatus, &c.ImportError,
		&c.LastImported, &c.ToolCount, &ttlMS, &c.CatalogueFreshUntil, &c.LastContact, &c.LastLatencyMS, &updated, &origin}, extra...)
	err := row.Scan(dest...)
	c.Origin = Origin(origin)
	c.Stored = true
	c.CatalogueTTL = time.Duration(ttlMS) * time.Millisecond
	c.UpdatedAt = &updated
	return c, err
}

// ServerConfigs returns the configuration of each of ids that exists in tenantID: stored rows, and the
// defaults for servers without one. An id of another tenant, or of no server, is absent from the map.
func (s *Store) ServerConfigs(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]ServerConfig, error) {
	out := make(map[uuid.UUID]ServerConfig, len(ids))
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT server_id FROM mcp_servers WHERE server_id = ANY($1::uuid[])`, ids)
		if err != nil {
			return err
		}
		existing, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		for _, id := range existing {
			out[id] = DefaultServerConfig(tenantID, id)
		}
		rows, err = tx.Query(ctx, `SELECT `+configColumns+` FROM server_config c WHERE c.server_id = ANY($1::uuid[])`, ids)
		if err != nil {
			return err
		}
		stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ServerConfig, error) { return scanConfig(r) })
		if err != nil {
			return err
		}
		for _, c := range stored {
			out[c.ServerID] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	return out, nil
}

// GetServerConfig returns one server of tenantID with its configuration, or ErrNotFound (also for
// another tenant's server).
func (s *Store) GetServerConfig(ctx context.Context, tenantID, serverID uuid.UUID) (Server, ServerConfig, error) {
	srv, err := s.GetServer(ctx, tenantID, serverID)
	if err != nil {
		return Server{}, ServerConfig{}, err
	}
	cfgs, err := s.ServerConfigs(ctx, tenantID, []uuid.UUID{serverID})
	if err != nil {
		return Server{}, ServerConfig{}, err
	}
	cfg, ok := cfgs[serverID]
	if !ok {
		return Server{}, ServerConfig{}, fmt.Errorf("get server config: %w", ErrNotFound)
	}
	return srv, cfg, nil
}

// ConfigureCmd creates a configured server: its mcp_servers row (status healthy, no protocols or
// advertisement declared), its server_config row and an mcp.server.registered audit event, in one
// statement. Applied twice it changes nothing the second time. If the module name is taken by another
// server of the tenant, Read returns ErrConflict and nothing is written; past the tenant's server limit
// the command is refused with ErrServerLimit, without failing its group commit.
type ConfigureCmd struct {
	EventID    uuid.UUID
	ServerID   uuid.UUID
	TenantID   uuid.UUID
	ModuleName string
	Version    string
	Config     ServerConfig // the editable fields are written; the rest take their defaults
	TraceID    string
	At         time.Time
	// ChangeID and By: the creation is recorded in server_config_changes (state applied, every field),
	// requested by By.
	ChangeID uuid.UUID
	By       Actor

	Server Server // result
}

// Tenant implements Command.
func (c *ConfigureCmd) Tenant() uuid.UUID { return c.TenantID }

// Queue implements Command: whether the tenant is at its server limit, then the server and its audit
// event in one statement, its configuration in a third and the record of the creation in a fourth (which
// find the server through the second, so a retry or a name taken by another server writes nothing).
func (c *ConfigureCmd) Queue(b *pgx.Batch) {
	k := c.Config
	b.Queue(`SELECT NOT EXISTS (SELECT 1 FROM mcp_servers WHERE tenant_id = $1 AND module_name = $2) AND NOT `+
		fmt.Sprintf(underServerLimit, "$1"), c.TenantID, c.ModuleName)
	b.Queue(`WITH ins AS (
			INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols,
				capability_advertisement, status, last_heartbeat_at, registered_at, trace_id)
			SELECT $1, $2, $3, $4, '{}'::text[], NULL, 'healthy', $5, $5, nullif($6, '')
			WHERE `+fmt.Sprintf(underServerLimit, "$2")+`
			ON CONFLICT (tenant_id, module_name) DO NOTHING
			RETURNING `+serverColumns+`
		), audit AS (
			INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, trace_id, occurred_at)
			SELECT $7, tenant_id, 'mcp.server.registered', server_id, module_name, version, 'healthy', nullif($6, ''), $5 FROM ins
			ON CONFLICT (event_id) DO NOTHING
		)
		SELECT * FROM ins
		UNION ALL
		SELECT `+serverColumns+` FROM mcp_servers
		WHERE server_id = $1 AND tenant_id = $2 AND module_name = $3 AND NOT EXISTS (SELECT 1 FROM ins)`,
		c.ServerID, c.TenantID, c.ModuleName, c.Version, c.At, c.TraceID, c.EventID)
	b.Queue(`INSERT INTO server_config (server_id, tenant_id, endpoint, auth_mode, auth_header_name, credential,
			data_class, requires_approval, enabled, liveness, created_at, updated_at, origin)
		SELECT server_id, tenant_id, nullif($3, ''), $4, $5, $6, nullif($7, ''), $8, $9, $10, $11, $11, 'admin'
		FROM mcp_servers WHERE server_id = $1 AND tenant_id = $2
		ON CONFLICT (server_id) DO NOTHING`,
		c.ServerID, c.TenantID, k.Endpoint, k.AuthMode, k.AuthHeaderName, k.Credential, k.DataClass,
		k.RequiresApproval, k.Enabled, k.Liveness, c.At)
	queueCreationChange(b, c.ChangeID, c.ServerID, k, c.By, c.TraceID, c.At)
}

// Read implements Command.
func (c *ConfigureCmd) Read(br pgx.BatchResults) error {
	var overLimit bool
	if err := br.QueryRow().Scan(&overLimit); err != nil {
		return fmt.Errorf("configure: %w", translate(err))
	}
	srv, err := scanServer(br.QueryRow())
	// Refused, nothing was written: the configuration statement finds no server of this id.
	if errors.Is(err, pgx.ErrNoRows) && overLimit {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("configure: %w", translate(err))
			}
		}
		return refuse(fmt.Errorf("configure: module %q: %w", c.ModuleName, ErrServerLimit))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("configure: module %q: %w", c.ModuleName, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("configure: %w", translate(err))
	}
	c.Server = srv
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("configure: %w", translate(err))
		}
	}
	return nil
}

// RecordContact stamps the last successful contact with the server and the latency of the round trip
// that completed it — those two columns and no others (ADR-154 §3). A contact older than the one stored
// changes nothing; so does a server without a configuration row.
func (s *Store) RecordContact(ctx context.Context, tenantID, serverID uuid.UUID, at time.Time, latency time.Duration) error {
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE server_config SET last_contact = $2, last_latency_ms = $3
			WHERE server_id = $1 AND (last_contact IS NULL OR last_contact <= $2)`,
			serverID, at, latency.Milliseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("record contact: %w", err)
	}
	return nil
}

// RecordImportFailure records a failed import: import_status failed, its reason and when; its import
// event (the stream's mcp.server.imported) carries traceID, the import's trace. The catalogue, tool_count
// and freshness are left as the last successful import wrote them.
func (s *Store) RecordImportFailure(ctx context.Context, tenantID, serverID uuid.UUID, reason string, at time.Time, traceID string) error {
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `WITH named AS (SELECT set_config('mcpfleet.trace_id', $4, true))
			UPDATE server_config SET import_status = 'failed', import_error = $2, last_imported = $3
			WHERE server_id = $1 AND (SELECT count(*) FROM named) = 1`, serverID, reason, at, traceID)
		if err == nil && tag.RowsAffected() != 1 {
			err = ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record import failure: %w", err)
	}
	return nil
}

// SkillChanges counts what an import did to a server's skills: tools that were not in its current
// catalogue (Added; a previously orphaned tool that reappears counts here and keeps its enabled flag),
// tools that stay (Kept, with their enabled flag) and tools that vanished (Orphaned). Changed counts the
// tools whose definition changed, Disabled those of them that were enabled and are now disabled.
type SkillChanges struct {
	Added, Kept, Orphaned int
	Changed, Disabled     int
}

// ApplyImport writes an imported catalogue in one transaction: the tools through the same upsert as a
// registration's advertised tools (new ones disabled, kept ones keep their enabled flag unless their
// definition changed, vanished ones orphaned; available only while the server is healthy or degraded;
// a change is recorded with by, the key importing, and traceID), and the import outcome (its import
// event, the stream's mcp.server.imported, carries traceID too) —
// succeeded, no error, last_imported = at, tool_count, and the cache hint (ttl 0: none) with the
// freshness it gives. The server's row is share-locked so a concurrent status transition commits either
// before (and the tools get its availability) or after (and its cascade covers them). A self-registered
// server's catalogue is its advertisement: ErrCatalogueSource, nothing written.
func (s *Store) ApplyImport(ctx context.Context, tenantID, serverID uuid.UUID, tools []Tool, ttl time.Duration, at time.Time, by uuid.UUID, traceID string) (SkillChanges, error) {
	var ch SkillChanges
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var module, status, origin string
		if err := tx.QueryRow(ctx, `SELECT m.module_name, m.status, coalesce(c.origin, 'module')
			FROM mcp_servers m LEFT JOIN server_config c ON c.server_id = m.server_id
			WHERE m.server_id = $1 FOR SHARE OF m`, serverID).Scan(&module, &status, &origin); err != nil {
			return translate(err)
		}
		if Origin(origin) != OriginAdmin {
			return ErrCatalogueSource
		}
		rows, err := tx.Query(ctx, `SELECT name FROM skill_registry WHERE server_id = $1 AND orphaned_at IS NULL FOR UPDATE`, serverID)
		if err != nil {
			return err
		}
		current, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		have := make(map[string]bool, len(current))
		for _, n := range current {
			have[n] = true
		}
		for _, t := range tools {
			if have[t.Name] {
				ch.Kept++
			} else {
				ch.Added++
			}
		}
		b := &pgx.Batch{}
		queueSkillUpsert(b, catalogueWrite{TenantID: tenantID, ModuleName: module, Origin: OriginAdmin, Tools: tools,
			Available: health.Status(status).Available(), By: by, TraceID: traceID, At: at})
		var ttlMS, fresh any
		if ttl > 0 {
			ttlMS, fresh = ttl.Milliseconds(), at.Add(ttl)
		}
		// The import_events trigger (migration 0007) reads the transaction's trace from mcpfleet.trace_id,
		// set in the same statement as the update it fires on.
		b.Queue(`WITH named AS (SELECT set_config('mcpfleet.trace_id', $6, true))
			UPDATE server_config SET import_status = 'succeeded', import_error = NULL, last_imported = $2,
				tool_count = $3, catalogue_ttl_ms = $4, catalogue_fresh_until = $5
			WHERE server_id = $1 AND (SELECT count(*) FROM named) = 1`, serverID, at, len(tools), ttlMS, fresh, traceID)
		br := tx.SendBatch(ctx, b)
		res, err := readSkillUpsert(br)
		if err != nil {
			br.Close()
			return err
		}
		ch.Orphaned, ch.Changed, ch.Disabled = int(res.Orphaned), int(res.Changed), int(res.Disabled)
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return err
		}
		if tag.RowsAffected() != 1 {
			br.Close()
			return ErrNotFound
		}
		return br.Close()
	})
	if err != nil {
		return SkillChanges{}, fmt.Errorf("apply import: %w", err)
	}
	return ch, nil
}

// SetSkillEnabled switches one skill of tenantID on or off and returns it with its server's enabled
// flag (true for a server without configuration). Enabling a changed tool is the operator's approval of
// its new definition: it clears changed_at and previous_definition (the change stays in tool_changes).
// It returns ErrNotFound for an unknown skill or another tenant's.
func (s *Store) SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool, at time.Time) (Skill, bool, error) {
	var k Skill
	var serverEnabled bool
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		k, err = scanSkill(tx.QueryRow(ctx, `UPDATE skill_registry SET enabled = $2,
				updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE $3 END,
				changed_at = CASE WHEN $2 THEN NULL ELSE changed_at END,
				previous_definition = CASE WHEN $2 THEN NULL ELSE previous_definition END
			WHERE skill_id = $1 RETURNING `+skillColumns, skillID, enabled, at))
		if err != nil {
			return translate(err)
		}
		return tx.QueryRow(ctx, `SELECT coalesce((SELECT enabled FROM server_config WHERE server_id = $1), true)`, k.ServerID).Scan(&serverEnabled)
	})
	if err != nil {
		return Skill{}, false, fmt.Errorf("set skill enabled: %w", err)
	}
	return k, serverEnabled, nil
}

// ProbeTarget is a server the service probes: configured with probe liveness and an endpoint, and not
// deregistered.
type ProbeTarget struct {
	Config     ServerConfig
	ModuleName string
	Status     health.Status
}

// ProbeTargets lists every tenant's probe targets.
func (s *Store) ProbeTargets(ctx context.Context) ([]ProbeTarget, error) {
	tenants, err := s.TenantIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("probe targets: %w", err)
	}
	var out []ProbeTarget
	for _, t := range tenants {
		err := s.InTenant(ctx, t, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT `+configColumns+`, m.module_name, m.status FROM server_config c
				JOIN mcp_servers m ON m.server_id = c.server_id
				WHERE c.liveness = 'probe' AND c.endpoint IS NOT NULL AND m.status <> 'deregistered'
				ORDER BY c.server_id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var module, status string
				c, err := scanConfig(rows, &module, &status)
				if err != nil {
					return err
				}
				out = append(out, ProbeTarget{Config: c, ModuleName: module, Status: health.Status(status)})
			}
			return rows.Err()
		})
		if err != nil {
			return nil, fmt.Errorf("probe targets: %w", err)
		}
	}
	return out, nil
}
