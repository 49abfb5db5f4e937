package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// Remote is what the API needs of the MCP client side: configured servers, connection tests, imports
// and skill switches.
type Remote interface {
	CheckEndpoint(ctx context.Context, raw string) (string, error)
	Configure(ctx context.Context, tenantID uuid.UUID, in remote.ConfigureInput) (remote.Server, error)
	Update(ctx context.Context, tenantID, serverID uuid.UUID, in remote.PatchInput) (remote.Server, error)
	Describe(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]remote.Description, error)
	TestConnection(ctx context.Context, tenantID, serverID uuid.UUID) (remote.ConnectionReport, error)
	Import(ctx context.Context, tenantID, serverID, by uuid.UUID) (remote.ImportReport, error)
	SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool) (remote.SkillState, error)
	Decide(ctx context.Context, tenantID, serverID, changeID, by uuid.UUID, confirm bool) (remote.Server, persistence.ConfigChangeRecord, error)
}

var _ Remote = (*remote.Service)(nil)

// configRoutes registers the configured-server endpoints: configuring, testing and importing reach an
// external party on an administrator's behalf and are admin only; switching skills is for operators too.
func (s *Server) configRoutes(v1 *gin.RouterGroup) {
	admins := []persistence.Role{persistence.RoleAdmin}
	ops := []persistence.Role{persistence.RoleOperator, persistence.RoleAdmin}
	v1.POST("/mcp/servers", s.handle(admins, s.configureServer))
	v1.PATCH("/mcp/servers/:server_id", s.handle(admins, s.patchServer))
	v1.POST("/mcp/servers/:server_id/test-connection", s.handle(admins, s.testConnection))
	v1.POST("/mcp/servers/:server_id/import", s.handle(admins, s.importCatalogue))
	v1.POST("/mcp/skills/:skill_id/enable", s.handle(ops, s.enableSkill))
	v1.POST("/mcp/skills/:skill_id/disable", s.handle(ops, s.disableSkill))
	v1.GET("/mcp/skills/:skill_id/changes", s.handle(ops, s.listToolChanges))
	v1.GET("/mcp/servers/:server_id/config-changes", s.handle(ops, s.listConfigChanges))
	v1.POST("/mcp/servers/:server_id/config-changes/:change_id/confirm", s.handle(admins, s.confirmConfigChange))
	v1.POST("/mcp/servers/:server_id/config-changes/:change_id/cancel", s.handle(admins, s.cancelConfigChange))
}

// AuthBody is how a configured server authenticates the client.
type AuthBody struct {
	Mode       string  `json:"mode"`
	HeaderName string  `json:"header_name"`
	Credential *string `json:"credential"`
}

func (a *AuthBody) input() *remote.AuthInput {
	if a == nil {
		return nil
	}
	in := &remote.AuthInput{Mode: a.Mode, HeaderName: a.HeaderName}
	if a.Credential != nil {
		in.Credential, in.CredentialSet = *a.Credential, true
	}
	return in
}

// ConfigureBody is the body of POST /v1/mcp/servers.
type ConfigureBody struct {
	ModuleName       string    `json:"module_name"`
	Version          string    `json:"version"`
	Endpoint         string    `json:"endpoint"`
	Auth             *AuthBody `json:"auth"`
	DataClass        *string   `json:"data_class"`
	RequiresApproval *bool     `json:"requires_approval"`
	Enabled          *bool     `json:"enabled"`
	Liveness         string    `json:"liveness"`
}

// PatchBody is the body of PATCH /v1/mcp/servers/{server_id}: absent fields are left as they are; auth
// null removes authentication, data_class null removes the data class. In auth, an absent credential
// keeps the stored one.
type PatchBody struct {
	ModuleName       *string            `json:"module_name"`
	Version          *string            `json:"version"`
	Endpoint         *string            `json:"endpoint"`
	Auth             optional[AuthBody] `json:"auth"`
	DataClass        optional[string]   `json:"data_class"`
	RequiresApproval *bool              `json:"requires_approval"`
	Enabled          *bool              `json:"enabled"`
	Liveness         *string            `json:"liveness"`
}

// optional is a JSON member that distinguishes absent (Set false), null (Set, Value nil) and a value.
type optional[T any] struct {
	Set   bool
	Value *T
}

