package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
)

// ServerSort is an order of ListServers. Each is served by an index, so a page costs the same on the
// first page as on the thousandth.
type ServerSort string

// The orders. There is no order by last heartbeat on purpose: an index on last_heartbeat_at would make
// every heartbeat stamp a non-HOT update.
const (
	SortServerID ServerSort = ""       // server_id (the primary key; the seed's order)
	SortModule   ServerSort = "module" // module name, bytewise, then server_id (mcp_servers_tenant_module_c)
	SortNewest   ServerSort = "newest" // registration time, newest first, then server_id (mcp_servers_tenant_registered)
)

// ParseServerSort returns the sort named s ("" or "server_id" for SortServerID).
func ParseServerSort(s string) (ServerSort, error) {
	switch s {
	case "", "server_id":
		return SortServerID, nil
	case string(SortModule), string(SortNewest):
		return ServerSort(s), nil
	}
	return "", fmt.Errorf("unknown sort %q: want server_id, module or newest", s)
}

// ErrBadPrefix is a module name prefix that no module name could start with.
var ErrBadPrefix = errors.New("a module name prefix may contain only letters, digits, '.', '_' and '-'")

func validPrefix(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// prefixEnd returns the smallest string greater than every string starting with p (p is ASCII and
// not empty, so its last byte can be incremented).
func prefixEnd(p string) string {
	b := []byte(p)
	b[len(b)-1]++
	return string(b)
}

// serverColumnsWithoutAdvertisement are serverColumns with NULL for the capability advertisement.
var serverColumnsWithoutAdvertisement = strings.Replace(serverColumns, "capability_advertisement", "NULL::jsonb", 1)

// listServers runs the page query of f in tx. The SQL is built for the filter at hand, so each shape
// has a plan that uses its index (one generic statement with "status = $1 OR $1 is empty" would not).
func listServers(ctx context.Context, tx pgx.Tx, f ServerFilter) ([]Server, error) {
	if f.ModulePrefix != "" && !validPrefix(f.ModulePrefix) {
		return nil, ErrBadPrefix
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(string(f.Status)))
	}
	if f.ModulePrefix != "" {
		where = append(where, `module_name COLLATE "C" >= `+arg(f.ModulePrefix)+` AND module_name COLLATE "C" < `+arg(prefixEnd(f.ModulePrefix)))
	}
	var order string
	switch f.Sort {
	case SortModule:
		if f.After != uuid.Nil {
			where = append(where, `(module_name COLLATE "C", server_id) > (`+arg(f.AfterModule)+`, `+arg(f.After)+`)`)
		}
		order = `module_name COLLATE "C", server_id`
	case SortNewest:
		if f.After != uuid.Nil {
			where = append(where, `(registered_at, server_id) < (`+arg(f.AfterRegistered)+`, `+arg(f.After)+`)`)
		}
		order = `registered_at DESC, server_id DESC`
	case SortServerID:
		if f.After != uuid.Nil {
			where = append(where, "server_id > "+arg(f.After))
		}
		order = "server_id"
	default:
		return nil, fmt.Errorf("unknown sort %q", f.Sort)
	}
	cols := serverColumns
	if f.WithoutAdvertisement {
		cols = serverColumnsWithoutAdvertisement
	}
	q := `SELECT ` + cols + ` FROM mcp_servers`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY ` + order + ` LIMIT ` + arg(f.Limit)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Server, error) { return scanServer(r) })
}

// EventCursor is a position in a tenant's fleet event stream: the last audit event, the last import
// event, the last tool change and the last configuration change event seen, by the tenant's own
// sequence numbers (tenant_seq; for configuration changes the one numbering of their requests and
// decisions). The zero cursor is the start.
type EventCursor struct {
	Audit  int64
	Import int64
	Tool   int64
	Config int64
}

// String is the cursor as GET /v1/mcp/events writes it in id: "t<audit seq>-<import seq>-<tool change
// seq>", followed by "-<configuration change seq>" once there is one (an id without it is the same
// position with none). The "t" tells it from an id of the numbering shared by every tenant that came
// before (ErrOldEventCursor).
func (c EventCursor) String() string {
	s := "t" + strconv.FormatInt(c.Audit, 10) + "-" + strconv.FormatInt(c.Import, 10) + "-" + strconv.FormatInt(c.Tool, 10)
	if c.Config > 0 {
		s += "-" + strconv.FormatInt(c.Config, 10)
	}
	return s
}

// ErrOldEventCursor is an event id written before migration 0012, in the numbering shared by every
// tenant: it names no position in the tenant's own sequences.
var ErrOldEventCursor = errors.New("the event id is from the numbering before tenant sequences")

// ParseEventCursor parses what String wrote. An id of the old form "<seq>-<seq>" is ErrOldEventCursor.
// An id without the tool change part, "t<audit seq>-<import seq>" (written before tool changes were
// streamed), resumes the tool changes from the first: none of them was sent on such a stream; likewise
// an id without the configuration change part.
func ParseEventCursor(s string) (EventCursor, error) {
	body, current := strings.CutPrefix(s, "t")
	c, parts, ok := parseSeqs(body)
	switch {
	case !ok || len(s) > 83:
		return EventCursor{}, fmt.Errorf("event id %q: want t<audit seq>-<import seq>-<tool change seq>", s)
	case !current && parts == 2:
		return EventCursor{}, ErrOldEventCursor
	case !current:
		return EventCursor{}, fmt.Errorf("event id %q: want t<audit seq>-<import seq>-<tool change seq>", s)
	}
	return c, nil
}

// parseSeqs parses two to four non-negative numbers joined by "-".
func parseSeqs(s string) (EventCursor, int, bool) {
	parts := strings.Split(s, "-")
	if len(parts) < 2 || len(parts) > 4 {
		return EventCursor{}, 0, false
	}
	var n [4]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 {
			return EventCursor{}, 0, false
		}
		n[i] = v
	}
	return EventCursor{Audit: n[0], Import: n[1], Tool: n[2], Config: n[3]}, len(parts), true
}

// latestCursorSQL reads the tenant's newest event numbers, in EventCursor's order.
const latestCursorSQL = `SELECT (SELECT coalesce(max(tenant_seq), 0) FROM audit_events),
	(SELECT coalesce(max(tenant_seq), 0) FROM import_events), (SELECT coalesce(max(tenant_seq), 0) FROM tool_changes),
	greatest((SELECT coalesce(max(tenant_seq), 0) FROM server_config_changes),
		(SELECT coalesce(max(decided_seq), 0) FROM server_config_changes))`

// FleetSnapshot is one consistent read of a tenant's fleet for the overview: the counts by status, a
// page of servers and the event cursor they reflect. Events after Cursor are exactly the changes not
// yet in Counts (a transition commits its status and its audit event together).
type FleetSnapshot struct {
	Counts  map[health.Status]int
	Servers []Server
	Cursor  EventCursor
}

// FleetSnapshot reads counts, the cursor and a page of servers of tenantID in one read-only repeatable-read
// transaction (one snapshot). It returns ErrBadPrefix for a prefix no module name can have.
func (s *Store) FleetSnapshot(ctx context.Context, tenantID uuid.UUID, f ServerFilter) (FleetSnapshot, error) {
	out := FleetSnapshot{Counts: map[health.Status]int{}}
	err := s.inTenantSnapshot(ctx, tenantID, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, latestCursorSQL).Scan(&out.Cursor.Audit, &out.Cursor.Import, &out.Cursor.Tool, &out.Cursor.Config); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT status, count(*) FROM mcp_servers GROUP BY status`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				rows.Close()
				return err
			}
			out.Counts[health.Status(st)] = n
		}
		if err := rows.Err(); err != nil {
			return err
		}
		out.Servers, err = listServers(ctx, tx, f)
		return err
	})
	if errors.Is(err, ErrBadPrefix) {
		return FleetSnapshot{}, ErrBadPrefix
	}
	if err != nil {
		return FleetSnapshot{}, fmt.Errorf("fleet snapshot: %w", err)
	}
	return out, nil
}

