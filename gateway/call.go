package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// The refusal types: the last path segment of the problem type, and the outcome_class of the call.refused
// event. Clients may switch on them.
const (
	RefusedSkillNotFound        = "skill_not_found"
	RefusedSkillDisabled        = "skill_disabled"
	RefusedSkillUnavailable     = "skill_unavailable"
	RefusedServerDisabled       = "server_disabled"
	RefusedNoDataClass          = "no_data_class"
	RefusedNoEndpoint           = "no_endpoint"
	RefusedCredentialUnreadable = "credential_unreadable"
	RefusedCredentialMissing    = "credential_missing"
	RefusedAuthUnsupported      = "auth_unsupported"
	RefusedSecretKeyMissing     = "secret_key_missing"
	RefusedEndpointRefused      = "endpoint_refused"
	RefusedSchemaUnsupported    = "schema_unsupported"
	RefusedInvalidArguments     = "invalid_arguments"
	RefusedBudgetExhausted      = "budget_exhausted"
)

// Refusal is a call the gateway would not make: a precondition does not hold. The server was not asked.
// It is recorded in the run's events as call.refused (EventID).
type Refusal struct {
	Type   string // one of the Refused* constants
	Detail string // a sentence fit for a client
	Field  string // invalid_arguments: the argument at fault ("" is the arguments object)
	// Since is when the skill became unavailable (skill_unavailable).
	Since *time.Time
	// RetryAfter is how long waiting may help (skill_unavailable of an unhealthy server); 0 when waiting
	// will not help.
	RetryAfter time.Duration
	// ServerStatus is the server's status as the gateway read it for the call (skill_unavailable).
	ServerStatus health.Status
	// Limit and Used are the run's budget and what it used (budget_exhausted).
	Limit, Used int
	RunID       string
	ServerID    *uuid.UUID
	SkillID     *uuid.UUID
	Tool        string
	EventID     int64
}

func (r *Refusal) Error() string { return "call refused: " + r.Type + ": " + r.Detail }

// Request is a call an administrator asks for: a skill by id, or a server and the tool's name.
type Request struct {
	TenantID uuid.UUID
	RunID    string
	SkillID  uuid.UUID // uuid.Nil: ServerID and Tool name the skill
	ServerID uuid.UUID
	Tool     string
	// Arguments is the JSON object of arguments (empty: none).
	Arguments json.RawMessage
	// IdempotencyKey, if set, makes a retried request find the call it already made instead of making
	// another.
	IdempotencyKey string
	RequestedBy    uuid.UUID
}