// UnmarshalJSON implements json.Unmarshaler, strictly (unknown fields are refused, as everywhere).
func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v T
	if err := dec.Decode(&v); err != nil {
		return err
	}
	o.Value = &v
	return nil
}

func validModuleName(name string) error {
	if name == "" {
		return badRequest("missing_field", "module_name", "module_name is required")
	}
	if err := persistence.ValidModuleName(name); err != nil {
		return badRequest("invalid_field", "module_name", "module_name: "+err.Error())
	}
	return nil
}

func validVersion(v string) error {
	switch {
	case v == "":
		return nil
	case len(v) > maxVersion:
		return badRequest("invalid_field", "version", fmt.Sprintf("version must be at most %d characters", maxVersion))
	case !versionRE.MatchString(v):
		return badRequest("invalid_field", "version", "version may contain only letters, digits, '.', '+', '_' and '-'")
	}
	return nil
}

func (s *Server) configureServer(c *gin.Context, p persistence.Principal) error {
	var body ConfigureBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	if err := validModuleName(body.ModuleName); err != nil {
		return err
	}
	if err := validVersion(body.Version); err != nil {
		return err
	}
	if body.Endpoint == "" {
		return badRequest("missing_field", "endpoint", "endpoint is required: the server's Streamable HTTP URL")
	}
	in := remote.ConfigureInput{
		ModuleName: body.ModuleName, Version: body.Version, Endpoint: body.Endpoint, Auth: body.Auth.input(),
		RequiresApproval: body.RequiresApproval, Enabled: body.Enabled, Liveness: body.Liveness, By: p.KeyID,
	}
	if body.DataClass != nil {
		in.DataClass = *body.DataClass
		if in.DataClass == "" {
			return badRequest("invalid_field", "data_class", "data_class must not be empty: omit it (or send null) to declare none")
		}
	}
	srv, err := s.deps.Remote.Configure(c.Request.Context(), p.TenantID, in)
	if err != nil {
		return remoteError(err)
	}
	c.JSON(http.StatusCreated, serverDetailJSON(srv.Server, srv.Description))
	return nil
}

func (s *Server) patchServer(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	var body PatchBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	if body.ModuleName != nil {
		return badRequest("immutable_field", "module_name", "module_name cannot be changed: it is the server's identity in its tenant")
	}
	if body.Version != nil {
		return badRequest("immutable_field", "version", "version is the module's to report at registration; it cannot be changed here")
	}
	in := remote.PatchInput{
		Endpoint: body.Endpoint, AuthSet: body.Auth.Set, Auth: body.Auth.Value.input(),
		DataClassSet: body.DataClass.Set, RequiresApproval: body.RequiresApproval, Enabled: body.Enabled,
		Liveness: body.Liveness,
	}
	if body.DataClass.Value != nil {
		in.DataClass = *body.DataClass.Value
		if in.DataClass == "" {
			return badRequest("invalid_field", "data_class", "data_class must not be empty: send null to remove it")
		}
	}
	if body.Endpoint != nil && *body.Endpoint == "" {
		return badRequest("invalid_field", "endpoint", "endpoint must not be empty")
	}
	in.By = p.KeyID
	srv, err := s.deps.Remote.Update(c.Request.Context(), p.TenantID, id, in)
	if err != nil {
		return remoteError(err)
	}
	if srv.Pending != nil {
		// Switching approval off waits for another administrator (remote.HoldApprovalOff); the rest applied.
		c.JSON(http.StatusAccepted, PatchAcceptedJSON{ServerDetailJSON: serverDetailJSON(srv.Server, srv.Description),
			PendingChange: configChangeJSON(*srv.Pending)})
		return nil
	}
	c.JSON(http.StatusOK, serverDetailJSON(srv.Server, srv.Description))
	return nil
}

// PatchAcceptedJSON is the 202 answer of a PATCH that switched requires_approval off: the server as the
// request left it (everything else applied, requires_approval still true) and the pending change another
// administrator must confirm.
type PatchAcceptedJSON struct {
	ServerDetailJSON
	PendingChange ConfigChangeJSON `json:"pending_change"`
}

