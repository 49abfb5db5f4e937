package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CallState is the state of a tool call (mcp_calls.state): one of the six constants below, a closed set
// that the table's CHECK constraint repeats. A call's state only moves forward (CanMoveTo, which the
// table's trigger enforces too); the last four are terminal.
type CallState string

// The states of a tool call.
const (
	CallAwaitingApproval CallState = "awaiting_approval"
	CallRunning          CallState = "running"
	CallSucceeded        CallState = "succeeded"
	CallFailed           CallState = "failed"
	CallDenied           CallState = "denied"
	CallCancelled        CallState = "cancelled"
)

// CallStates returns every call state, in the order a call can reach them (a new slice each time).
func CallStates() []CallState {
	return []CallState{CallAwaitingApproval, CallRunning, CallSucceeded, CallFailed, CallDenied, CallCancelled}
}

// ParseCallState returns the call state named s, or false if s names none.
func ParseCallState(s string) (CallState, bool) {
	st := CallState(s)
	return st, st.Valid()
}

// Valid reports whether s is one of the call states.
func (s CallState) Valid() bool {
	switch s {
	case CallAwaitingApproval, CallRunning, CallSucceeded, CallFailed, CallDenied, CallCancelled:
		return true
	}
	return false
}

// Finished reports whether s is terminal: succeeded, failed, denied or cancelled.
func (s CallState) Finished() bool {
	switch s {
	case CallSucceeded, CallFailed, CallDenied, CallCancelled:
		return true
	}
	return false
}

// CanMoveTo reports whether a call in state s may move to next: a parked call to running, denied,
// failed or cancelled; a running one to running (its start stamped), succeeded, failed or cancelled;
// a finished one nowhere. It is the rule of the mcp_calls_forward trigger.
func (s CallState) CanMoveTo(next CallState) bool {
	switch s {
	case CallAwaitingApproval:
		return next == CallRunning || next == CallDenied || next == CallFailed || next == CallCancelled
	case CallRunning:
		return next == CallRunning || next == CallSucceeded || next == CallFailed || next == CallCancelled
	}
	return false
}

// The kinds of run event (mcp_run_events.kind).
const (
	EventCallRequested        = "call.requested"
	EventCallAwaitingApproval = "call.awaiting_approval"
	EventCallStarted          = "call.started"
	EventCallSucceeded        = "call.succeeded"
	EventCallFailed           = "call.failed"
	EventCallCancelled        = "call.cancelled"
	EventCallRefused          = "call.refused"
)

// ErrBudgetExhausted is wrapped by the *BudgetError CreateCall returns when the run has used its budget.
var ErrBudgetExhausted = errors.New("the run has used its call budget")

// BudgetError is a call refused because its run has used all Limit calls it may make.
type BudgetError struct {
	Limit, Used int
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: %d of %d calls used", ErrBudgetExhausted, e.Used, e.Limit)
}

// Is makes errors.Is(err, ErrBudgetExhausted) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// CallResult is the answer of a call as a model reads it: text only, notes first, bounded (see
// mcpclient.ShapeResult), or the failed tool result the gateway wrote in its place.
type CallResult struct {
	Content   string
	IsError   bool
	Dropped   map[string]int // non-text blocks dropped, by type; nil when none were
	Truncated bool
}

// Call is a row of mcp_calls, with its server's module name.
type Call struct {
	CallID         uuid.UUID
	TenantID       uuid.UUID
	RunID          string
	ServerID       uuid.UUID
	ServerName     string // the server's module name: the operator's name for it
	SkillID        *uuid.UUID
	Tool           string
	Arguments      json.RawMessage
	IdempotencyKey string // "" when none was given
	State          CallState
	OutcomeClass   string // "" until the call ends
	Reason         string
	Result         *CallResult // nil until the call ends
	LatencyMS      *int64
	RequestedBy    uuid.UUID // the API key that asked for the call
	DecidedBy      *uuid.UUID
	CreatedAt      time.Time
	// ApprovalExpiresAt is set for a call that needed approval: after it, the call can no longer be
	// approved.
	ApprovalExpiresAt *time.Time
	DecidedAt         *time.Time
	StartedAt         *time.Time // when the call was handed to the MCP client
	FinishedAt        *time.Time
	// TraceID is the trace of the request that made the call (32 lowercase hex), "" when it was not
	// traced; written once, at CreateCall (migration 0017).
	TraceID string
}

// Finished reports whether the call is in a terminal state.
func (c Call) Finished() bool { return c.State.Finished() }

