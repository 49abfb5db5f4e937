package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// Gateway is what the API needs of the tool-call gateway.
type Gateway interface {
	Call(ctx context.Context, req gateway.Request) (persistence.Call, error)
	Get(ctx context.Context, tenantID, callID uuid.UUID) (persistence.Call, error)
	List(ctx context.Context, tenantID uuid.UUID, f persistence.CallFilter) ([]persistence.Call, error)
	Approve(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error)
	Deny(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error)
	Cancel(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error)
	RunEvents(ctx context.Context, tenantID uuid.UUID, runID string, after int64, limit int) ([]persistence.RunEvent, error)
	RunBudget(ctx context.Context, tenantID uuid.UUID, runID string) (gateway.Budget, error)
	Settings(ctx context.Context, tenantID uuid.UUID) (gateway.Settings, error)
	SetMaxCallsPerRun(ctx context.Context, tenantID uuid.UUID, n *int) (gateway.Settings, error)
}

var _ Gateway = (*gateway.Gateway)(nil)

// callRoutes registers the tool-call gateway's endpoints. Remote tools always require an administrator:
// every one of them, reads included, is admin only.
func (s *Server) callRoutes(v1 *gin.RouterGroup) {
	if s.deps.Gateway == nil {
		return
	}
	admins := []persistence.Role{persistence.RoleAdmin}
	v1.POST("/mcp/calls", s.handle(admins, s.createCall))
	v1.GET("/mcp/calls", s.handle(admins, s.listCalls))
	v1.GET("/mcp/calls/:call_id", s.handle(admins, s.getCall))
	v1.POST("/mcp/calls/:call_id/approve", s.handle(admins, s.approveCall))
	v1.POST("/mcp/calls/:call_id/deny", s.handle(admins, s.denyCall))
	v1.POST("/mcp/calls/:call_id/cancel", s.handle(admins, s.cancelCall))
	v1.GET("/mcp/runs/:run_id/events", s.handle(admins, s.runEvents))
	v1.GET("/mcp/settings", s.handle(admins, s.getSettings))
	v1.PUT("/mcp/settings", s.handle(admins, s.putSettings))
}