// ConfigChangeJSON is one recorded configuration change of a server.
type ConfigChangeJSON struct {
	ChangeID uuid.UUID `json:"change_id"`
	// Seq is the change's number in the tenant's configuration changes: pass the last one as after for the
	// next page.
	Seq        int64                      `json:"seq"`
	ServerID   uuid.UUID                  `json:"server_id"`
	ModuleName string                     `json:"module_name"`
	Changes    []persistence.ConfigChange `json:"changes"`
	// State is applied, pending, confirmed or cancelled.
	State string `json:"state"`
	// RequestedBy and DecidedBy are API key ids, or "cli" for the host command line.
	RequestedBy *string    `json:"requested_by"`
	RequestedAt time.Time  `json:"requested_at"`
	TraceID     *string    `json:"trace_id"`
	DecidedBy   *string    `json:"decided_by"`
	DecidedAt   *time.Time `json:"decided_at"`
}

// actorJSON is who made or decided a change: a key id, "cli", or null for none known.
func actorJSON(a persistence.Actor) *string {
	switch {
	case a.Via == persistence.ViaCLI:
		s := persistence.ViaCLI
		return &s
	case a.Key == uuid.Nil:
		return nil
	}
	s := a.Key.String()
	return &s
}

func configChangeJSON(ch persistence.ConfigChangeRecord) ConfigChangeJSON {
	out := ConfigChangeJSON{ChangeID: ch.ChangeID, Seq: ch.Seq, ServerID: ch.ServerID, ModuleName: ch.ModuleName,
		Changes: ch.Changes, State: string(ch.State), RequestedBy: actorJSON(ch.RequestedBy), RequestedAt: ch.RequestedAt.UTC(),
		TraceID: strOrNil(ch.TraceID), DecidedAt: utcOrNil(ch.DecidedAt)}
	if out.Changes == nil {
		out.Changes = []persistence.ConfigChange{}
	}
	if ch.DecidedBy != nil {
		out.DecidedBy = actorJSON(*ch.DecidedBy)
	}
	return out
}

// listConfigChanges answers GET /v1/mcp/servers/{server_id}/config-changes?after=&limit= for operators and
// admins: the server's recorded configuration changes, oldest first, limit (1 to 1000, default 100) after
// the seq after. Module keys are refused (403), as for tool changes: who changed what is the operators'.
func (s *Server) listConfigChanges(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	after, limit, err := pageParams(c)
	if err != nil {
		return err
	}
	changes, err := s.store.ConfigChangeLog(c.Request.Context(), p.TenantID, id, after, limit)
	if errors.Is(err, persistence.ErrNotFound) {
		return problem(http.StatusNotFound, "not_found", "no such server in this tenant")
	}
	if err != nil {
		return storeError(err)
	}
	out := make([]ConfigChangeJSON, len(changes))
	for i, ch := range changes {
		out[i] = configChangeJSON(ch)
	}
	c.JSON(http.StatusOK, gin.H{"changes": out})
	return nil
}

func (s *Server) confirmConfigChange(c *gin.Context, p persistence.Principal) error {
	return s.decideConfigChange(c, p, true)
}
func (s *Server) cancelConfigChange(c *gin.Context, p persistence.Principal) error {
	return s.decideConfigChange(c, p, false)
}

// decideConfigChange answers POST .../config-changes/{change_id}/confirm and /cancel (admins): the change
// as decided, with the server as it leaves it. The key that requested a change cannot confirm it (403
// self_confirmation); it may cancel it.
func (s *Server) decideConfigChange(c *gin.Context, p persistence.Principal, confirm bool) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	changeID, err := parseUUIDField("change_id", c.Param("change_id"))
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	srv, ch, err := s.deps.Remote.Decide(c.Request.Context(), p.TenantID, id, changeID, p.KeyID, confirm)
	switch {
	case errors.Is(err, persistence.ErrSelfConfirmation):
		return problem(http.StatusForbidden, "self_confirmation", "a configuration change cannot be confirmed with the key that requested it: "+
			"another administrator's key must confirm it, or the host command line (mcpfleet server approval) make it (you may cancel your own change)")
	case errors.Is(err, persistence.ErrChangeNotPending):
		return problem(http.StatusConflict, "change_not_pending", "the configuration change is not pending: it was applied when made, or confirmed or cancelled already")
	case errors.Is(err, persistence.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no such configuration change of this server in this tenant")
	case err != nil:
		return remoteError(err)
	}
	c.JSON(http.StatusOK, gin.H{"change": configChangeJSON(ch), "server": serverDetailJSON(srv.Server, srv.Description)})
	return nil
}

