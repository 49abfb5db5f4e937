package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// A Command is one durable unit of work. The writer group-commits many commands in one transaction;
// Apply runs inside that transaction, scopes it to the command's tenant itself (SetTenant), and stores
// any result in the command. Apply must be idempotent for a command applied twice (after a retry whose
// first COMMIT outcome was unknown).
type Command interface {
	Apply(ctx context.Context, tx pgx.Tx) error
	// Tenant is the tenant the command writes for.
	Tenant() uuid.UUID
}

// Commit applies cmds in one transaction and commits. If the group fails, each command is retried in a
// transaction of its own, so one bad command cannot fail the others. errs[i] is the outcome of cmds[i]:
// nil only after its COMMIT succeeded.
func (s *Store) Commit(ctx context.Context, cmds []Command) (errs []error) {
	errs = make([]error, len(cmds))
	if len(cmds) == 0 {
		return errs
	}
	groupErr := s.commitGroup(ctx, cmds)
	if groupErr == nil {
		return errs
	}
	if len(cmds) == 1 || IsTransient(groupErr) && ctx.Err() != nil {
		for i := range errs {
			errs[i] = groupErr
		}
		return errs
	}
	for i, c := range cmds {
		errs[i] = s.commitGroup(ctx, []Command{c})
	}
	return errs
}

