package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// KindConfigured is the fleet event of a recorded configuration change (server_config_changes, migration
// 0019): its request, and for a pending one its confirmation or cancellation.
const KindConfigured = "mcp.server.configured"

// ChangeState is the state of a recorded configuration change.
type ChangeState string

// The states: applied took effect when it was made; pending waits for another administrator (nothing of
// it applies until then); confirmed was applied by that administrator; cancelled never applied.
const (
	ChangeApplied   ChangeState = "applied"
	ChangePending   ChangeState = "pending"
	ChangeConfirmed ChangeState = "confirmed"
	ChangeCancelled ChangeState = "cancelled"
)

// Where a change comes from: an API key (of an administrator, or a dashboard session signed in with one), or
// the host command line (`mcpfleet server approval`), which runs with database access — a trust level above
// every API key.
const (
	ViaAPI = "api"
	ViaCLI = "cli"
)

// Actor is who makes or decides a change: an API key (Via ViaAPI), or the host CLI (Via ViaCLI, Key nil).
type Actor struct {
	Key uuid.UUID
	Via string
}

// ByKey is the actor of an API key.
func ByKey(key uuid.UUID) Actor { return Actor{Key: key, Via: ViaAPI} }

// ByCLI is the host command line.
var ByCLI = Actor{Via: ViaCLI}

func (a Actor) key() any {
	if a.Via == ViaCLI || a.Key == uuid.Nil {
		return nil
	}
	return a.Key
}

func (a Actor) via() string {
	if a.Via == ViaCLI {
		return ViaCLI
	}
	return ViaAPI
}

// ConfigChange is one changed field: its value before (nil: none, or the server was created) and after. A
// credential is never recorded: auth.credential has Old nil and New "set", "replaced" or "removed".
type ConfigChange struct {
	Field string `json:"field"`
	Old   any    `json:"old"`
	New   any    `json:"new"`
}

// DiffConfig lists the editable fields that differ between before and after, in a fixed order (endpoint,
// auth.mode, auth.header_name, auth.credential, data_class, requires_approval, enabled, liveness). before nil
// is a creation: every field is listed with Old nil. Empty strings are nil (none); an auth mode of none is
// nil too.
func DiffConfig(before *ServerConfig, after ServerConfig) []ConfigChange {
	var out []ConfigChange
	str := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	add := func(field string, old, new any, created bool) {
		if created {
			old = nil
		}
		if created || old != new {
			out = append(out, ConfigChange{Field: field, Old: old, New: new})
		}
	}
	created := before == nil
	b := ServerConfig{}
	if before != nil {
		b = *before
	}
	add("endpoint", str(b.Endpoint), str(after.Endpoint), created)
	add("auth.mode", str(b.AuthMode), str(after.AuthMode), created)
	add("auth.header_name", str(b.AuthHeaderName), str(after.AuthHeaderName), created)
	switch {
	case b.Credential == nil && after.Credential != nil:
		out = append(out, ConfigChange{Field: "auth.credential", New: "set"})
	case b.Credential != nil && after.Credential == nil:
		out = append(out, ConfigChange{Field: "auth.credential", New: "removed"})
	case !bytes.Equal(b.Credential, after.Credential):
		out = append(out, ConfigChange{Field: "auth.credential", New: "replaced"})
	}
	add("data_class", str(b.DataClass), str(after.DataClass), created)
	add("requires_approval", b.RequiresApproval, after.RequiresApproval, created)
	add("enabled", b.Enabled, after.Enabled, created)
	add("liveness", str(b.Liveness), str(after.Liveness), created)
	return out
}

// ConfigChangeRecord is a row of server_config_changes.
type ConfigChangeRecord struct {
	ChangeID    uuid.UUID
	TenantID    uuid.UUID
	ServerID    uuid.UUID
	Changes     []ConfigChange
	State       ChangeState
	RequestedBy Actor
	RequestedAt time.Time
	TraceID     string
	DecidedBy   *Actor // nil until confirmed or cancelled
	DecidedAt   *time.Time
	Seq         int64  // the request's number in the tenant's configuration changes
	DecidedSeq  *int64 // the decision's
	ModuleName  string // the server's
}

// Errors of deciding a pending change.
var (
	// ErrChangeNotPending: the change is applied, confirmed or cancelled already.
	ErrChangeNotPending = errors.New("the configuration change is not pending")
	// ErrSelfConfirmation: the key that requested a change cannot confirm it (four eyes).
	ErrSelfConfirmation = errors.New("a configuration change cannot be confirmed by the key that requested it")
)