// inTenantSnapshot is InTenant in a read-only repeatable-read transaction: every statement of fn sees
// the same snapshot.
func (s *Store) inTenantSnapshot(ctx context.Context, tenantID uuid.UUID, fn func(pgx.Tx) error) error {
	return inTenantTx(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, tenantID, fn)
}

// Fleet event kinds beyond the audit kinds: a catalogue import (succeeded or failed), and a tool change
// (a tool's definition changed, or its server's endpoint moved: the tool is disabled until an operator
// enables it again).
const (
	KindImported    = "mcp.server.imported"
	KindToolChanged = "mcp.tool.changed"
)

// FleetEvent is one event of GET /v1/mcp/events: an audit event (registration, transition,
// deregistration), an import or a tool change. For an import, From and Status are import statuses
// (never_imported, succeeded, failed); for a tool change they are "enabled" or "disabled" (the tool's
// state before, and after: always disabled); otherwise they are health statuses (From empty for a first
// registration).
type FleetEvent struct {
	Kind       string
	ServerID   uuid.UUID
	ModuleName string
	From       string
	Status     string
	At         time.Time
	TraceID    string
	// Seq is the event's position in its tenant's own sequence: audit_events.tenant_seq,
	// import_events.tenant_seq when Import is true, tool_changes.tenant_seq when ToolChange is.
	Seq        int64
	Import     bool
	ToolChange bool
	// A tool change's skill, tool name and cause ("definition" or "endpoint").
	SkillID uuid.UUID
	Tool    string
	Cause   string
	// Config says the event is a configuration change's (KindConfigured; Seq is then its request's
	// tenant_seq or its decision's decided_seq): its id, fields and who — the requester for a request
	// (From empty, Status applied or pending), the decider for a decision (From pending, Status confirmed or
	// cancelled).
	Config   bool
	ChangeID uuid.UUID
	Changes  []ConfigChange
	By       Actor
}