func (s *Store) commitGroup(ctx context.Context, cmds []Command) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	for _, c := range cmds {
		if err := SetTenant(ctx, tx, c.Tenant()); err != nil {
			return err
		}
		if err := c.Apply(ctx, tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// AuditKind names one of the five audit kinds of DEC-2354.
type AuditKind string

// The five audit kinds.
const (
	KindRegistered   AuditKind = "mcp.server.registered"
	KindDegraded     AuditKind = "mcp.server.degraded"
	KindUnhealthy    AuditKind = "mcp.server.unhealthy"
	KindRecovered    AuditKind = "mcp.server.recovered"
	KindDeregistered AuditKind = "mcp.server.deregistered"
)

// AuditKinds lists the five kinds.
var AuditKinds = []AuditKind{KindRegistered, KindDegraded, KindUnhealthy, KindRecovered, KindDeregistered}

// KindForTransition names the audit kind of a transition to status to.
func KindForTransition(to health.Status) AuditKind {
	switch to {
	case health.Degraded:
		return KindDegraded
	case health.Unhealthy:
		return KindUnhealthy
	case health.Deregistered:
		return KindDeregistered
	}
	return KindRecovered
}

// RegisterCmd registers a server, or re-registers the server already registered under
// (TenantID, ModuleName), which keeps its server_id and revives it if it was deregistered. The
// advertised tools are upserted (new ones disabled, kept ones keep their enabled flag, vanished ones
// orphaned) and an mcp.server.registered audit event is written, all in one transaction.
type RegisterCmd struct {
	EventID      uuid.UUID // audit event id; also makes the command idempotent
	ServerID     uuid.UUID // the id to use if the server is new
	TenantID     uuid.UUID
	ModuleName   string
	Version      string
	Protocols    []string
	Capabilities json.RawMessage // may be nil
	Tools        []Tool
	TraceID      string
	At           time.Time

	// Results, set by Apply.
	Server  Server
	Created bool
	From    health.Status // the status before, if not Created
}

// Tenant implements Command.
func (c *RegisterCmd) Tenant() uuid.UUID { return c.TenantID }

// Apply implements Command.
func (c *RegisterCmd) Apply(ctx context.Context, tx pgx.Tx) error {
	var prev string
	err := tx.QueryRow(ctx, `SELECT status FROM mcp_servers WHERE tenant_id = $1 AND module_name = $2`,
		c.TenantID, c.ModuleName).Scan(&prev)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("register: %w", err)
	}
	var caps any
	if len(c.Capabilities) > 0 {
		caps = string(c.Capabilities)
	}
	var inserted bool
	row := tx.QueryRow(ctx, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols,
			capability_advertisement, status, last_heartbeat_at, registered_at, trace_id)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, 'healthy', $7, $7, nullif($8, ''))
		ON CONFLICT (tenant_id, module_name) DO UPDATE SET version = EXCLUDED.version,
			supported_protocols = EXCLUDED.supported_protocols, capability_advertisement = EXCLUDED.capability_advertisement,
			status = 'healthy', last_heartbeat_at = greatest(mcp_servers.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
			deregistered_at = NULL
		RETURNING `+serverColumns+`, (xmax = 0)`,
		c.ServerID, c.TenantID, c.ModuleName, c.Version, c.Protocols, caps, c.At, c.TraceID)
	var s Server
	var status string
	if err := row.Scan(&s.ServerID, &s.TenantID, &s.ModuleName, &s.Version, &s.SupportedProtocols,
		&s.CapabilityAdvertisement, &status, &s.LastHeartbeatAt, &s.RegisteredAt, &s.DeregisteredAt, &s.TraceID, &inserted); err != nil {
		return fmt.Errorf("register: %w", translate(err))
	}
	s.Status = health.Status(status)
	c.Server, c.Created, c.From = s, inserted, health.Status(prev)
	if err := upsertAdvertisedSkills(ctx, tx, c.TenantID, s.ServerID, c.Tools, true, c.At); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if _, err := insertAudit(ctx, tx, auditRow{
		EventID: c.EventID, TenantID: c.TenantID, Kind: KindRegistered, ServerID: s.ServerID,
		ModuleName: s.ModuleName, Version: s.Version, Status: health.Healthy, From: c.From,
		TraceID: c.TraceID, At: c.At,
	}); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	return nil
}

// TransitionCmd persists one status transition of a server with its audit event and, for a transition
// to unhealthy, its alert outbox row — in one transaction. It is idempotent by EventID: applied twice,
// the second application changes nothing.
type TransitionCmd struct {
	EventID    uuid.UUID
	TenantID   uuid.UUID
	ServerID   uuid.UUID
	ModuleName string
	Version    string
	From, To   health.Status
	TraceID    string
	At         time.Time  // when the transition was decided
	Evidence   *time.Time // for a recovery: the heartbeat that caused it, written to last_heartbeat_at
	// LastEvidence is the last liveness evidence before the transition, carried in the alert.
	LastEvidence time.Time

	Applied bool // result: false if the event had already been applied
}

// Tenant implements Command.
func (c *TransitionCmd) Tenant() uuid.UUID { return c.TenantID }

// Apply implements Command.
func (c *TransitionCmd) Apply(ctx context.Context, tx pgx.Tx) error {
	kind := KindForTransition(c.To)
	inserted, err := insertAudit(ctx, tx, auditRow{
		EventID: c.EventID, TenantID: c.TenantID, Kind: kind, ServerID: c.ServerID, ModuleName: c.ModuleName,
		Version: c.Version, Status: c.To, From: c.From, TraceID: c.TraceID, At: c.At,
	})
	if err != nil {
		return fmt.Errorf("transition: %w", err)
	}
	c.Applied = inserted
	if !inserted {
		return nil
	}
	tag, err := tx.Exec(ctx, `UPDATE mcp_servers SET status = $2,
			deregistered_at = CASE WHEN $2 = 'deregistered' THEN $3::timestamptz ELSE deregistered_at END,
			last_heartbeat_at = greatest(last_heartbeat_at, coalesce($4::timestamptz, last_heartbeat_at))
		WHERE server_id = $1`, c.ServerID, string(c.To), c.At, c.Evidence)
	if err != nil {
		return fmt.Errorf("transition: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("transition: %w", ErrNotFound)
	}
	if c.To == health.Unhealthy {
		payload, _ := json.Marshal(AlertPayload{
			EventID: c.EventID, Kind: "mcp.server.unhealthy", TenantID: c.TenantID, ServerID: c.ServerID,
			ModuleName: c.ModuleName, Version: c.Version, From: c.From, Status: c.To,
			LastEvidenceAt: c.LastEvidence.UTC(), OccurredAt: c.At.UTC(), TraceID: c.TraceID,
		})
		if _, err := tx.Exec(ctx, `INSERT INTO alert_outbox (event_id, tenant_id, server_id, kind, payload, trace_id, created_at, next_attempt_at)
			VALUES ($1, $2, $3, 'mcp.server.unhealthy', $4, nullif($5, ''), $6, $6) ON CONFLICT (event_id) DO NOTHING`,
			c.EventID, c.TenantID, c.ServerID, payload, c.TraceID, c.At); err != nil {
			return fmt.Errorf("transition: outbox: %w", err)
		}
	}
	return nil
}

// SkillAvailabilityCmd sets available on every non-orphaned skill of the given servers of one tenant:
// the skill_unavailable cascade (seed §11.2) and its reverse on recovery. An orphaned skill is never made
// available.
type SkillAvailabilityCmd struct {
	TenantID  uuid.UUID
	ServerIDs []uuid.UUID
	Available bool

	Changed int64 // result
}

// Tenant implements Command.
func (c *SkillAvailabilityCmd) Tenant() uuid.UUID { return c.TenantID }

// Apply implements Command.
func (c *SkillAvailabilityCmd) Apply(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, `UPDATE skill_registry SET available = $2, updated_at = now()
		WHERE server_id = ANY($1::uuid[]) AND available <> $2 AND ($2 = false OR orphaned_at IS NULL)`,
		c.ServerIDs, c.Available)
	if err != nil {
		return fmt.Errorf("skill availability: %w", err)
	}
	c.Changed = tag.RowsAffected()
	return nil
}