const changeColumns = `x.change_id, x.tenant_id, x.server_id, x.changes, x.state, x.requested_by, x.requested_via,
	x.requested_at, coalesce(x.trace_id, ''), x.decided_by, x.decided_via, x.decided_at, x.tenant_seq, x.decided_seq,
	(SELECT m.module_name FROM mcp_servers m WHERE m.server_id = x.server_id)`

func scanChange(row pgx.Row) (ConfigChangeRecord, error) {
	var r ConfigChangeRecord
	var raw []byte
	var state, via string
	var reqBy, decBy *uuid.UUID
	var decVia *string
	err := row.Scan(&r.ChangeID, &r.TenantID, &r.ServerID, &raw, &state, &reqBy, &via, &r.RequestedAt, &r.TraceID,
		&decBy, &decVia, &r.DecidedAt, &r.Seq, &r.DecidedSeq, &r.ModuleName)
	if err != nil {
		return r, err
	}
	r.State = ChangeState(state)
	r.RequestedBy = Actor{Via: via}
	if reqBy != nil {
		r.RequestedBy.Key = *reqBy
	}
	if decVia != nil {
		a := Actor{Via: *decVia}
		if decBy != nil {
			a.Key = *decBy
		}
		r.DecidedBy = &a
	}
	if err := json.Unmarshal(raw, &r.Changes); err != nil {
		return r, fmt.Errorf("config change %s: %w", r.ChangeID, err)
	}
	return r, nil
}

// insertChange records a change of serverID (of the transaction's tenant) in tx and returns it as written.
func insertChange(ctx context.Context, tx pgx.Tx, serverID uuid.UUID, changes []ConfigChange, state ChangeState, by Actor, traceID string, at time.Time) (ConfigChangeRecord, error) {
	raw, err := json.Marshal(changes)
	if err != nil {
		return ConfigChangeRecord{}, err
	}
	return scanChange(tx.QueryRow(ctx, `WITH x AS (
			INSERT INTO server_config_changes (change_id, tenant_id, server_id, changes, state, requested_by, requested_via,
				requested_at, trace_id, tenant_seq)
			SELECT $1, tenant_id, server_id, $3, $4, $5, $6, $7, nullif($8, ''), 0 FROM mcp_servers WHERE server_id = $2
			RETURNING *
		) SELECT `+changeColumns+` FROM x`,
		uuid.New(), serverID, raw, string(state), by.key(), by.via(), at, traceID))
}

// queueCreationChange queues the record of a configured server's creation (ConfigureCmd): every field, Old
// nil, state applied, requested by by. It writes nothing when the server of serverID is not there (the
// module name was taken) or the change was recorded already (a retry: changeID is the command's).
func queueCreationChange(b *pgx.Batch, changeID, serverID uuid.UUID, cfg ServerConfig, by Actor, traceID string, at time.Time) {
	raw, _ := json.Marshal(DiffConfig(nil, cfg)) // strings and booleans: cannot fail
	b.Queue(`INSERT INTO server_config_changes (change_id, tenant_id, server_id, changes, state, requested_by, requested_via,
			requested_at, trace_id, tenant_seq)
		SELECT $1, tenant_id, server_id, $3, 'applied', $4, $5, $6, nullif($7, ''), 0 FROM mcp_servers WHERE server_id = $2
		ON CONFLICT (change_id) DO NOTHING`,
		changeID, serverID, raw, by.key(), by.via(), at, traceID)
}

// ConfigEdit is a change of one server's configuration (UpdateServerConfig).
type ConfigEdit struct {
	// Edit changes the editable fields — endpoint, auth, credential, data class, approval, enabled, liveness —
	// or returns an error, which is returned and writes nothing. It must not block.
	Edit func(*ServerConfig) error
	// Hold, if set, takes out of after (setting them back to before's values) the changes that must wait
	// for another administrator, and returns them: they are recorded as one pending change, and nothing of
	// them applies until it is confirmed (DecideConfigChange).
	Hold func(before ServerConfig, after *ServerConfig) []ConfigChange
	By   Actor
	// TraceID is the trace of the request, recorded with the change.
	TraceID string
}

// ConfigUpdate is what UpdateServerConfig committed: the server, its configuration, the change that applied
// (nil when nothing changed) and the pending change (nil when nothing was held).
type ConfigUpdate struct {
	Server  Server
	Config  ServerConfig
	Applied *ConfigChangeRecord
	Pending *ConfigChangeRecord
}