// RunEvent is a row of mcp_run_events.
type RunEvent struct {
	EventID      int64
	TenantID     uuid.UUID
	RunID        string
	Kind         string
	CallID       *uuid.UUID
	ServerID     *uuid.UUID
	Tool         string
	State        CallState // "" for a refusal: no call exists
	OutcomeClass string
	LatencyMS    *int64
	Detail       string
	At           time.Time
}

const callColumns = `c.call_id, c.tenant_id, c.run_id, c.server_id, m.module_name, c.skill_id, c.tool, c.arguments,
	coalesce(c.idempotency_key, ''), c.state, coalesce(c.outcome_class, ''), coalesce(c.reason, ''), c.result_content,
	c.result_is_error, c.result_dropped, c.result_truncated, c.latency_ms, c.requested_by, c.decided_by, c.created_at,
	c.approval_expires_at, c.decided_at, c.started_at, c.finished_at, coalesce(c.trace_id, '')`

func scanCall(row pgx.Row) (Call, error) {
	var c Call
	var content *string
	var isError *bool
	var dropped []byte
	var truncated bool
	err := row.Scan(&c.CallID, &c.TenantID, &c.RunID, &c.ServerID, &c.ServerName, &c.SkillID, &c.Tool, &c.Arguments,
		&c.IdempotencyKey, &c.State, &c.OutcomeClass, &c.Reason, &content, &isError, &dropped, &truncated,
		&c.LatencyMS, &c.RequestedBy, &c.DecidedBy, &c.CreatedAt, &c.ApprovalExpiresAt, &c.DecidedAt, &c.StartedAt,
		&c.FinishedAt, &c.TraceID)
	if err != nil {
		return Call{}, err
	}
	if content != nil {
		r := &CallResult{Content: *content, IsError: isError != nil && *isError, Truncated: truncated}
		if len(dropped) > 0 && string(dropped) != "null" {
			if err := json.Unmarshal(dropped, &r.Dropped); err != nil {
				return Call{}, fmt.Errorf("decoding result_dropped: %w", err)
			}
		}
		c.Result = r
	}
	return c, nil
}

const runEventColumns = `event_id, tenant_id, run_id, kind, call_id, server_id, coalesce(tool, ''), coalesce(state, ''),
	coalesce(outcome_class, ''), latency_ms, coalesce(detail, ''), occurred_at`

func scanRunEvent(row pgx.Row) (RunEvent, error) {
	var e RunEvent
	err := row.Scan(&e.EventID, &e.TenantID, &e.RunID, &e.Kind, &e.CallID, &e.ServerID, &e.Tool, &e.State,
		&e.OutcomeClass, &e.LatencyMS, &e.Detail, &e.At)
	return e, err
}

// CallTarget is what decides whether a tool may be called: the skill, its server and the server's
// configuration (the defaults when it has no row).
type CallTarget struct {
	Skill  Skill
	Server Server
	Config ServerConfig
	// UnhealthySince is when the server last became unhealthy (its last mcp.server.unhealthy audit
	// event), nil if it never did.
	UnhealthySince *time.Time
}

// CallTargetBySkill reads the skill skillID of tenantID with its server, or ErrNotFound.
func (s *Store) CallTargetBySkill(ctx context.Context, tenantID, skillID uuid.UUID) (CallTarget, error) {
	return s.callTarget(ctx, tenantID, `k.skill_id = $1`, skillID)
}

// CallTargetByName reads the skill named tool of server serverID of tenantID with its server, or
// ErrNotFound.
func (s *Store) CallTargetByName(ctx context.Context, tenantID, serverID uuid.UUID, tool string) (CallTarget, error) {
	return s.callTarget(ctx, tenantID, `k.server_id = $1 AND k.name = $2`, serverID, tool)
}

