package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// The gateway's decisions, as pure functions of what was read: no store, no clock, no network. The
// Gateway's methods read, call these, and write what they decide; rules_test.go holds them to their
// contracts without a database.

// preconditions applies the preconditions of a call to target, in the documented order (skill enabled,
// available, server enabled, data class declared, reachable from this side, arguments valid against the
// normalised input schema), and returns the decoded arguments or the first refusal. reach is the MCP
// client side's check of the server's configuration (remote.Service.CheckCall); retryAfter is what a
// refusal for an unhealthy server suggests waiting.
func preconditions(t persistence.CallTarget, raw json.RawMessage, reach func(persistence.ServerConfig) error, retryAfter time.Duration) (map[string]any, *Refusal) {
	k, srv, cfg := t.Skill, t.Server, t.Config
	name := fmt.Sprintf("tool %q of server %q", k.Name, srv.ModuleName)
	if !k.Enabled {
		return nil, &Refusal{Type: RefusedSkillDisabled, Detail: name + " is disabled: enable it first (POST /v1/mcp/skills/" + k.SkillID.String() + "/enable)"}
	}
	if r := unavailable(t, name, retryAfter); r != nil {
		return nil, r
	}
	if !cfg.Enabled {
		return nil, &Refusal{Type: RefusedServerDisabled, Detail: fmt.Sprintf("server %q is disabled: enable it first (PATCH /v1/mcp/servers/%s)", srv.ModuleName, srv.ServerID)}
	}
	if cfg.DataClass == "" {
		return nil, &Refusal{Type: RefusedNoDataClass, Detail: fmt.Sprintf("server %q declares no data class, so it supplies nothing: set data_class (PATCH /v1/mcp/servers/%s) first", srv.ModuleName, srv.ServerID)}
	}
	if err := reach(cfg); err != nil {
		return nil, thisSideRefusal(srv, err)
	}
	args, err := decodeArgs(raw)
	if err != nil {
		return nil, &Refusal{Type: RefusedInvalidArguments, Detail: "arguments must be a JSON object"}
	}
	if hasNUL(args) {
		return nil, &Refusal{Type: RefusedInvalidArguments, Detail: "the arguments must not contain a NUL character (\\u0000), in a value or a key"}
	}
	schema, err := toolschema.Normalize(k.InputSchema)
	if err != nil {
		return nil, &Refusal{Type: RefusedSchemaUnsupported, Detail: name + " has an input schema outside the supported subset, so its arguments cannot be checked: import the server's catalogue again"}
	}
	if err := toolschema.Validate(schema, args); err != nil {
		var fe *toolschema.FieldError
		if errors.As(err, &fe) {
			detail := "the arguments do not match the input schema of " + name + ": " + fe.Error()
			return nil, &Refusal{Type: RefusedInvalidArguments, Field: fe.Field, Detail: detail}
		}
		return nil, &Refusal{Type: RefusedInvalidArguments, Detail: "the arguments cannot be checked against the input schema of " + name}
	}
	return args, nil
}

// unavailable is the skill_unavailable refusal of a skill that cannot be called now, with since when and
// how long waiting may take (retryAfter, for a server that may come back); nil when the skill is
// available.
func unavailable(t persistence.CallTarget, name string, retryAfter time.Duration) *Refusal {
	k, srv := t.Skill, t.Server
	since := k.UpdatedAt
	r := &Refusal{Type: RefusedSkillUnavailable, ServerStatus: srv.Status}
	switch {
	case k.OrphanedAt != nil:
		since = *k.OrphanedAt
		r.Detail = name + " is no longer in the server's catalogue: import it again if the server offers it again"
	case srv.Status == health.Deregistered:
		if srv.DeregisteredAt != nil {
			since = *srv.DeregisteredAt
		}
		r.Detail = fmt.Sprintf("server %q deregistered: %s is unavailable until it registers again", srv.ModuleName, name)
	case srv.Status == health.Unhealthy:
		if t.UnhealthySince != nil {
			since = *t.UnhealthySince
		}
		r.RetryAfter = retryAfter
		r.Detail = fmt.Sprintf("server %q is unhealthy: %s is unavailable until the server shows it is alive again", srv.ModuleName, name)
	case !k.Available:
		r.RetryAfter = retryAfter
		r.Detail = name + " is unavailable"
	default:
		return nil
	}
	s := since.UTC()
	r.Since = &s
	return r
}