// pageParams reads ?after= (a sequence number, default 0) and ?limit= (1 to 1000, default 100).
func pageParams(c *gin.Context) (int64, int, error) {
	after, limit := int64(0), 100
	if v := c.Query("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, badRequest("invalid_field", "after", "after must be a non-negative sequence number")
		}
		after = n
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, 0, badRequest("invalid_field", "limit", "limit must be a whole number from 1 to 1000")
		}
		limit = n
	}
	return after, limit, nil
}

// noBody refuses a body on a request that takes none, as decodeJSON refuses unknown fields: an empty body or
// an empty JSON object ({}) is accepted, anything else is a problem naming the first unknown field.
func noBody(c *gin.Context) error {
	r := c.Request
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	var none struct{}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return problem(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		}
		return badRequest("invalid_json", "", "the body could not be read")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return decodeBytes(body, &none)
}

func (s *Server) testConnection(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	rep, err := s.deps.Remote.TestConnection(c.Request.Context(), p.TenantID, id)
	if err != nil {
		return remoteError(err)
	}
	farSide(c)
	if !rep.Reachable {
		c.JSON(http.StatusOK, gin.H{"reachable": false, "failure_class": rep.FailureClass, "reason": rep.Reason})
		return nil
	}
	c.JSON(http.StatusOK, gin.H{
		"reachable": true, "latency_ms": rep.LatencyMS, "protocol_version": rep.ProtocolVersion,
		"server_info": rep.ServerInfo, "negotiation_path": rep.NegotiationPath, "last_contact": rep.LastContact.UTC(),
		"transport": remote.Transport,
	})
	return nil
}

// SkippedJSON is a tool an import skipped.
type SkippedJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func (s *Server) importCatalogue(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	rep, err := s.deps.Remote.Import(c.Request.Context(), p.TenantID, id, p.KeyID)
	if err != nil {
		return remoteError(err)
	}
	skipped := make([]SkippedJSON, len(rep.Skipped))
	for i, k := range rep.Skipped {
		skipped[i] = SkippedJSON{Name: k.Name, Reason: k.Reason}
	}
	out := gin.H{
		"import_status": rep.ImportStatus, "tool_count": rep.ToolCount, "added": rep.Added, "kept": rep.Kept,
		"orphaned": rep.Orphaned, "changed": rep.Changed, "disabled": rep.Disabled, "skipped": skipped, "last_imported": rep.LastImported.UTC(),
		"catalogue": catalogueJSON(rep.CatalogueTTL, rep.CatalogueFreshUntil),
	}
	if rep.ImportStatus == persistence.ImportFailed {
		out["import_error"], out["failure_class"] = rep.ImportError, rep.FailureClass
	} else {
		out["last_contact"], out["last_latency_ms"] = rep.LastContact.UTC(), rep.LastContactLatencyMS
	}
	farSide(c)
	c.JSON(http.StatusOK, out)
	return nil
}

// farSide marks an answer that carries text the far side wrote: it is JSON (with <, > and & escaped),
// never to be sniffed as anything else.
func farSide(c *gin.Context) {
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Cache-Control", "no-store")
}

func (s *Server) enableSkill(c *gin.Context, p persistence.Principal) error {
	return s.setSkill(c, p, true)
}
func (s *Server) disableSkill(c *gin.Context, p persistence.Principal) error {
	return s.setSkill(c, p, false)
}

func (s *Server) setSkill(c *gin.Context, p persistence.Principal, enabled bool) error {
	raw := c.Param("skill_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return badRequest("invalid_field", "skill_id", "skill_id must be a UUID")
	}
	k, err := s.deps.Remote.SetSkillEnabled(c.Request.Context(), p.TenantID, id, enabled)
	if errors.Is(err, persistence.ErrNotFound) {
		return problem(http.StatusNotFound, "not_found", "no such skill in this tenant")
	}
	if err != nil {
		return storeError(err)
	}
	c.JSON(http.StatusOK, skillJSON(k))
	return nil
}