func (s *Store) callTarget(ctx context.Context, tenantID uuid.UUID, where string, args ...any) (CallTarget, error) {
	var t CallTarget
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		t.Skill, err = scanSkill(tx.QueryRow(ctx, `SELECT `+skillColumns+` FROM skill_registry k WHERE `+where, args...))
		if err != nil {
			return translate(err)
		}
		t.Server, err = scanServer(tx.QueryRow(ctx, `SELECT `+serverColumns+` FROM mcp_servers WHERE server_id = $1`, t.Skill.ServerID))
		if err != nil {
			return translate(err)
		}
		t.Config, err = scanConfig(tx.QueryRow(ctx, `SELECT `+configColumns+` FROM server_config c WHERE c.server_id = $1`, t.Skill.ServerID))
		if errors.Is(err, pgx.ErrNoRows) {
			t.Config, err = DefaultServerConfig(tenantID, t.Skill.ServerID), nil
		}
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT max(occurred_at) FROM audit_events WHERE server_id = $1 AND kind = 'mcp.server.unhealthy'`,
			t.Skill.ServerID).Scan(&t.UnhealthySince)
	})
	if err != nil {
		return CallTarget{}, fmt.Errorf("call target: %w", err)
	}
	return t, nil
}

// getCall reads one call in tx.
func getCall(ctx context.Context, tx pgx.Tx, callID uuid.UUID) (Call, error) {
	c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM mcp_calls c JOIN mcp_servers m ON m.server_id = c.server_id
		WHERE c.call_id = $1`, callID))
	return c, translate(err)
}

// GetCall returns one call of tenantID, or ErrNotFound (also for another tenant's call).
func (s *Store) GetCall(ctx context.Context, tenantID, callID uuid.UUID) (Call, error) {
	var c Call
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		c, err = getCall(ctx, tx, callID)
		return err
	})
	if err != nil {
		return Call{}, fmt.Errorf("get call: %w", err)
	}
	return c, nil
}

// CallByKey returns the call of run runID of tenantID made with idempotency key key, or ErrNotFound.
func (s *Store) CallByKey(ctx context.Context, tenantID uuid.UUID, runID, key string) (Call, error) {
	var c Call
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		c, err = callByKey(ctx, tx, runID, key)
		return err
	})
	if err != nil {
		return Call{}, fmt.Errorf("call by key: %w", err)
	}
	return c, nil
}

func callByKey(ctx context.Context, tx pgx.Tx, runID, key string) (Call, error) {
	c, err := scanCall(tx.QueryRow(ctx, `SELECT `+callColumns+` FROM mcp_calls c JOIN mcp_servers m ON m.server_id = c.server_id
		WHERE c.run_id = $1 AND c.idempotency_key = $2`, runID, key))
	return c, translate(err)
}

// CallFilter selects calls of a tenant, newest first.
type CallFilter struct {
	State CallState // "" for any
	RunID string    // "" for any
	Limit int       // at most 500; default 100
}

// ListCalls returns calls of tenantID matching f, newest first.
func (s *Store) ListCalls(ctx context.Context, tenantID uuid.UUID, f CallFilter) ([]Call, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	var out []Call
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+callColumns+` FROM mcp_calls c JOIN mcp_servers m ON m.server_id = c.server_id
			WHERE ($1 = '' OR c.state = $1) AND ($2 = '' OR c.run_id = $2)
			ORDER BY c.created_at DESC, c.call_id LIMIT $3`, f.State, f.RunID, f.Limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Call, error) { return scanCall(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list calls: %w", err)
	}
	return out, nil
}