// thisSideRefusal is the refusal of a call this side cannot make (remote.Service.CheckCall's errors).
func thisSideRefusal(srv persistence.Server, err error) *Refusal {
	var au *remote.AuthUnsupportedError
	var ee *mcpclient.EndpointError
	id := srv.ServerID.String()
	switch {
	case errors.Is(err, remote.ErrNoEndpoint):
		return &Refusal{Type: RefusedNoEndpoint, Detail: fmt.Sprintf("server %q has no endpoint to call: set one (PATCH /v1/mcp/servers/%s)", srv.ModuleName, id)}
	case errors.As(err, &au):
		return &Refusal{Type: RefusedAuthUnsupported, Detail: fmt.Sprintf("the stored authentication mode %q of server %q is not one this client offers (bearer, header): fix it with PATCH /v1/mcp/servers/%s", au.Mode, srv.ModuleName, id)}
	case errors.Is(err, remote.ErrNoCredential):
		return &Refusal{Type: RefusedCredentialMissing, Detail: fmt.Sprintf("server %q needs a credential and none is stored (it is dropped when the endpoint moves to another origin): set auth.credential with PATCH /v1/mcp/servers/%s", srv.ModuleName, id)}
	case errors.Is(err, remote.ErrCredentialUnreadable):
		return &Refusal{Type: RefusedCredentialUnreadable, Detail: fmt.Sprintf("the stored credential of server %q cannot be opened with the configured secret key: set it again with PATCH /v1/mcp/servers/%s", srv.ModuleName, id)}
	case errors.Is(err, remote.ErrNoSecretKey):
		return &Refusal{Type: RefusedSecretKeyMissing, Detail: "this service has no MCPFLEET_SECRET_KEY, so it cannot use the server's credential"}
	case errors.As(err, &ee):
		return &Refusal{Type: RefusedEndpointRefused, Detail: ee.Error() + " (MCPFLEET_ENDPOINT_ALLOWLIST lists the exceptions)"}
	case errors.Is(err, mcpclient.ErrEndpointRefused):
		return &Refusal{Type: RefusedEndpointRefused, Detail: "the server's endpoint is refused by the endpoint policy"}
	}
	return &Refusal{Type: RefusedEndpointRefused, Detail: "the server cannot be called from this service"}
}

// initialState is the state an accepted call starts in: parked until now+window when its server
// requires approval, running otherwise. The requirement is the server's configuration alone: nothing
// the server declares about its tools (readOnlyHint, idempotentHint, ...) is read, so nothing the far
// side says can waive it.
func initialState(cfg persistence.ServerConfig, now time.Time, window time.Duration) (persistence.CallState, *time.Time) {
	if !cfg.RequiresApproval {
		return persistence.CallRunning, nil
	}
	expires := now.Add(window)
	return persistence.CallAwaitingApproval, &expires
}

// mayApprove is the four-eyes rule: the key by may approve c only if it is not the key that requested
// it (ErrSelfApproval). A dashboard session carries the key it was signed in with, so it is that key.
func mayApprove(c persistence.Call, by uuid.UUID) error {
	if by == c.RequestedBy {
		return ErrSelfApproval
	}
	return nil
}

// approvalDue reports whether c is parked with its approval window closed at now (the window is
// half-open: at its end the call can no longer be approved).
func approvalDue(c persistence.Call, now time.Time) bool {
	return c.State == persistence.CallAwaitingApproval && c.ApprovalExpiresAt != nil && !now.Before(*c.ApprovalExpiresAt)
}

// approvalExpired reports whether c is a call whose approval window closed (it failed, never sent).
func approvalExpired(c persistence.Call) bool {
	return c.State == persistence.CallFailed && c.OutcomeClass == "approval_expired"
}

// decidable says whether op (approve, deny) applies to c as read: ErrApprovalExpired for a call whose
// window closed, a *StateError for one in any other state than awaiting_approval, nil otherwise.
func decidable(c persistence.Call, op string) error {
	if approvalExpired(c) {
		return ErrApprovalExpired
	}
	if c.State != persistence.CallAwaitingApproval {
		return &StateError{Call: c, Op: op}
	}
	return nil
}

// budgetRefusal is the refusal of a call of run runID whose budget be is used up.
func budgetRefusal(runID string, be *persistence.BudgetError) *Refusal {
	return &Refusal{Type: RefusedBudgetExhausted, Limit: be.Limit, Used: be.Used,
		Detail: fmt.Sprintf("run %q has made the %d remote calls a run may make: this call was refused and the server was not asked", runID, be.Limit)}
}

// effectiveSettings are a tenant's settings ts over the service's default budget def.
func effectiveSettings(ts persistence.TenantSettings, def int) Settings {
	s := Settings{MaxCallsPerRun: def, Default: def, UpdatedAt: ts.UpdatedAt}
	if ts.MaxCallsPerRun != nil {
		s.MaxCallsPerRun, s.TenantSet = *ts.MaxCallsPerRun, true
	}
	return s
}