// ToolChangeJSON is one change of a tool as GET /v1/mcp/skills/{skill_id}/changes shows it.
type ToolChangeJSON struct {
	ChangeID uuid.UUID `json:"change_id"`
	// Seq is the change's number in the tenant's tool changes: pass the last one as after for the next page.
	Seq      int64     `json:"seq"`
	SkillID  uuid.UUID `json:"skill_id"`
	ServerID uuid.UUID `json:"server_id"`
	Name     string    `json:"name"`
	// Source is advertisement (a registration) or import.
	Source string `json:"source"`
	// Cause is definition (old and new definition differ) or endpoint (a registration moved the
	// server: old_endpoint, null for none, to new_endpoint).
	Cause         string          `json:"cause"`
	OldDefinition json.RawMessage `json:"old_definition"`
	NewDefinition json.RawMessage `json:"new_definition"`
	OldEndpoint   *string         `json:"old_endpoint"`
	NewEndpoint   *string         `json:"new_endpoint"`
	// WasEnabled says the change disabled the tool (it was enabled).
	WasEnabled bool       `json:"was_enabled"`
	ChangedBy  *uuid.UUID `json:"changed_by"`
	TraceID    *string    `json:"trace_id"`
	ChangedAt  time.Time  `json:"changed_at"`
}

// listToolChanges answers GET /v1/mcp/skills/{skill_id}/changes?after=&limit= for operators and admins:
// the skill's recorded changes, oldest first, limit (1 to 1000, default 100) after the seq after. The
// history outlives the operator's approval (enabling the tool clears only the skill's pending change).
// Module keys are refused (403): a change says which key made it and where a server moved, which is the
// operators' to judge, not another module's to read.
func (s *Server) listToolChanges(c *gin.Context, p persistence.Principal) error {
	raw := c.Param("skill_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return badRequest("invalid_field", "skill_id", "skill_id must be a UUID")
	}
	after, limit, err := pageParams(c)
	if err != nil {
		return err
	}
	changes, err := s.store.ToolChanges(c.Request.Context(), p.TenantID, id, after, limit)
	if errors.Is(err, persistence.ErrNotFound) {
		return problem(http.StatusNotFound, "not_found", "no such skill in this tenant")
	}
	if err != nil {
		return storeError(err)
	}
	out := make([]ToolChangeJSON, len(changes))
	for i, ch := range changes {
		out[i] = ToolChangeJSON{ChangeID: ch.ChangeID, Seq: ch.Seq, SkillID: ch.SkillID, ServerID: ch.ServerID, Name: ch.Name,
			Source: ch.Source, Cause: ch.Cause, OldDefinition: ch.OldDefinition, NewDefinition: ch.NewDefinition,
			OldEndpoint: strOrNil(ch.OldEndpoint), NewEndpoint: strOrNil(ch.NewEndpoint), WasEnabled: ch.WasEnabled,
			ChangedBy: ch.ChangedBy, TraceID: strOrNil(ch.TraceID), ChangedAt: ch.ChangedAt.UTC()}
	}
	c.JSON(http.StatusOK, gin.H{"changes": out})
	return nil
}

func skillJSON(k remote.SkillState) SkillJSON {
	return SkillJSON{SkillID: k.Skill.SkillID, ServerID: k.Skill.ServerID, Name: k.Skill.Name, Description: k.Skill.Description,
		InputSchema: k.Skill.InputSchema, Enabled: k.Skill.Enabled, Available: k.Skill.Available, Orphaned: k.Skill.OrphanedAt != nil,
		OrphanedAt: k.Skill.OrphanedAt, UpdatedAt: k.Skill.UpdatedAt.UTC(), ServerEnabled: k.ServerEnabled, Callable: k.Callable(),
		Annotations: nullIfEmpty(k.Skill.Annotations), ChangedAt: utcOrNil(k.Skill.ChangedAt),
		PreviousDefinition: nullIfEmpty(k.Skill.PreviousDefinition)}
}

// nullIfEmpty makes an absent JSON value an explicit null.
func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// serverEnabled returns whether serverID of tenantID is enabled (true for a server without
// configuration).
func (s *Server) serverEnabled(ctx context.Context, tenantID, serverID uuid.UUID) (bool, error) {
	if s.deps.Remote == nil {
		return true, nil
	}
	d, err := s.deps.Remote.Describe(ctx, tenantID, []uuid.UUID{serverID})
	if err != nil {
		return false, err
	}
	desc, ok := d[serverID]
	if !ok {
		return false, persistence.ErrNotFound
	}
	return desc.Config.Enabled, nil
}