// CreateCall accepts a call, in one transaction: it inserts c (whose State is awaiting_approval or
// running) for the server c.ServerID of c.TenantID, takes one call from the run's budget — the tenant's
// max_calls_per_run, or defaultBudget when the tenant has none — and records call.requested (and
// call.awaiting_approval for a parked call). The budget row is locked while it is counted, so concurrent
// calls of one run can never together exceed it.
//
// If c carries an idempotency key the run already used, nothing is written and the existing call is
// returned with created false: a retried request finds its call instead of making another. A run that has
// used its budget is a *BudgetError (ErrBudgetExhausted) and nothing is written; a server the tenant does
// not have is ErrNotFound.
func (s *Store) CreateCall(ctx context.Context, c Call, defaultBudget int) (Call, bool, error) {
	var out Call
	created := false
	var key any
	if c.IdempotencyKey != "" {
		key = c.IdempotencyKey
	}
	args := c.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	err := s.InTenant(ctx, c.TenantID, func(tx pgx.Tx) error {
		var id uuid.UUID
		err := tx.QueryRow(ctx, `INSERT INTO mcp_calls (call_id, tenant_id, run_id, server_id, skill_id, tool, arguments,
				idempotency_key, state, requested_by, created_at, approval_expires_at, node, trace_id)
			SELECT $1, tenant_id, $2, server_id, $4, $5, $6, $7, $8, $9, $10, $11, nullif($12, ''), nullif($13, '') FROM mcp_servers WHERE server_id = $3
			ON CONFLICT (tenant_id, run_id, idempotency_key) DO NOTHING
			RETURNING call_id`,
			c.CallID, c.RunID, c.ServerID, c.SkillID, c.Tool, args, key, c.State, c.RequestedBy, c.CreatedAt,
			c.ApprovalExpiresAt, s.node, c.TraceID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			if c.IdempotencyKey == "" {
				return ErrNotFound
			}
			out, err = callByKey(ctx, tx, c.RunID, c.IdempotencyKey)
			return err
		}
		if err != nil {
			return translate(err)
		}
		limit := defaultBudget
		var tenantLimit *int
		err = tx.QueryRow(ctx, `SELECT max_calls_per_run FROM tenant_settings`).Scan(&tenantLimit)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if tenantLimit != nil {
			limit = *tenantLimit
		}
		var used int
		err = tx.QueryRow(ctx, `INSERT INTO mcp_run_budgets AS b (tenant_id, run_id, calls_used, updated_at)
			SELECT current_setting('auth.tenant_id')::uuid, $1, 1, $3 WHERE $2 >= 1
			ON CONFLICT (tenant_id, run_id) DO UPDATE SET calls_used = b.calls_used + 1, updated_at = EXCLUDED.updated_at
				WHERE b.calls_used < $2
			RETURNING calls_used`, c.RunID, limit, c.CreatedAt).Scan(&used)
		if errors.Is(err, pgx.ErrNoRows) {
			if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT calls_used FROM mcp_run_budgets WHERE run_id = $1), 0)`, c.RunID).Scan(&used); err != nil {
				return err
			}
			return &BudgetError{Limit: limit, Used: used}
		}
		if err != nil {
			return err
		}
		kinds := []string{EventCallRequested}
		if c.State == CallAwaitingApproval {
			kinds = append(kinds, EventCallAwaitingApproval)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO mcp_run_events (tenant_id, run_id, kind, call_id, server_id, tool, state, occurred_at)
			SELECT tenant_id, run_id, k, call_id, server_id, tool, state, created_at
			FROM mcp_calls, unnest($2::text[]) WITH ORDINALITY AS t(k, n) WHERE call_id = $1 ORDER BY n`, c.CallID, kinds); err != nil {
			return err
		}
		out, err = getCall(ctx, tx, c.CallID)
		created = err == nil
		return err
	})
	if err != nil {
		return Call{}, false, fmt.Errorf("create call: %w", err)
	}
	return out, created, nil
}

// CallTransition moves one call from state From to State and records Kind (if not "") in the run's
// events, in one statement.
type CallTransition struct {
	CallID       uuid.UUID
	From         CallState
	State        CallState
	OutcomeClass string
	Reason       string
	Result       *CallResult
	LatencyMS    *int64
	DecidedBy    *uuid.UUID // set with DecidedAt = At
	At           time.Time
	Kind         string
	// NotExpiredAt, if set, makes the transition apply only to a call whose approval window is still
	// open at that time; ExpiredAt only to one whose window closed by then.
	NotExpiredAt *time.Time
	ExpiredAt    *time.Time
}

// TransitionCall applies t and returns the call as committed. If the call is not in t.From (or the
// expiry condition does not hold) nothing is written and the error wraps ErrConflict; a call the
// tenant does not have is ErrNotFound.
func (s *Store) TransitionCall(ctx context.Context, tenantID uuid.UUID, t CallTransition) (Call, error) {
	var out Call
	var content, dropped any
	var isError any
	if r := t.Result; r != nil {
		content, isError = r.Content, r.IsError
		if len(r.Dropped) > 0 {
			b, err := json.Marshal(r.Dropped)
			if err != nil {
				return Call{}, fmt.Errorf("transition call: %w", err)
			}
			dropped = b
		}
	}
	truncated := t.Result != nil && t.Result.Truncated
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		var err error
		out, err = scanCall(tx.QueryRow(ctx, `WITH upd AS (
				UPDATE mcp_calls SET state = $2, outcome_class = nullif($3, ''), reason = nullif($4, ''),
					result_content = $5, result_is_error = $6, result_dropped = $7, result_truncated = $8,
					latency_ms = $9, decided_by = coalesce($10, decided_by),
					decided_at = CASE WHEN $10::uuid IS NULL THEN decided_at ELSE $11 END,
					finished_at = CASE WHEN $2 IN ('succeeded','failed','denied','cancelled') THEN $11 ELSE finished_at END,
					node = CASE WHEN $2 = 'running' THEN nullif($16, '') ELSE node END
				WHERE call_id = $1 AND state = $12
				  AND ($13::timestamptz IS NULL OR approval_expires_at > $13)
				  AND ($14::timestamptz IS NULL OR approval_expires_at <= $14)
				RETURNING *
			), ev AS (
				INSERT INTO mcp_run_events (tenant_id, run_id, kind, call_id, server_id, tool, state, outcome_class, latency_ms, detail, occurred_at)
				SELECT tenant_id, run_id, $15, call_id, server_id, tool, state, outcome_class, latency_ms, reason, $11 FROM upd WHERE $15 <> ''
			)
			SELECT `+callColumns+` FROM upd c JOIN mcp_servers m ON m.server_id = c.server_id`,
			t.CallID, t.State, t.OutcomeClass, t.Reason, content, isError, dropped, truncated, t.LatencyMS, t.DecidedBy,
			t.At, t.From, t.NotExpiredAt, t.ExpiredAt, t.Kind, s.node))
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := getCall(ctx, tx, t.CallID); err != nil {
				return err
			}
			return fmt.Errorf("call %s is not %s: %w", t.CallID, t.From, ErrConflict)
		}
		return err
	})
	if err != nil {
		return Call{}, fmt.Errorf("transition call: %w", err)
	}
	return out, nil
}