// UpdateServerConfig changes the configuration of one server of tenantID in one transaction: the row is
// created with the defaults if the server has none, locked, handed to e.Edit and written back with
// updated_at = at, and what changed is recorded in server_config_changes (state applied, by e.By) in the
// same transaction. What e.Hold takes out is recorded as a pending change instead — unless the server has a
// pending change of the same fields and values already, which is then returned (asking twice records one
// request). It returns ErrNotFound for a server that is not tenantID's.
func (s *Store) UpdateServerConfig(ctx context.Context, tenantID, serverID uuid.UUID, at time.Time, e ConfigEdit) (ConfigUpdate, error) {
	var out ConfigUpdate
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		out, err = updateServerConfig(ctx, tx, serverID, at, e)
		return err
	})
	if err != nil {
		return ConfigUpdate{}, fmt.Errorf("update server config: %w", err)
	}
	return out, nil
}

// updateServerConfig is UpdateServerConfig in tx, which is scoped to the server's tenant.
func updateServerConfig(ctx context.Context, tx pgx.Tx, serverID uuid.UUID, at time.Time, e ConfigEdit) (ConfigUpdate, error) {
	var out ConfigUpdate
	cfg, err := lockConfig(ctx, tx, serverID, at, &out.Server)
	if err != nil {
		return out, err
	}
	before := cfg
	before.Credential = bytes.Clone(cfg.Credential)
	if err := e.Edit(&cfg); err != nil {
		return out, err
	}
	var held []ConfigChange
	if e.Hold != nil {
		held = e.Hold(before, &cfg)
	}
	if out.Config, err = writeConfig(ctx, tx, cfg, at); err != nil {
		return out, err
	}
	if applied := DiffConfig(&before, out.Config); len(applied) > 0 {
		rec, err := insertChange(ctx, tx, serverID, applied, ChangeApplied, e.By, e.TraceID, at)
		if err != nil {
			return out, translate(err)
		}
		out.Applied = &rec
	}
	if len(held) == 0 {
		return out, nil
	}
	pending, err := pendingChanges(ctx, tx, serverID)
	if err != nil {
		return out, err
	}
	for i := range pending {
		if sameChanges(pending[i].Changes, held) {
			out.Pending = &pending[i]
			return out, nil
		}
	}
	rec, err := insertChange(ctx, tx, serverID, held, ChangePending, e.By, e.TraceID, at)
	if err != nil {
		return out, translate(err)
	}
	out.Pending = &rec
	return out, nil
}

// sameChanges compares changes as they are stored (JSON), so a change read back equals one just made.
func sameChanges(a, b []ConfigChange) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var va, vb any
	_ = json.Unmarshal(ja, &va)
	_ = json.Unmarshal(jb, &vb)
	return reflect.DeepEqual(va, vb)
}

// lockConfig reads the server of serverID into srv, creates its configuration row with the defaults if it
// has none, and returns the row locked FOR UPDATE.
func lockConfig(ctx context.Context, tx pgx.Tx, serverID uuid.UUID, at time.Time, srv *Server) (ServerConfig, error) {
	var err error
	*srv, err = scanServer(tx.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp_servers WHERE server_id = $1`, serverID))
	if err != nil {
		return ServerConfig{}, translate(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO server_config (server_id, tenant_id, created_at, updated_at)
		SELECT server_id, tenant_id, $2, $2 FROM mcp_servers WHERE server_id = $1
		ON CONFLICT (server_id) DO NOTHING`, serverID, at); err != nil {
		return ServerConfig{}, err
	}
	cfg, err := scanConfig(tx.QueryRow(ctx, `SELECT `+configColumns+` FROM server_config c WHERE c.server_id = $1 FOR UPDATE`, serverID))
	return cfg, translate(err)
}

// writeConfig writes the editable fields of cfg with updated_at = at and returns the row as written.
func writeConfig(ctx context.Context, tx pgx.Tx, cfg ServerConfig, at time.Time) (ServerConfig, error) {
	out, err := scanConfig(tx.QueryRow(ctx, `UPDATE server_config c SET endpoint = nullif($2, ''), auth_mode = $3,
			auth_header_name = $4, credential = $5, data_class = nullif($6, ''), requires_approval = $7,
			enabled = $8, liveness = $9, updated_at = $10
		WHERE c.server_id = $1 RETURNING `+configColumns,
		cfg.ServerID, cfg.Endpoint, cfg.AuthMode, cfg.AuthHeaderName, cfg.Credential, cfg.DataClass,
		cfg.RequiresApproval, cfg.Enabled, cfg.Liveness, at))
	return out, translate(err)
}