// AuthJSON is the authentication of a server as configured — never resolved, never the credential.
type AuthJSON struct {
	// Mode is "none", "bearer" or "header", or a stored value this client does not offer, verbatim
	// (then Supported is false: the server cannot be reached until it is fixed).
	Mode                 string  `json:"mode"`
	HeaderName           *string `json:"header_name"`
	Supported            bool    `json:"supported"`
	CredentialConfigured bool    `json:"credential_configured"`
}

// CatalogueJSON is the freshness of a server's imported catalogue, from its cache hint (ttlMs).
type CatalogueJSON struct {
	TTLMS      *int64     `json:"ttl_ms"`
	FreshUntil *time.Time `json:"fresh_until"`
	Fresh      bool       `json:"fresh"`
}

func catalogueJSON(ttl time.Duration, until *time.Time) CatalogueJSON {
	var out CatalogueJSON
	if ttl > 0 {
		ms := ttl.Milliseconds()
		out.TTLMS = &ms
	}
	if until != nil {
		u := until.UTC()
		out.FreshUntil, out.Fresh = &u, time.Now().Before(u)
	}
	return out
}

// ProbeJSON is the outcome of the last probe of a probe server since the service started (held in memory,
// never stored).
type ProbeJSON struct {
	At           time.Time `json:"at"`
	Reachable    bool      `json:"reachable"`
	LatencyMS    *int64    `json:"latency_ms,omitempty"`
	FailureClass string    `json:"failure_class,omitempty"`
	Reason       string    `json:"reason,omitempty"`
}