// StartCall stamps started_at on a running call that has not started and records call.started. It
// reports false, writing nothing, when the call is not running or already started.
func (s *Store) StartCall(ctx context.Context, tenantID, callID uuid.UUID, at time.Time) (bool, error) {
	started := false
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `WITH upd AS (
				UPDATE mcp_calls SET started_at = $2 WHERE call_id = $1 AND state = 'running' AND started_at IS NULL
				RETURNING *
			)
			INSERT INTO mcp_run_events (tenant_id, run_id, kind, call_id, server_id, tool, state, occurred_at)
			SELECT tenant_id, run_id, 'call.started', call_id, server_id, tool, state, $2 FROM upd`, callID, at)
		started = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("start call: %w", err)
	}
	return started, nil
}

// ExpireApprovals fails every call of tenantID still awaiting approval whose window closed by now
// (outcome approval_expired, the failed tool result res made of each call) and records call.failed for
// each. It returns the calls it expired.
func (s *Store) ExpireApprovals(ctx context.Context, tenantID uuid.UUID, now time.Time, res func(Call) (reason string, r CallResult)) ([]Call, error) {
	var due []Call
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+callColumns+` FROM mcp_calls c JOIN mcp_servers m ON m.server_id = c.server_id
			WHERE c.state = 'awaiting_approval' AND c.approval_expires_at <= $1 ORDER BY c.approval_expires_at`, now)
		if err != nil {
			return err
		}
		due, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Call, error) { return scanCall(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("expire approvals: %w", err)
	}
	var out []Call
	for _, c := range due {
		reason, r := res(c)
		done, err := s.TransitionCall(ctx, tenantID, CallTransition{
			CallID: c.CallID, From: CallAwaitingApproval, State: CallFailed, OutcomeClass: "approval_expired",
			Reason: reason, Result: &r, At: now, Kind: EventCallFailed, ExpiredAt: &now,
		})
		if errors.Is(err, ErrConflict) {
			continue // decided meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("expire approvals: %w", err)
		}
		out = append(out, done)
	}
	return out, nil
}

// InterruptRunning fails every call of tenantID found running by a node that is gone — calls a previous
// process was making when it stopped — with outcome interrupted, the failed tool result res makes of each,
// and records call.failed for each. Nothing is re-sent. It returns how many calls it failed.
//
// A call is made by the node of the store that created or approved it (Options.Node, in mcp_calls.node).
// The node is gone unless it is this store's own or was seen within NodeLease (TouchNode, by PostgreSQL's
// clock). Single-node mode never calls TouchNode, so every earlier process's running calls are
// interrupted at start, as before; a cluster node touches its row, so its calls are left to it.
func (s *Store) InterruptRunning(ctx context.Context, tenantID uuid.UUID, now time.Time, res func(Call) (reason string, r CallResult)) (int, error) {
	var running []Call
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+callColumns+` FROM mcp_calls c JOIN mcp_servers m ON m.server_id = c.server_id
			WHERE c.state = 'running' AND (c.node IS NULL OR c.node <> $1)
			  AND NOT EXISTS (SELECT 1 FROM cluster_nodes n WHERE n.node = c.node AND n.seen_at >= now() - $2::interval)`,
			s.node, NodeLease)
		if err != nil {
			return err
		}
		running, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Call, error) { return scanCall(r) })
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("interrupt running calls: %w", err)
	}
	n := 0
	for _, c := range running {
		reason, r := res(c)
		_, err := s.TransitionCall(ctx, tenantID, CallTransition{
			CallID: c.CallID, From: CallRunning, State: CallFailed, OutcomeClass: "interrupted", Reason: reason,
			Result: &r, At: now, Kind: EventCallFailed,
		})
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("interrupt running calls: %w", err)
		}
		n++
	}
	return n, nil
}