// CallBody is the body of POST /v1/mcp/calls: the run, and either skill_id or server_id and tool.
type CallBody struct {
	RunID     string          `json:"run_id"`
	SkillID   string          `json:"skill_id"`
	ServerID  string          `json:"server_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

var (
	runIDRE          = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	idempotencyKeyRE = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)
)

func validRunID(runID string) error {
	switch {
	case runID == "":
		return badRequest("missing_field", "run_id", "run_id is required: the agent run the call belongs to")
	case !runIDRE.MatchString(runID):
		return badRequest("invalid_field", "run_id", "run_id must be 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	return nil
}

func parseUUIDField(field, raw string) (uuid.UUID, error) {
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return uuid.Nil, badRequest("invalid_field", field, field+" must be a UUID")
	}
	return id, nil
}

func (s *Server) createCall(c *gin.Context, p persistence.Principal) error {
	var body CallBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	if err := validRunID(body.RunID); err != nil {
		return err
	}
	req := gateway.Request{TenantID: p.TenantID, RunID: body.RunID, Arguments: body.Arguments, RequestedBy: p.KeyID}
	var err error
	switch {
	case body.SkillID != "" && (body.ServerID != "" || body.Tool != ""):
		return badRequest("invalid_field", "skill_id", "name the tool either by skill_id or by server_id and tool, not both")
	case body.SkillID != "":
		if req.SkillID, err = parseUUIDField("skill_id", body.SkillID); err != nil {
			return err
		}
	case body.ServerID == "" && body.Tool == "":
		return badRequest("missing_field", "skill_id", "skill_id (or server_id and tool) is required")
	case body.ServerID == "":
		return badRequest("missing_field", "server_id", "server_id is required with tool")
	case body.Tool == "":
		return badRequest("missing_field", "tool", "tool is required with server_id")
	default:
		if req.ServerID, err = parseUUIDField("server_id", body.ServerID); err != nil {
			return err
		}
		if len(body.Tool) > maxToolName || !toolNameRE.MatchString(body.Tool) {
			// No other name is in the registry (registration and import hold tools to it), and a name
			// with a NUL could not even be looked up.
			return badRequest("invalid_field", "tool", fmt.Sprintf("tool must be 1 to %d letters, digits, '_', '.' or '-', as every tool name in the registry is", maxToolName))
		}
		req.Tool = body.Tool
	}
	if key := c.GetHeader("Idempotency-Key"); key != "" {
		if !idempotencyKeyRE.MatchString(key) {
			return badRequest("invalid_header", "Idempotency-Key", "Idempotency-Key must be 1 to 255 visible ASCII characters")
		}
		req.IdempotencyKey = key
	}
	call, err := s.deps.Gateway.Call(c.Request.Context(), req)
	if err != nil {
		return callError(err)
	}
	return writeCall(c, call, true)
}

// writeCall answers with a call: 200 when it has ended; 202 while it awaits approval or runs, when
// accepted is set (the answer to a request that made or resumed it), with Location naming where to read it.
func writeCall(c *gin.Context, call persistence.Call, accepted bool) error {
	farSide(c)
	status := http.StatusOK
	if accepted && !call.Finished() {
		status = http.StatusAccepted
		c.Header("Location", "/v1/mcp/calls/"+call.CallID.String())
	}
	c.JSON(status, callJSON(call))
	return nil
}

func (s *Server) getCall(c *gin.Context, p persistence.Principal) error {
	id, err := parseUUIDField("call_id", c.Param("call_id"))
	if err != nil {
		return err
	}
	call, err := s.deps.Gateway.Get(c.Request.Context(), p.TenantID, id)
	if err != nil {
		return callError(err)
	}
	return writeCall(c, call, false)
}

func (s *Server) listCalls(c *gin.Context, p persistence.Principal) error {
	f := persistence.CallFilter{RunID: c.Query("run_id"), Limit: 100}
	if v := c.Query("state"); v != "" {
		st, ok := persistence.ParseCallState(v)
		if !ok {
			return badRequest("invalid_field", "state", "state must be one of awaiting_approval, running, succeeded, failed, denied, cancelled")
		}
		f.State = st
	}
	if f.RunID != "" {
		if err := validRunID(f.RunID); err != nil {
			return err
		}
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return badRequest("invalid_field", "limit", "limit must be a number from 1 to 500")
		}
		f.Limit = n
	}
	calls, err := s.deps.Gateway.List(c.Request.Context(), p.TenantID, f)
	if err != nil {
		return callError(err)
	}
	out := make([]CallJSON, len(calls))
	for i, k := range calls {
		out[i] = callJSON(k)
	}
	farSide(c)
	c.JSON(http.StatusOK, gin.H{"calls": out})
	return nil
}

func (s *Server) approveCall(c *gin.Context, p persistence.Principal) error {
	return s.decide(c, p, s.deps.Gateway.Approve, true)
}

func (s *Server) denyCall(c *gin.Context, p persistence.Principal) error {
	return s.decide(c, p, s.deps.Gateway.Deny, false)
}

func (s *Server) cancelCall(c *gin.Context, p persistence.Principal) error {
	return s.decide(c, p, s.deps.Gateway.Cancel, false)
}

func (s *Server) decide(c *gin.Context, p persistence.Principal, op func(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error), accepted bool) error {
	id, err := parseUUIDField("call_id", c.Param("call_id"))
	if err != nil {
		return err
	}
	call, err := op(c.Request.Context(), p.TenantID, id, p.KeyID)
	if err != nil {
		return callError(err)
	}
	return writeCall(c, call, accepted)
}

func (s *Server) runEvents(c *gin.Context, p persistence.Principal) error {
	runID := c.Param("run_id")
	if err := validRunID(runID); err != nil {
		return err
	}
	var after int64
	if v := c.Query("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("invalid_field", "after", "after must be an event_id (a number of 0 or more)")
		}
		after = n
	}
	limit := 1000
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("invalid_field", "limit", "limit must be a number from 1 to 1000")
		}
		limit = n
	}
	ctx := c.Request.Context()
	events, err := s.deps.Gateway.RunEvents(ctx, p.TenantID, runID, after, limit)
	if err != nil {
		return callError(err)
	}
	budget, err := s.deps.Gateway.RunBudget(ctx, p.TenantID, runID)
	if err != nil {
		return callError(err)
	}
	out := make([]RunEventJSON, len(events))
	next := after
	for i, e := range events {
		out[i] = runEventJSON(e)
		next = e.EventID
	}
	c.JSON(http.StatusOK, gin.H{"run_id": runID, "events": out, "next_after": next,
		"budget": gin.H{"max_calls_per_run": budget.Limit, "used": budget.Used}})
	return nil
}

// SettingsBody is the body of PUT /v1/mcp/settings: max_calls_per_run from 1 to 1000, or null for the
// service's default.
type SettingsBody struct {
	MaxCallsPerRun optional[int] `json:"max_calls_per_run"`
}

func (s *Server) getSettings(c *gin.Context, p persistence.Principal) error {
	st, err := s.deps.Gateway.Settings(c.Request.Context(), p.TenantID)
	if err != nil {
		return callError(err)
	}
	c.JSON(http.StatusOK, settingsJSON(st))
	return nil
}

func (s *Server) putSettings(c *gin.Context, p persistence.Principal) error {
	var body SettingsBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	if !body.MaxCallsPerRun.Set {
		return badRequest("missing_field", "max_calls_per_run", "max_calls_per_run is required (null returns to the service's default)")
	}
	if n := body.MaxCallsPerRun.Value; n != nil && (*n < 1 || *n > gateway.MaxCallsPerRunLimit) {
		return badRequest("invalid_field", "max_calls_per_run", fmt.Sprintf("max_calls_per_run must be from 1 to %d", gateway.MaxCallsPerRunLimit))
	}
	st, err := s.deps.Gateway.SetMaxCallsPerRun(c.Request.Context(), p.TenantID, body.MaxCallsPerRun.Value)
	if err != nil {
		return callError(err)
	}
	c.JSON(http.StatusOK, settingsJSON(st))
	return nil
}

func settingsJSON(st gateway.Settings) gin.H {
	source := "default"
	if st.TenantSet {
		source = "tenant"
	}
	return gin.H{"max_calls_per_run": st.MaxCallsPerRun, "default_max_calls_per_run": st.Default, "source": source,
		"updated_at": utcOrNil(st.UpdatedAt)}
}

// CallResultJSON is a call's answer as a model reads it: text only, mcpfleet's notes first (what was
// dropped, why the call failed), at most 50,000 bytes.
type CallResultJSON struct {
	Content string `json:"content"`
	IsError bool   `json:"is_error"`
	// Dropped counts the non-text blocks dropped, by type (image, audio, resource, resource_link, other).
	Dropped   map[string]int `json:"dropped"`
	Truncated bool           `json:"truncated"`
}

// CallJSON is a call.
type CallJSON struct {
	CallID   uuid.UUID  `json:"call_id"`
	RunID    string     `json:"run_id"`
	ServerID uuid.UUID  `json:"server_id"`
	Server   string     `json:"server_name"`
	SkillID  *uuid.UUID `json:"skill_id"`
	Tool     string     `json:"tool"`
	// Arguments are shown so an approver sees what would be sent.
	Arguments json.RawMessage `json:"arguments"`
	// State is awaiting_approval, running, succeeded, failed, denied or cancelled.
	State persistence.CallState `json:"state"`
	// OutcomeClass says how the call ended: ok, tool_error, transport, timeout, auth, protocol,
	// invalid_response, cancelled, interrupted, denied, approval_expired, server_busy, or the refusal type
	// of a precondition that no longer held at approval. Null while the call has not ended.
	OutcomeClass      *string         `json:"outcome_class"`
	Reason            *string         `json:"reason"`
	Result            *CallResultJSON `json:"result"`
	LatencyMS         *int64          `json:"latency_ms"`
	IdempotencyKey    *string         `json:"idempotency_key"`
	RequestedBy       uuid.UUID       `json:"requested_by"`
	DecidedBy         *uuid.UUID      `json:"decided_by"`
	CreatedAt         time.Time       `json:"created_at"`
	ApprovalExpiresAt *time.Time      `json:"approval_expires_at"`
	DecidedAt         *time.Time      `json:"decided_at"`
	StartedAt         *time.Time      `json:"started_at"`
	FinishedAt        *time.Time      `json:"finished_at"`
	// TraceID is the trace of the request that made the call; null when it was not traced.
	TraceID *string `json:"trace_id"`
}

func callJSON(k persistence.Call) CallJSON {
	out := CallJSON{
		CallID: k.CallID, RunID: k.RunID, ServerID: k.ServerID, Server: k.ServerName, SkillID: k.SkillID, Tool: k.Tool,
		Arguments: k.Arguments, State: k.State, OutcomeClass: strOrNil(k.OutcomeClass), Reason: strOrNil(k.Reason),
		LatencyMS: k.LatencyMS, IdempotencyKey: strOrNil(k.IdempotencyKey), RequestedBy: k.RequestedBy, DecidedBy: k.DecidedBy,
		CreatedAt: k.CreatedAt.UTC(), ApprovalExpiresAt: utcOrNil(k.ApprovalExpiresAt), DecidedAt: utcOrNil(k.DecidedAt),
		StartedAt: utcOrNil(k.StartedAt), FinishedAt: utcOrNil(k.FinishedAt), TraceID: strOrNil(k.TraceID),
	}
	if r := k.Result; r != nil {
		d := r.Dropped
		if d == nil {
			d = map[string]int{}
		}
		out.Result = &CallResultJSON{Content: r.Content, IsError: r.IsError, Dropped: d, Truncated: r.Truncated}
	}
	return out
}

// RunEventJSON is one event of a run.
type RunEventJSON struct {
	EventID      int64      `json:"event_id"`
	RunID        string     `json:"run_id"`
	Kind         string     `json:"kind"`
	CallID       *uuid.UUID `json:"call_id"`
	ServerID     *uuid.UUID `json:"server_id"`
	Tool         *string    `json:"tool"`
	State        *string    `json:"state"`
	OutcomeClass *string    `json:"outcome_class"`
	LatencyMS    *int64     `json:"latency_ms"`
	Detail       *string    `json:"detail"`
	At           time.Time  `json:"at"`
}

func runEventJSON(e persistence.RunEvent) RunEventJSON {
	return RunEventJSON{EventID: e.EventID, RunID: e.RunID, Kind: e.Kind, CallID: e.CallID, ServerID: e.ServerID,
		Tool: strOrNil(e.Tool), State: strOrNil(string(e.State)), OutcomeClass: strOrNil(e.OutcomeClass), LatencyMS: e.LatencyMS,
		Detail: strOrNil(e.Detail), At: e.At.UTC()}
}

// refusalStatus is the HTTP status of each refusal type.
var refusalStatus = map[string]int{
	gateway.RefusedSkillNotFound:        http.StatusNotFound,
	gateway.RefusedSkillUnavailable:     http.StatusServiceUnavailable,
	gateway.RefusedSecretKeyMissing:     http.StatusServiceUnavailable,
	gateway.RefusedInvalidArguments:     http.StatusBadRequest,
	gateway.RefusedSkillDisabled:        http.StatusConflict,
	gateway.RefusedServerDisabled:       http.StatusConflict,
	gateway.RefusedNoDataClass:          http.StatusConflict,
	gateway.RefusedNoEndpoint:           http.StatusConflict,
	gateway.RefusedCredentialUnreadable: http.StatusConflict,
	gateway.RefusedCredentialMissing:    http.StatusConflict,
	gateway.RefusedAuthUnsupported:      http.StatusConflict,
	gateway.RefusedEndpointRefused:      http.StatusConflict,
	gateway.RefusedSchemaUnsupported:    http.StatusConflict,
	gateway.RefusedBudgetExhausted:      http.StatusConflict,
}

// callError maps an error of the gateway to its problem.
func callError(err error) error {
	var ref *gateway.Refusal
	var se *gateway.StateError
	switch {
	case errors.As(err, &ref):
		status, ok := refusalStatus[ref.Type]
		if !ok {
			status = http.StatusConflict
		}
		p := problem(status, ref.Type, ref.Detail)
		p.Extra = map[string]any{"run_id": ref.RunID, "server_asked": false, "event_id": ref.EventID,
			"server_id": ref.ServerID, "skill_id": ref.SkillID, "tool": strOrNil(ref.Tool)}
		switch ref.Type {
		case gateway.RefusedInvalidArguments:
			p.Field = "arguments"
			if ref.Field != "" {
				p.Field += "." + ref.Field
			}
			p.Extra["argument"] = ref.Field
		case gateway.RefusedSkillUnavailable:
			p.Extra["since"] = utcOrNil(ref.Since)
			if ref.RetryAfter > 0 {
				p.RetryAfter = ref.RetryAfter
				p.Extra["retry_after"] = int64((ref.RetryAfter + time.Second - 1) / time.Second)
			} else {
				p.Extra["retry_after"] = nil
			}
		case gateway.RefusedBudgetExhausted:
			p.Extra["max_calls_per_run"], p.Extra["used"] = ref.Limit, ref.Used
		}
		return p
	case errors.As(err, &se):
		slug, detail := "call_not_awaiting_approval", fmt.Sprintf("the call is %s, not awaiting approval", se.Call.State)
		if se.Op == "cancel" {
			slug, detail = "call_not_cancellable", fmt.Sprintf("the call is %s: only a call awaiting approval or running here can be cancelled", se.Call.State)
		}
		p := problem(http.StatusConflict, slug, detail)
		p.Extra = map[string]any{"call_id": se.Call.CallID, "state": se.Call.State}
		return p
	case errors.Is(err, gateway.ErrSelfApproval):
		return problem(http.StatusForbidden, "self_approval", "a call cannot be approved with the key that requested it: "+
			"another administrator's key must approve it (you may deny or cancel your own call)")
	case errors.Is(err, gateway.ErrApprovalExpired):
		return problem(http.StatusConflict, "approval_expired", "the call's approval window closed before it was approved: it failed and was never sent")
	case errors.Is(err, gateway.ErrKeyReused):
		return badRequest("idempotency_key_reused", "Idempotency-Key", "this Idempotency-Key was already used in this run for a different call: use a new key for a new call")
	case errors.Is(err, gateway.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no such call in this tenant")
	case errors.Is(err, gateway.ErrStopping):
		return unavailable("the service is shutting down: retry against the next instance", 2*time.Second, err)
	case errors.Is(err, gateway.ErrUnavailable):
		return unavailable("the call could not be recorded right now, so nothing was sent: retry", 2*time.Second, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return unavailable("the request ended before the call did: read it with GET /v1/mcp/calls/{call_id}", time.Second, err)
	}
	return storeError(err)
}