// validBudget checks a budget a tenant asks for: nil (the default) or 1 to MaxCallsPerRunLimit.
func validBudget(n *int) error {
	if n != nil && (*n < 1 || *n > MaxCallsPerRunLimit) {
		return fmt.Errorf("max_calls_per_run must be from 1 to %d", MaxCallsPerRunLimit)
	}
	return nil
}

// sameCall reports whether req asks for the call c that its Idempotency-Key already made: the same
// tool, named the same way, with the same arguments (compared as JSON values, not bytes).
func sameCall(req Request, c persistence.Call) bool {
	same := c.Tool != "" && (req.SkillID == uuid.Nil && c.ServerID == req.ServerID && c.Tool == req.Tool ||
		req.SkillID != uuid.Nil && c.SkillID != nil && *c.SkillID == req.SkillID)
	if !same {
		return false
	}
	a, errA := canonical(req.Arguments)
	b, errB := canonical(c.Arguments)
	return errA == nil && errB == nil && reflect.DeepEqual(a, b)
}

// hasNUL reports whether a string or an object key of the decoded JSON value v contains a NUL character,
// which PostgreSQL cannot store (a call's arguments are kept with the call).
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		return slices.ContainsFunc(v, hasNUL)
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// canonical decodes arguments for comparison (numbers by value).
func canonical(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	return v, err
}

// classify turns what the MCP client answered for call into the call's outcome. cause is the cause of
// the call context's end (context.Cause), nil while it is live: a call cancelled by an administrator
// is cancelled, one cut by shutdown interrupted, whatever the client returned.
func classify(call persistence.Call, cause error, res mcpclient.ToolResult, err error) outcome {
	if err == nil {
		shaped := mcpclient.ShapeResult(call.ServerName, res)
		r := persistence.CallResult{Content: shaped.Content, IsError: shaped.IsError, Dropped: shaped.Dropped, Truncated: shaped.Truncated}
		if !res.IsError {
			return outcome{state: persistence.CallSucceeded, class: "ok", result: r, kind: persistence.EventCallSucceeded}
		}
		note := fmt.Sprintf("[mcpfleet: server %q answered that tool %q failed]", call.ServerName, call.Tool)
		r.Content, r.Truncated = cut(note+"\n"+r.Content, r.Truncated)
		return outcome{state: persistence.CallFailed, class: "tool_error", reason: fmt.Sprintf("server %q answered that the tool failed (isError)", call.ServerName),
			result: r, kind: persistence.EventCallFailed}
	}
	switch {
	case errors.Is(cause, errCancelled):
		reason := "cancelled by an administrator while in flight: the server was told to cancel it (notifications/cancelled) and may already have acted on it; it is never re-sent"
		return outcome{state: persistence.CallCancelled, class: "cancelled", reason: reason, result: failedResult(call, "cancelled", reason), kind: persistence.EventCallCancelled}
	case errors.Is(cause, errShutdown):
		reason := "the service shut down while the call was in flight: the server was told to cancel it and may already have acted on it; it is never re-sent"
		return failed(call, "interrupted", reason)
	}
	var me *mcpclient.Error
	if errors.As(err, &me) {
		return failed(call, string(me.Class), me.Reason)
	}
	r := thisSideRefusal(persistence.Server{ServerID: call.ServerID, ModuleName: call.ServerName}, err)
	return failed(call, r.Type, r.Detail+"; the server was not asked")
}

// unsent is the outcome of a call whose context ended (cause) before it was sent.
func unsent(call persistence.Call, cause error) outcome {
	if errors.Is(cause, errShutdown) {
		return failed(call, "interrupted", "the service shut down before the call was sent: the server was not asked")
	}
	reason := "cancelled by an administrator before it was sent: the server was not asked"
	return outcome{state: persistence.CallCancelled, class: "cancelled", reason: reason, result: failedResult(call, "cancelled", reason), kind: persistence.EventCallCancelled}
}

// busy is the outcome of a call that waited wait for one of the perServer slots of its server and got
// none: not sent.
func busy(call persistence.Call, perServer int, wait time.Duration) outcome {
	reason := fmt.Sprintf("%d calls to server %q were already in flight and none ended within %s: this call was not sent, the server was not asked",
		perServer, call.ServerName, wait)
	return failed(call, "server_busy", reason)
}

func failed(call persistence.Call, class, reason string) outcome {
	return outcome{state: persistence.CallFailed, class: class, reason: reason, result: failedResult(call, class, reason), kind: persistence.EventCallFailed}
}