// AddRunEvent records e (a refusal: no call exists) and returns it with its id.
func (s *Store) AddRunEvent(ctx context.Context, e RunEvent) (RunEvent, error) {
	err := s.InTenant(ctx, e.TenantID, func(tx pgx.Tx) error {
		var err error
		e, err = scanRunEvent(tx.QueryRow(ctx, `INSERT INTO mcp_run_events (tenant_id, run_id, kind, call_id, server_id, tool,
				state, outcome_class, latency_ms, detail, occurred_at)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), nullif($8, ''), $9, nullif($10, ''), $11)
			RETURNING `+runEventColumns,
			e.TenantID, e.RunID, e.Kind, e.CallID, e.ServerID, e.Tool, e.State, e.OutcomeClass, e.LatencyMS, e.Detail, e.At))
		return err
	})
	if err != nil {
		return RunEvent{}, fmt.Errorf("add run event: %w", err)
	}
	return e, nil
}

// RunEvents returns up to limit events of run runID of tenantID with an id above after, oldest first.
func (s *Store) RunEvents(ctx context.Context, tenantID uuid.UUID, runID string, after int64, limit int) ([]RunEvent, error) {
	return s.runEvents(ctx, tenantID, `run_id = $1`, runID, after, limit)
}

// TenantRunEvents returns up to limit run events of every run of tenantID with an id above after,
// oldest first (a feed for the dashboard's event stream).
func (s *Store) TenantRunEvents(ctx context.Context, tenantID uuid.UUID, after int64, limit int) ([]RunEvent, error) {
	return s.runEvents(ctx, tenantID, `$1 = ''`, "", after, limit)
}

func (s *Store) runEvents(ctx context.Context, tenantID uuid.UUID, where, runID string, after int64, limit int) ([]RunEvent, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	var out []RunEvent
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+runEventColumns+` FROM mcp_run_events WHERE `+where+` AND event_id > $2
			ORDER BY event_id LIMIT $3`, runID, after, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunEvent, error) { return scanRunEvent(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("run events: %w", err)
	}
	return out, nil
}

// RunBudgetUsed returns how many calls run runID of tenantID has been allowed (0 for a run without calls).
func (s *Store) RunBudgetUsed(ctx context.Context, tenantID uuid.UUID, runID string) (int, error) {
	var used int
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT coalesce((SELECT calls_used FROM mcp_run_budgets WHERE run_id = $1), 0)`, runID).Scan(&used)
	})
	if err != nil {
		return 0, fmt.Errorf("run budget: %w", err)
	}
	return used, nil
}

// TenantSettings are a tenant's gateway settings; a nil field takes the service's default.
type TenantSettings struct {
	MaxCallsPerRun *int
	UpdatedAt      *time.Time
}

// GetTenantSettings returns tenantID's settings (all nil when it has none).
func (s *Store) GetTenantSettings(ctx context.Context, tenantID uuid.UUID) (TenantSettings, error) {
	var out TenantSettings
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT max_calls_per_run, updated_at FROM tenant_settings`).Scan(&out.MaxCallsPerRun, &out.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return TenantSettings{}, fmt.Errorf("get tenant settings: %w", err)
	}
	return out, nil
}

// SetMaxCallsPerRun sets (or, with nil, clears) tenantID's budget of calls per run.
func (s *Store) SetMaxCallsPerRun(ctx context.Context, tenantID uuid.UUID, n *int, at time.Time) (TenantSettings, error) {
	var out TenantSettings
	err := s.InTenant(ctx, tenantID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO tenant_settings (tenant_id, max_calls_per_run, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id) DO UPDATE SET max_calls_per_run = EXCLUDED.max_calls_per_run, updated_at = EXCLUDED.updated_at
			RETURNING max_calls_per_run, updated_at`, tenantID, n, at).Scan(&out.MaxCallsPerRun, &out.UpdatedAt)
	})
	if err != nil {
		return TenantSettings{}, fmt.Errorf("set tenant settings: %w", err)
	}
	return out, nil
}