// FleetEvents returns up to limit events of each of tenantID's logs after c: audit events after c.Audit,
// import events after c.Import, tool changes after c.Tool and configuration change events after c.Config,
// each in the order of the tenant's own sequence (audit events first, then imports, tool changes,
// configuration changes). Each sequence is gapless and numbered
// in commit order (migrations 0012 and 0015), so what FleetEvents returns is everything that follows c:
// an event not returned now will be numbered after the last one returned.
func (s *Store) FleetEvents(ctx context.Context, tenantID uuid.UUID, c EventCursor, limit int) ([]FleetEvent, error) {
	var out []FleetEvent
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT tenant_seq, kind, server_id, module_name, coalesce(from_status, ''), status,
				occurred_at, coalesce(trace_id, '')
			FROM audit_events WHERE tenant_seq > $1 ORDER BY tenant_seq LIMIT $2`, c.Audit, limit)
		if err != nil {
			return err
		}
		audit, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetEvent, error) {
			var e FleetEvent
			err := r.Scan(&e.Seq, &e.Kind, &e.ServerID, &e.ModuleName, &e.From, &e.Status, &e.At, &e.TraceID)
			return e, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT tenant_seq, server_id, module_name, from_status, import_status, occurred_at,
				coalesce(trace_id, '')
			FROM import_events WHERE tenant_seq > $1 ORDER BY tenant_seq LIMIT $2`, c.Import, limit)
		if err != nil {
			return err
		}
		imports, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetEvent, error) {
			e := FleetEvent{Kind: KindImported, Import: true}
			err := r.Scan(&e.Seq, &e.ServerID, &e.ModuleName, &e.From, &e.Status, &e.At, &e.TraceID)
			return e, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT t.tenant_seq, t.server_id, m.module_name,
				CASE WHEN t.was_enabled THEN 'enabled' ELSE 'disabled' END, t.changed_at, coalesce(t.trace_id, ''),
				t.skill_id, t.name, t.cause
			FROM tool_changes t JOIN mcp_servers m ON m.server_id = t.server_id
			WHERE t.tenant_seq > $1 ORDER BY t.tenant_seq LIMIT $2`, c.Tool, limit)
		if err != nil {
			return err
		}
		changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetEvent, error) {
			e := FleetEvent{Kind: KindToolChanged, ToolChange: true, Status: "disabled"}
			err := r.Scan(&e.Seq, &e.ServerID, &e.ModuleName, &e.From, &e.At, &e.TraceID, &e.SkillID, &e.Tool, &e.Cause)
			return e, err
		})
		if err != nil {
			return err
		}
		configs, err := configEvents(ctx, tx, c.Config, limit)
		out = append(append(append(audit, imports...), changes...), configs...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleet events: %w", err)
	}
	return out, nil
}

// configEvents returns up to limit configuration change events after seq, in order: each change's request
// (at its tenant_seq) and each decided change's decision (at its decided_seq).
func configEvents(ctx context.Context, tx pgx.Tx, after int64, limit int) ([]FleetEvent, error) {
	rows, err := tx.Query(ctx, `SELECT e.seq, e.decision, x.change_id, x.server_id, m.module_name, x.state, x.changes,
			x.requested_by, x.requested_via, x.requested_at, x.decided_by, coalesce(x.decided_via, ''), x.decided_at,
			coalesce(x.trace_id, '')
		FROM (SELECT change_id, tenant_seq AS seq, false AS decision FROM server_config_changes WHERE tenant_seq > $1
			UNION ALL
			SELECT change_id, decided_seq, true FROM server_config_changes WHERE decided_seq > $1
			ORDER BY 2 LIMIT $2) e
		JOIN server_config_changes x ON x.change_id = e.change_id
		JOIN mcp_servers m ON m.server_id = x.server_id
		ORDER BY e.seq`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetEvent, error) {
		e := FleetEvent{Kind: KindConfigured, Config: true}
		var decision bool
		var state, reqVia, decVia string
		var reqBy, decBy *uuid.UUID
		var reqAt time.Time
		var decAt *time.Time
		var raw []byte
		if err := r.Scan(&e.Seq, &decision, &e.ChangeID, &e.ServerID, &e.ModuleName, &state, &raw, &reqBy, &reqVia, &reqAt,
			&decBy, &decVia, &decAt, &e.TraceID); err != nil {
			return e, err
		}
		if err := json.Unmarshal(raw, &e.Changes); err != nil {
			return e, err
		}
		switch {
		case decision && decAt != nil:
			// Only the request's trace id is recorded: a decision's event carries none.
			e.From, e.Status, e.At, e.By, e.TraceID = string(ChangePending), state, *decAt, Actor{Via: decVia}, ""
			if decBy != nil {
				e.By.Key = *decBy
			}
		default:
			e.Status, e.At, e.By = state, reqAt, Actor{Via: reqVia}
			if state != string(ChangeApplied) {
				e.Status = string(ChangePending) // its request: what it was when made
			}
			if reqBy != nil {
				e.By.Key = *reqBy
			}
		}
		return e, nil
	})
}

// LatestEventCursor returns the cursor after the newest event of tenantID.
func (s *Store) LatestEventCursor(ctx context.Context, tenantID uuid.UUID) (EventCursor, error) {
	var c EventCursor
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, latestCursorSQL).Scan(&c.Audit, &c.Import, &c.Tool, &c.Config)
	})
	if err != nil {
		return EventCursor{}, fmt.Errorf("latest event: %w", err)
	}
	return c, nil
}

// ServerHistory is a server's recent lifecycle from the audit log.
type ServerHistory struct {
	// Events are the newest audit events of the server, newest first.
	Events []AuditEvent
	// Transitions is how many status transitions (degraded, unhealthy, recovered) occurred at or after
	// the since time given.
	Transitions int
}

// ServerHistory returns the newest limit audit events of one server of tenantID and how many transitions
// it made since since.
func (s *Store) ServerHistory(ctx context.Context, tenantID, serverID uuid.UUID, limit int, since time.Time) (ServerHistory, error) {
	var out ServerHistory
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id, seq, tenant_id, kind, server_id, module_name, version, status,
				coalesce(from_status, ''), coalesce(trace_id, ''), occurred_at
			FROM audit_events WHERE server_id = $1 ORDER BY seq DESC LIMIT $2`, serverID, limit)
		if err != nil {
			return err
		}
		out.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEvent, error) {
			var e AuditEvent
			var kind, status, from string
			err := r.Scan(&e.EventID, &e.Seq, &e.TenantID, &kind, &e.ServerID, &e.ModuleName, &e.Version, &status, &from, &e.TraceID, &e.OccurredAt)
			e.Kind, e.Status, e.From = AuditKind(kind), health.Status(status), health.Status(from)
			return e, err
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE server_id = $1 AND occurred_at >= $2
			AND kind IN ('mcp.server.degraded', 'mcp.server.unhealthy', 'mcp.server.recovered')`, serverID, since).Scan(&out.Transitions)
	})
	if err != nil {
		return ServerHistory{}, fmt.Errorf("server history: %w", err)
	}
	return out, nil
}

// RecentCallEvent is a run event with the keys of its call: who requested it and who decided it (nil
// for a refusal, which made no call, and DecidedBy nil for a call nobody decided), and the trace of the
// request that made the call ("" for none).
type RecentCallEvent struct {
	RunEvent
	RequestedBy, DecidedBy *uuid.UUID
	TraceID                string
}

// RecentRunEvents returns the newest limit run events of tenantID, newest first, with the keys of their
// calls: of one server, or of every server when serverID is uuid.Nil (the dashboard's list of recent
// calls).
func (s *Store) RecentRunEvents(ctx context.Context, tenantID, serverID uuid.UUID, limit int) ([]RecentCallEvent, error) {
	var out []RecentCallEvent
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT e.event_id, e.tenant_id, e.run_id, e.kind, e.call_id, e.server_id, coalesce(e.tool, ''),
				coalesce(e.state, ''), coalesce(e.outcome_class, ''), e.latency_ms, coalesce(e.detail, ''), e.occurred_at,
				c.requested_by, c.decided_by, coalesce(c.trace_id, '')
			FROM mcp_run_events e LEFT JOIN mcp_calls c ON c.call_id = e.call_id
			WHERE $1 = '00000000-0000-0000-0000-000000000000'::uuid OR e.server_id = $1
			ORDER BY e.event_id DESC LIMIT $2`, serverID, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RecentCallEvent, error) {
			var e RecentCallEvent
			err := r.Scan(&e.EventID, &e.TenantID, &e.RunID, &e.Kind, &e.CallID, &e.ServerID, &e.Tool, &e.State,
				&e.OutcomeClass, &e.LatencyMS, &e.Detail, &e.At, &e.RequestedBy, &e.DecidedBy, &e.TraceID)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recent run events: %w", err)
	}
	return out, nil
}