// Call makes a call, or finds the one a retried request already made. It returns the call as it stands
// when it finished, or parked awaiting approval, or — after Config.Wait — still running. The call
// belongs to the gateway, not to ctx: a client that goes away does not cancel it (cancelling is
// POST .../cancel), and it is recorded whatever happens to the request.
//
// Errors: *Refusal (nothing was sent), ErrKeyReused, ErrStopping, ErrUnavailable or a store error; ctx's
// error if it ends while the call runs.
func (g *Gateway) Call(ctx context.Context, req Request) (persistence.Call, error) {
	if g.isStopping() {
		return persistence.Call{}, ErrStopping
	}
	if req.IdempotencyKey != "" {
		existing, err := g.store.CallByKey(ctx, req.TenantID, req.RunID, req.IdempotencyKey)
		switch {
		case err == nil:
			return g.replay(ctx, req, existing)
		case !errors.Is(err, persistence.ErrNotFound):
			return persistence.Call{}, err
		}
	}
	var t persistence.CallTarget
	var err error
	if req.SkillID != uuid.Nil {
		t, err = g.store.CallTargetBySkill(ctx, req.TenantID, req.SkillID)
	} else {
		t, err = g.store.CallTargetByName(ctx, req.TenantID, req.ServerID, req.Tool)
	}
	if errors.Is(err, persistence.ErrNotFound) {
		detail := "there is no such skill in this tenant"
		if req.SkillID == uuid.Nil {
			detail = fmt.Sprintf("server %s has no tool %q in this tenant: import its catalogue first", req.ServerID, req.Tool)
		}
		return persistence.Call{}, g.refuse(ctx, req, nil, &Refusal{Type: RefusedSkillNotFound, Detail: detail})
	}
	if err != nil {
		return persistence.Call{}, err
	}
	args, ref := preconditions(t, req.Arguments, g.caller.CheckCall, g.cfg.RetryAfter)
	if ref != nil {
		return persistence.Call{}, g.refuse(ctx, req, &t, ref)
	}
	rawArgs, err := json.Marshal(args)
	if err != nil {
		return persistence.Call{}, err
	}
	now := g.now()
	call := persistence.Call{
		CallID: uuid.New(), TenantID: req.TenantID, RunID: req.RunID, ServerID: t.Server.ServerID, SkillID: &t.Skill.SkillID,
		Tool: t.Skill.Name, Arguments: rawArgs, IdempotencyKey: req.IdempotencyKey, State: persistence.CallRunning,
		RequestedBy: req.RequestedBy, CreatedAt: now, TraceID: telemetry.TraceID(ctx),
	}
	call.State, call.ApprovalExpiresAt = initialState(t.Config, now, g.cfg.ApprovalWindow)
	// Registered before it is committed, so a cancel that arrives right after the commit finds it.
	var f *inflight
	var cctx context.Context
	if call.State == persistence.CallRunning {
		if cctx, f = g.register(ctx, call.CallID); f == nil {
			return persistence.Call{}, ErrStopping
		}
	}
	created, isNew, err := g.store.CreateCall(ctx, call, g.cfg.MaxCallsPerRun)
	if err != nil || !isNew {
		if f != nil {
			g.unregister(call.CallID, f)
		}
	}
	var be *persistence.BudgetError
	switch {
	case errors.As(err, &be):
		return persistence.Call{}, g.refuse(ctx, req, &t, budgetRefusal(req.RunID, be))
	case errors.Is(err, persistence.ErrNotFound):
		return persistence.Call{}, g.refuse(ctx, req, &t, &Refusal{Type: RefusedSkillNotFound, Detail: "the skill's server is gone from this tenant"})
	case err != nil:
		return persistence.Call{}, err
	case !isNew: // a concurrent request with the same key won
		return g.replay(ctx, req, created)
	}
	g.log.InfoContext(ctx, "call accepted", "call_id", created.CallID, "run_id", created.RunID, "server_id", created.ServerID,
		"tool", created.Tool, "state", created.State)
	if f == nil {
		return created, nil // parked
	}
	g.launch(cctx, f, created, t, args)
	return g.await(ctx, req.TenantID, created.CallID, f)
}

// replay answers a request whose Idempotency-Key the run already used: the call it made, as it stands
// (waiting for it if this process is running it). A different call under the same key is ErrKeyReused.
func (g *Gateway) replay(ctx context.Context, req Request, c persistence.Call) (persistence.Call, error) {
	if !sameCall(req, c) {
		return persistence.Call{}, ErrKeyReused
	}
	return g.await(ctx, req.TenantID, c.CallID, g.lookup(c.CallID))
}

// refuse records r in the run's events (call.refused) and returns it. If it cannot be recorded the
// answer is ErrUnavailable instead: nothing is lost silently, and nothing was sent.
func (g *Gateway) refuse(ctx context.Context, req Request, t *persistence.CallTarget, r *Refusal) error {
	r.RunID = req.RunID
	r.Tool = req.Tool
	if req.SkillID != uuid.Nil {
		id := req.SkillID
		r.SkillID = &id
	}
	if req.ServerID != uuid.Nil {
		id := req.ServerID
		r.ServerID = &id
	}
	if t != nil {
		sid, kid := t.Server.ServerID, t.Skill.SkillID
		r.ServerID, r.SkillID, r.Tool = &sid, &kid, t.Skill.Name
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ev, err := g.store.AddRunEvent(wctx, persistence.RunEvent{
		TenantID: req.TenantID, RunID: req.RunID, Kind: persistence.EventCallRefused, ServerID: r.ServerID, Tool: r.Tool,
		OutcomeClass: r.Type, Detail: r.Detail, At: g.now(),
	})
	if err != nil {
		g.log.WarnContext(ctx, "a refusal could not be recorded", "run_id", req.RunID, "refusal", r.Type, "err", err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.EventID = ev.EventID
	g.log.InfoContext(ctx, "call refused; the server was not asked", "run_id", req.RunID, "refusal", r.Type, "tool", r.Tool)
	return r
}