// ServerDetailJSON is the server object with what an operator needs to judge it: the mcp_servers
// fields, then its configuration and the evidence behind its status.
type ServerDetailJSON struct {
	ServerJSON
	// Endpoint is the server's Streamable HTTP URL (null when none is known).
	Endpoint *string `json:"endpoint"`
	// Transport is stated, not stored: Streamable HTTP is the only transport this client speaks.
	Transport string   `json:"transport"`
	Auth      AuthJSON `json:"auth"`
	// Enabled: a disabled server's skills are not callable, whatever their own flags.
	Enabled  bool   `json:"enabled"`
	Liveness string `json:"liveness"`
	// The evidence behind status, beside last_heartbeat_at: the last completed round trip with the
	// server (connection test, import, probe) and its latency, and the last probe.
	LastContact   *time.Time `json:"last_contact"`
	LastLatencyMS *int64     `json:"last_latency_ms"`
	LastProbe     *ProbeJSON `json:"last_probe"`
	// DataClass is null when the server declares none: it supplies nothing (import is refused).
	DataClass        *string       `json:"data_class"`
	RequiresApproval bool          `json:"requires_approval"`
	ToolCount        int           `json:"tool_count"`
	ImportStatus     string        `json:"import_status"`
	ImportError      *string       `json:"import_error"`
	LastImported     *time.Time    `json:"last_imported"`
	Catalogue        CatalogueJSON `json:"catalogue"`
	// ConfigUpdatedAt is the last operator edit of the configuration (null: never edited).
	ConfigUpdatedAt *time.Time `json:"config_updated_at"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func serverDetailJSON(srv persistence.Server, d remote.Description) ServerDetailJSON {
	k := d.Config
	auth := AuthJSON{Mode: k.AuthMode, HeaderName: strOrNil(k.AuthHeaderName), CredentialConfigured: k.Credential != nil}
	switch k.AuthMode {
	case persistence.AuthModeNone:
		auth.Mode, auth.Supported = "none", true
	case persistence.AuthModeBearer, persistence.AuthModeHeader:
		auth.Supported = true
	}
	sj := serverJSON(srv)
	if k.Origin != "" {
		sj.Origin, sj.CatalogueSource = k.Origin, k.Origin.CatalogueSource()
	}
	out := ServerDetailJSON{
		ServerJSON: sj, Endpoint: strOrNil(k.Endpoint), Transport: remote.Transport, Auth: auth,
		Enabled: k.Enabled, Liveness: k.Liveness, LastContact: utcOrNil(k.LastContact), LastLatencyMS: k.LastLatencyMS,
		DataClass: strOrNil(k.DataClass), RequiresApproval: k.RequiresApproval, ToolCount: k.ToolCount,
		ImportStatus: k.ImportStatus, ImportError: strOrNil(k.ImportError), LastImported: utcOrNil(k.LastImported),
		Catalogue: catalogueJSON(k.CatalogueTTL, k.CatalogueFreshUntil), ConfigUpdatedAt: utcOrNil(k.UpdatedAt),
	}
	if pr := d.LastProbe; pr != nil {
		pj := &ProbeJSON{At: pr.At.UTC(), Reachable: pr.Reachable, FailureClass: string(pr.FailureClass), Reason: pr.Reason}
		if pr.Reachable {
			ms := pr.LatencyMS
			pj.LatencyMS = &ms
		}
		out.LastProbe = pj
	}
	return out
}

// Module keys read these in place of a failed probe's reason and a failed import's error: those say
// what a host resolved to and which address refused a connection (the network as this service sees
// it), which is the operators' and administrators' to know (the same rule as endpoint_refused).
const (
	withheldProbeReason = "the probe failed: the detail is shown to operators and administrators"
	withheldImportError = "the import failed: the detail is shown to operators and administrators"
)

// forModuleKey withholds from d what a module key is not told: the reason of its last probe and its
// import error are replaced by generic phrases (their presence, failure_class and import_status stay), and
// an administrator's server shows no endpoint (null): where an administrator's server lives is the
// administrators' to know, and a module never needs it (a module's own endpoint, given at registration,
// stays visible).
func (d *ServerDetailJSON) forModuleKey() {
	if d.Origin == persistence.OriginAdmin {
		d.Endpoint = nil
	}
	if d.LastProbe != nil && d.LastProbe.Reason != "" {
		pj := *d.LastProbe
		pj.Reason = withheldProbeReason
		d.LastProbe = &pj
	}
	if d.ImportError != nil {
		msg := withheldImportError
		d.ImportError = &msg
	}
}

// serverDetails describes servers of p's tenant for the read side, as p may read them (forModuleKey).
func (s *Server) serverDetails(ctx context.Context, p persistence.Principal, servers []persistence.Server) ([]ServerDetailJSON, error) {
	tenantID := p.TenantID
	descs := map[uuid.UUID]remote.Description{}
	if s.deps.Remote != nil && len(servers) > 0 {
		ids := make([]uuid.UUID, len(servers))
		for i, srv := range servers {
			ids[i] = srv.ServerID
		}
		var err error
		if descs, err = s.deps.Remote.Describe(ctx, tenantID, ids); err != nil {
			return nil, err
		}
	}
	out := make([]ServerDetailJSON, len(servers))
	for i, srv := range servers {
		d, ok := descs[srv.ServerID]
		if !ok {
			d = remote.Description{Config: persistence.DefaultServerConfig(srv.TenantID, srv.ServerID)}
		}
		out[i] = serverDetailJSON(srv, d)
		if p.Role == persistence.RoleModule {
			out[i].forModuleKey()
		}
	}
	return out, nil
}

// writeServer answers with one server's detail.
func (s *Server) writeServer(c *gin.Context, p persistence.Principal, srv persistence.Server) error {
	out, err := s.serverDetails(c.Request.Context(), p, []persistence.Server{srv})
	if err != nil {
		return storeError(err)
	}
	c.JSON(http.StatusOK, out[0])
	return nil
}

// checkEndpoint checks an endpoint given at registration by key p for module.
//
// A module key is not told what a host is or resolves to from where this service stands (an address
// refusal, or a name that does not resolve): its problem says only that the endpoint was refused for
// its address, and the specific reason goes to the log under the request's trace id. An administrator
// configures the endpoints and the allow-list and keeps the specific detail. Refusals of how the URL is
// written (scheme, user name, port) stay specific for everyone.
func (s *Server) checkEndpoint(ctx context.Context, p persistence.Principal, module, raw string) (string, error) {
	if s.deps.Remote == nil {
		return "", badRequest("invalid_field", "endpoint", "this service does not take endpoints")
	}
	u, err := s.deps.Remote.CheckEndpoint(ctx, raw)
	if err == nil {
		return u, nil
	}
	var ee *mcpclient.EndpointError
	if p.Role != persistence.RoleAdmin && errors.As(err, &ee) && ee.Addressed() {
		s.log.InfoContext(ctx, "registration endpoint refused", "tenant_id", p.TenantID, "key_id", p.KeyID, "module_name", module, "reason", ee.Error())
		return "", badRequest("endpoint_refused", "endpoint", "the endpoint's host is not a public address, does not resolve, or resolves to an address that is not public, and it is not on this service's allow-list: ask an administrator, who can find the reason in the log under this trace_id")
	}
	return "", remoteError(err)
}

// remoteError maps an error of the MCP client side to its problem.
func remoteError(err error) error {
	var inv *remote.InvalidError
	var ee *mcpclient.EndpointError
	var ex *actors.ExistsError
	var au *remote.AuthUnsupportedError
	var tm *remote.TooManyToolsError
	var tl *remote.CatalogueTooLargeError
	switch {
	case errors.As(err, &inv):
		return badRequest("invalid_field", inv.Field, inv.Detail)
	case errors.As(err, &ee):
		return badRequest("endpoint_refused", "endpoint", ee.Error()+" (MCPFLEET_ENDPOINT_ALLOWLIST lists the exceptions)")
	case errors.Is(err, mcpclient.ErrEndpointRefused):
		return badRequest("endpoint_refused", "endpoint", "the endpoint is refused by the endpoint policy")
	case errors.As(err, &ex):
		p := problem(http.StatusConflict, "server_exists", "a server with this module_name already exists in this tenant: change it with PATCH /v1/mcp/servers/"+ex.ServerID.String())
		p.Extra = map[string]any{"server_id": ex.ServerID}
		return p
	case errors.Is(err, actors.ErrModuleExists):
		return problem(http.StatusConflict, "server_exists", "a server with this module_name already exists in this tenant")
	case errors.Is(err, remote.ErrNoDataClass):
		return problem(http.StatusConflict, "data_class_required", "the server declares no data class, so it supplies nothing: set data_class (PATCH) before importing its catalogue")
	case errors.Is(err, persistence.ErrCatalogueSource):
		return problem(http.StatusConflict, "catalogue_from_advertisement", "this server registered itself: its catalogue is its capability advertisement, which a registration updates; only an administrator's server is imported")
	case errors.As(err, &tm):
		return problem(http.StatusConflict, "catalogue_too_large", tm.Error()+" (MCPFLEET_MAX_TOOLS_PER_SERVER): nothing was written")
	case errors.As(err, &tl):
		return problem(http.StatusConflict, "catalogue_too_large", tl.Error()+" (MCPFLEET_MAX_CATALOGUE_BYTES): nothing was written")
	case errors.Is(err, remote.ErrNoEndpoint):
		return problem(http.StatusConflict, "no_endpoint", "the server has no endpoint: set one (PATCH endpoint) first")
	case errors.As(err, &au):
		p := problem(http.StatusConflict, "auth_unsupported", fmt.Sprintf("the stored authentication mode %q is not one this client offers (bearer, header): fix it with PATCH", au.Mode))
		p.Extra = map[string]any{"auth_mode": au.Mode}
		return p
	case errors.Is(err, remote.ErrNoCredential):
		return problem(http.StatusConflict, "credential_missing", "the server's authentication needs a credential and none is stored (it is dropped when the endpoint moves to another origin): set auth.credential with PATCH")
	case errors.Is(err, remote.ErrCredentialUnreadable):
		p := problem(http.StatusConflict, "credential_unreadable", "the stored credential cannot be opened with the configured secret key for this endpoint (was MCPFLEET_SECRET_KEY changed, or the endpoint moved other than by PATCH?): set the credential again with PATCH")
		p.Err = err
		return p
	case errors.Is(err, remote.ErrNoSecretKey):
		p := problem(http.StatusServiceUnavailable, "secret_key_missing", "this service has no MCPFLEET_SECRET_KEY, so it can neither store nor use a credential")
		p.Err = err
		return p
	case errors.Is(err, persistence.ErrNotFound), errors.Is(err, actors.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no such server in this tenant")
	case errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrNotOwner), errors.Is(err, actors.ErrDeregistered), errors.Is(err, persistence.ErrServerLimit):
		return fleetError(err)
	}
	if errors.Is(err, mcpclient.ErrInvalidConfig) {
		return internalError(err)
	}
	return storeError(err)
}