// pendingChanges returns the pending changes of serverID, oldest first.
func pendingChanges(ctx context.Context, tx pgx.Tx, serverID uuid.UUID) ([]ConfigChangeRecord, error) {
	rows, err := tx.Query(ctx, `SELECT `+changeColumns+` FROM server_config_changes x
		WHERE x.server_id = $1 AND x.state = 'pending' ORDER BY x.tenant_seq`, serverID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ConfigChangeRecord, error) { return scanChange(r) })
}

// ConfigDecision is what DecideConfigChange committed: the change as decided, and the server with its
// configuration after it.
type ConfigDecision struct {
	Change ConfigChangeRecord
	Server Server
	Config ServerConfig
}

// DecideConfigChange confirms (applies) or cancels the pending change changeID of serverID in tenantID, by
// by, in one transaction with the server's configuration locked: ErrNotFound for a change that is not this
// server's (or not tenantID's), ErrChangeNotPending for one decided already or applied when made, and — for a
// confirmation only — ErrSelfConfirmation when by is the key that requested it. Anyone who may decide may
// cancel, the requester too (withdrawing it). A confirmed change's fields are written as recorded: only
// requires_approval can be pending (ConfigEdit.Hold), and a confirmation sets it to the recorded value.
func (s *Store) DecideConfigChange(ctx context.Context, tenantID, serverID, changeID uuid.UUID, by Actor, confirm bool, at time.Time) (ConfigDecision, error) {
	var out ConfigDecision
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		cfg, err := lockConfig(ctx, tx, serverID, at, &out.Server)
		if err != nil {
			return err
		}
		ch, err := scanChange(tx.QueryRow(ctx, `SELECT `+changeColumns+` FROM server_config_changes x
			WHERE x.change_id = $1 AND x.server_id = $2 FOR UPDATE`, changeID, serverID))
		if err != nil {
			return translate(err)
		}
		switch {
		case ch.State != ChangePending:
			return ErrChangeNotPending
		case confirm && by.Via == ViaAPI && ch.RequestedBy.Via == ViaAPI && by.Key == ch.RequestedBy.Key:
			return ErrSelfConfirmation
		}
		state := ChangeCancelled
		out.Config = cfg
		if confirm {
			state = ChangeConfirmed
			for _, c := range ch.Changes {
				v, ok := c.New.(bool)
				if c.Field != "requires_approval" || !ok {
					return fmt.Errorf("config change %s: field %s cannot be applied by a confirmation", ch.ChangeID, c.Field)
				}
				cfg.RequiresApproval = v
			}
			if out.Config, err = writeConfig(ctx, tx, cfg, at); err != nil {
				return err
			}
		}
		out.Change, err = scanChange(tx.QueryRow(ctx, `WITH x AS (
				UPDATE server_config_changes SET state = $2, decided_by = $3, decided_via = $4, decided_at = $5
				WHERE change_id = $1 RETURNING *
			) SELECT `+changeColumns+` FROM x`, changeID, string(state), by.key(), by.via(), at))
		return translate(err)
	})
	if err != nil {
		return ConfigDecision{}, fmt.Errorf("decide config change: %w", err)
	}
	return out, nil
}

// ConfigChangeLog returns the recorded changes of one server of tenantID, oldest first: limit of them after
// the request number after. ErrNotFound for a server that is not tenantID's.
func (s *Store) ConfigChangeLog(ctx context.Context, tenantID, serverID uuid.UUID, after int64, limit int) ([]ConfigChangeRecord, error) {
	var out []ConfigChangeRecord
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM mcp_servers WHERE server_id = $1)`, serverID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		rows, err := tx.Query(ctx, `SELECT `+changeColumns+` FROM server_config_changes x
			WHERE x.server_id = $1 AND x.tenant_seq > $2 ORDER BY x.tenant_seq LIMIT $3`, serverID, after, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ConfigChangeRecord, error) { return scanChange(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("config changes: %w", err)
	}
	return out, nil
}

// SetApproval is the host CLI's switch of a server's approval requirement (`mcpfleet server approval`): it
// applies at once, whichever way, and is recorded like an API change with requested_via 'cli'. The command
// line runs with the owner's database connection, a trust level above every API key, which is why it
// needs no second administrator. It returns ErrNotFound for no such tenant or server.
func (a *Admin) SetApproval(ctx context.Context, tenantID, serverID uuid.UUID, required bool, at time.Time) (ConfigUpdate, error) {
	var out ConfigUpdate
	err := a.inTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		out, err = updateServerConfig(ctx, tx, serverID, at, ConfigEdit{By: ByCLI,
			Edit: func(c *ServerConfig) error { c.RequiresApproval = required; return nil }})
		return err
	})
	if err != nil {
		return ConfigUpdate{}, fmt.Errorf("set approval: %w", err)
	}
	return out, nil
}
