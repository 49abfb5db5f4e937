package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// knownProtocols are the MCP protocol revisions a module may list in supported_protocols. Read only.
var knownProtocols = map[string]bool{
	"2024-11-05": true, "2025-03-26": true, "2025-06-18": true, "2025-11-25": true, "2026-07-28": true,
}

// Limits on registration input (the configurable ones are in Config).
const (
	maxVersion     = 64
	maxProtocols   = 16
	maxToolName    = 128
	maxDescription = 8 << 10
)

var (
	versionRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_-]*$`)
	toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// RegisterBody is the body of POST /v1/mcp/servers/register.
type RegisterBody struct {
	ModuleName              string          `json:"module_name"`
	Version                 string          `json:"version"`
	SupportedProtocols      []string        `json:"supported_protocols"`
	CapabilityAdvertisement json.RawMessage `json:"capability_advertisement"`
	// Endpoint is the module's MCP endpoint (optional), if the service may call it: checked against the
	// endpoint policy and stored in the server's configuration.
	Endpoint string `json:"endpoint"`
}

// capabilityBody is the part of a capability advertisement the service reads, and the whole of what it
// stores: only validated tools (name, description, inputSchema, annotations), never arbitrary JSON.
type capabilityBody struct {
	Tools []advertisedTool `json:"tools"`
}

type advertisedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
}

// registrationLimits are the configurable limits a registration is checked against.
type registrationLimits struct {
	maxTools, maxAdvertisementBytes int
}

// rawHasNUL reports whether the JSON text raw, valid JSON, holds a NUL character in any string (a key
// or a value) — what hasNUL finds in the decoded value, without decoding it (FuzzRawNUL). In valid JSON
// a NUL can only be written as the escape \u0000: raw control characters are invalid in strings, and a
// backslash appears nowhere but in strings, always starting an escape.
func rawHasNUL(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+5 < len(raw) && raw[i+1] == 'u' && string(raw[i+2:i+6]) == "0000" {
			return true
		}
		i++ // the escaped character: an escaped backslash starts no escape
	}
	return false
}

// isJSONObject reports whether raw is absent, null or a JSON object (valid JSON whose value is an
// object, without decoding it).
func isJSONObject(raw json.RawMessage) bool {
	if len(raw) == 0 || string(raw) == "null" {
		return true
	}
	v := bytes.TrimLeft(raw, " \t\r\n")
	return len(v) > 0 && v[0] == '{' && json.Valid(raw)
}

// ServerIDBody is the body of heartbeat and deregister.
type ServerIDBody struct {
	ServerID string `json:"server_id"`
}

// validate checks a registration against lim and returns the request for the fleet.
func (b *RegisterBody) validate(lim registrationLimits) (actors.RegisterRequest, error) {
	req := actors.RegisterRequest{ModuleName: b.ModuleName, Version: b.Version, Protocols: b.SupportedProtocols}
	if err := validModuleName(b.ModuleName); err != nil {
		return req, err
	}
	switch {
	case b.Version == "":
		return req, badRequest("missing_field", "version", "version is required")
	case len(b.Version) > maxVersion:
		return req, badRequest("invalid_field", "version", fmt.Sprintf("version must be at most %d characters", maxVersion))
	case !versionRE.MatchString(b.Version):
		return req, badRequest("invalid_field", "version", "version may contain only letters, digits, '.', '+', '_' and '-'")
	case b.SupportedProtocols == nil:
		return req, badRequest("missing_field", "supported_protocols", "supported_protocols is required: list the MCP protocol revisions the server speaks")
	case len(b.SupportedProtocols) == 0:
		return req, badRequest("invalid_field", "supported_protocols", "supported_protocols must not be empty")
	case len(b.SupportedProtocols) > maxProtocols:
		return req, badRequest("invalid_field", "supported_protocols", fmt.Sprintf("supported_protocols may list at most %d revisions", maxProtocols))
	}
	for _, p := range b.SupportedProtocols {
		if !knownProtocols[p] {
			return req, badRequest("invalid_field", "supported_protocols", fmt.Sprintf("unknown MCP protocol revision %q: known are 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28", truncate(p, 40)))
		}
	}
	if len(b.CapabilityAdvertisement) > 0 && string(b.CapabilityAdvertisement) != "null" {
		if n := len(b.CapabilityAdvertisement); n > lim.maxAdvertisementBytes {
			p := problem(http.StatusRequestEntityTooLarge, "advertisement_too_large",
				fmt.Sprintf("the capability advertisement is %d bytes, more than the limit of %d (MCPFLEET_MAX_ADVERTISEMENT_BYTES): nothing was stored", n, lim.maxAdvertisementBytes))
			p.Field = "capability_advertisement"
			return req, p
		}
		var caps capabilityBody
		if err := json.Unmarshal(b.CapabilityAdvertisement, &caps); err != nil {
			return req, badRequest("invalid_field", "capability_advertisement", "capability_advertisement must be an object whose tools is an array of {name, description, inputSchema, annotations}")
		}
		if rawHasNUL(b.CapabilityAdvertisement) {
			return req, badRequest("invalid_field", "capability_advertisement", "capability_advertisement must not contain a NUL character (\\u0000)")
		}
		if len(caps.Tools) > lim.maxTools {
			p := problem(http.StatusBadRequest, "too_many_tools",
				fmt.Sprintf("%d tools are advertised, more than the limit of %d per server (MCPFLEET_MAX_TOOLS_PER_SERVER): nothing was stored", len(caps.Tools), lim.maxTools))
			p.Field = "capability_advertisement.tools"
			return req, p
		}
		seen := map[string]bool{}
		for i, t := range caps.Tools {
			field := fmt.Sprintf("capability_advertisement.tools[%d]", i)
			switch {
			case t.Name == "" || len(t.Name) > maxToolName || !toolNameRE.MatchString(t.Name):
				return req, badRequest("invalid_field", field+".name", fmt.Sprintf("a tool name must be 1 to %d letters, digits, '_', '.' or '-'", maxToolName))
			case seen[t.Name]:
				return req, badRequest("invalid_field", field+".name", fmt.Sprintf("tool %q is advertised twice", t.Name))
			case len(t.Description) > maxDescription:
				return req, badRequest("invalid_field", field+".description", fmt.Sprintf("a tool description must be at most %d bytes", maxDescription))
			}
			if !isJSONObject(t.InputSchema) {
				return req, badRequest("invalid_field", field+".inputSchema", "inputSchema must be a JSON object")
			}
			if !isJSONObject(t.Annotations) {
				return req, badRequest("invalid_field", field+".annotations", "annotations must be a JSON object")
			}
			if string(t.InputSchema) == "null" {
				caps.Tools[i].InputSchema = nil
			}
			if string(t.Annotations) == "null" {
				caps.Tools[i].Annotations = nil
			}
			seen[t.Name] = true
			req.Tools = append(req.Tools, persistence.Tool{Name: t.Name, Description: t.Description,
				InputSchema: caps.Tools[i].InputSchema, Annotations: caps.Tools[i].Annotations})
		}
		if caps.Tools == nil {
			caps.Tools = []advertisedTool{}
		}
		stored, err := json.Marshal(caps)
		if err != nil {
			return req, internalError(err)
		}
		req.Capabilities = stored
	}
	return req, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseServerID validates a server id from a body or a path.
func parseServerID(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, badRequest("missing_field", "server_id", "server_id is required")
	}
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return uuid.Nil, badRequest("invalid_field", "server_id", "server_id must be a UUID")
	}
	return id, nil
}

// ServerJSON is the server object of the API (seed §3, extended).
type ServerJSON struct {
	ServerID                uuid.UUID       `json:"server_id"`
	TenantID                uuid.UUID       `json:"tenant_id"`
	ModuleName              string          `json:"module_name"`
	Version                 string          `json:"version"`
	SupportedProtocols      []string        `json:"supported_protocols"`
	CapabilityAdvertisement json.RawMessage `json:"capability_advertisement"`
	Status                  health.Status   `json:"status"`
	// Origin is who created the server: "module" (it registered itself) or "admin" (an administrator
	// configured it). CatalogueSource is the one source of its tools: "advertisement" or "import".
	Origin          persistence.Origin `json:"origin"`
	CatalogueSource string             `json:"catalogue_source"`
	LastHeartbeatAt time.Time          `json:"last_heartbeat_at"`
	RegisteredAt    time.Time          `json:"registered_at"`
	DeregisteredAt  *time.Time         `json:"deregistered_at"`
	TraceID         string             `json:"trace_id"`
}

func serverJSON(s persistence.Server) ServerJSON {
	caps := s.CapabilityAdvertisement
	if len(caps) == 0 {
		caps = json.RawMessage("null")
	}
	var dereg *time.Time
	if s.DeregisteredAt != nil {
		t := s.DeregisteredAt.UTC()
		dereg = &t
	}
	return ServerJSON{
		ServerID: s.ServerID, TenantID: s.TenantID, ModuleName: s.ModuleName, Version: s.Version,
		SupportedProtocols: s.SupportedProtocols, CapabilityAdvertisement: caps, Status: s.Status,
		Origin: persistence.OriginModule, CatalogueSource: persistence.OriginModule.CatalogueSource(),
		LastHeartbeatAt: s.LastHeartbeatAt.UTC(), RegisteredAt: s.RegisteredAt.UTC(), DeregisteredAt: dereg, TraceID: s.TraceID,
	}
}

// saturatedRetry is the Retry-After of a registration refused on a saturated node: 1 to 4 s at random,
// so that modules refused together do not come back together (a fleet re-registering at once would
// otherwise return in waves that saturate the node again).
func saturatedRetry() time.Duration { return time.Duration(1+rand.IntN(4)) * time.Second }

// fleetError maps an actors error to its problem.
func fleetError(err error) error {
	switch {
	case errors.Is(err, actors.ErrNotFound):
		return problem(http.StatusNotFound, "server_not_registered", "no server with this server_id is registered: register first (POST /v1/mcp/servers/register)")
	case errors.Is(err, actors.ErrDeregistered):
		return problem(http.StatusConflict, "server_deregistered", "this server deregistered: register again to get it back (the same server_id is returned)")
	case errors.Is(err, actors.ErrSaturated):
		p := problem(http.StatusServiceUnavailable, "node_saturated", "this node has more work ready than its CPUs run, and still had after holding this registration up to 2 s: it takes no new servers until it has not (registered servers are served as ever); nothing was recorded: retry after Retry-After")
		p.RetryAfter, p.Err = saturatedRetry(), err
		return p
	case errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrNotOwner):
		return unavailable("the request could not be made durable right now; nothing was recorded: retry", 2*time.Second, err)
	case errors.Is(err, persistence.ErrNotOwned):
		return notOwned("an administrator configured a server under this module_name: only an admin key may re-register it")
	case errors.Is(err, persistence.ErrServerLimit):
		return problem(http.StatusForbidden, "server_limit_reached", "this tenant has as many servers as its limit allows (MCPFLEET_MAX_SERVERS_PER_TENANT; deregistered servers count): nothing was recorded")
	}
	return internalError(err)
}

func (s *Server) register(c *gin.Context, p persistence.Principal) error {
	var body RegisterBody
	if err := decodeJSON(c.Writer, c.Request, &body); err != nil {
		return err
	}
	req, err := body.validate(s.limits)
	if err != nil {
		return err
	}
	if !p.MayAct(persistence.ActRegister, req.ModuleName, persistence.OriginModule) {
		return notOwned("this API key is bound to other module names than " + req.ModuleName)
	}
	ctx := c.Request.Context()
	req.TenantID, req.ByKey, req.ByAdmin = p.TenantID, p.KeyID, p.Role == persistence.RoleAdmin
	req.Trace = telemetry.CarrierFrom(ctx)
	if body.Endpoint != "" {
		if req.Endpoint, err = s.checkEndpoint(ctx, p, body.ModuleName, body.Endpoint); err != nil {
			return err
		}
	}
	res, err := s.fleet.Register(ctx, req)
	if err != nil {
		return fleetError(err)
	}
	if !req.ByAdmin {
		// A module key's registration commits only on a self-registered server: its heartbeats need not
		// ask the database who owns it.
		s.owners.put(p.TenantID, res.Server.ServerID, serverOwner{module: req.ModuleName, origin: persistence.OriginModule})
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	c.JSON(status, struct {
		ServerJSON
		HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
		RequestTraceID           string  `json:"request_trace_id"`
	}{serverJSON(res.Server), s.cfg.HeartbeatInterval.Seconds(), telemetry.TraceID(ctx)})
	return nil
}

// decodeServerIDBody reads the {server_id} body of heartbeat and deregister.
func decodeServerIDBody(c *gin.Context) (uuid.UUID, error) {
	raw, err := readJSONBody(c.Writer, c.Request)
	if err != nil {
		return uuid.Nil, err
	}
	if v, ok := canonicalServerID(raw); ok && len(v) == 36 {
		if id, err := uuid.ParseBytes(v); err == nil {
			return id, nil
		}
	}
	var body ServerIDBody
	if err := decodeBytes(raw, &body); err != nil {
		return uuid.Nil, err
	}
	return parseServerID(body.ServerID)
}

// heartbeatAnswer is the body of a heartbeat's 200 answer.
type heartbeatAnswer struct {
	ServerID        uuid.UUID     `json:"server_id"`
	Status          health.Status `json:"status"`
	LastHeartbeatAt time.Time     `json:"last_heartbeat_at"`
}

func (s *Server) heartbeat(c *gin.Context, p persistence.Principal) error {
	id, err := decodeServerIDBody(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	if err := s.authorizeOn(ctx, p, persistence.ActHeartbeat, id); err != nil {
		return err
	}
	res, err := s.fleet.Heartbeat(ctx, p.TenantID, id, telemetry.CarrierFrom(ctx))
	if err != nil {
		return fleetError(err)
	}
	a := heartbeatAnswer{ServerID: res.ServerID, Status: res.Status, LastHeartbeatAt: res.LastHeartbeatAt.UTC()}
	buf := answerBufs.Get().(*[]byte)
	*buf = a.appendJSON((*buf)[:0])
	writeJSON(c, http.StatusOK, *buf)
	answerBufs.Put(buf)
	return nil
}

// answerBufs holds the buffers heartbeat answers are written into: writeJSON copies the body into the
// connection's buffer before it returns, so a buffer is reused by the next answer.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// jsonContentType is what gin's c.JSON answers with.
const jsonContentType = "application/json; charset=utf-8"

// jsonContentTypes is jsonContentType as a header's values. It is shared by every answer, as gin shares
// its own: net/http copies the header's values when it writes them and nothing appends to them.
var jsonContentTypes = []string{jsonContentType}

// writeJSON answers status (one that has a body) with the JSON body as c.Data(status, jsonContentType,
// body) does on the wire — a Content-Type already set is kept, a failed write is the request's error —
// without what gin's render allocates per answer: its Data value, the content type's slice, and the
// Content-Length header, which net/http writes itself for a body that fits its buffer and is complete
// when the handler returns (a heartbeat's answer, ~130 bytes). body is written before writeJSON returns.
func writeJSON(c *gin.Context, status int, body []byte) {
	if h := c.Writer.Header(); len(h["Content-Type"]) == 0 {
		h["Content-Type"] = jsonContentTypes
	}
	c.Status(status)
	if _, err := c.Writer.Write(body); err != nil {
		_ = c.Error(err)
		c.Abort()
	}
}

// appendJSON appends a's JSON to b, byte for byte what encoding/json writes for it
// (TestHeartbeatAnswerJSON), without reflection: the heartbeat is the hottest answer the service writes.
// A status outside health's enum (none is) or a time json cannot write goes through encoding/json.
func (a heartbeatAnswer) appendJSON(b []byte) []byte {
	if !plainJSONString(string(a.Status)) || a.LastHeartbeatAt.Year() < 0 || a.LastHeartbeatAt.Year() > 9999 {
		out, err := json.Marshal(a)
		if err != nil {
			return append(b, "{}"...)
		}
		return append(b, out...)
	}
	b = append(b, `{"server_id":"`...)
	b = appendUUID(b, a.ServerID)
	b = append(b, `","status":"`...)
	b = append(b, a.Status...)
	b = append(b, `","last_heartbeat_at":"`...)
	b = a.LastHeartbeatAt.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

// appendUUID appends id in its canonical form (what id.String returns), without a string between.
func appendUUID(b []byte, id uuid.UUID) []byte {
	b = hex.AppendEncode(b, id[0:4])
	b = append(b, '-')
	b = hex.AppendEncode(b, id[4:6])
	b = append(b, '-')
	b = hex.AppendEncode(b, id[6:8])
	b = append(b, '-')
	b = hex.AppendEncode(b, id[8:10])
	b = append(b, '-')
	return hex.AppendEncode(b, id[10:16])
}

// plainJSONString reports whether s is written as itself between quotes by encoding/json (no escape).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func (s *Server) deregister(c *gin.Context, p persistence.Principal) error {
	id, err := decodeServerIDBody(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	if err := s.authorizeOn(ctx, p, persistence.ActDeregister, id); err != nil {
		return err
	}
	srv, err := s.fleet.Deregister(ctx, p.TenantID, id, telemetry.CarrierFrom(ctx))
	if err != nil {
		return fleetError(err)
	}
	// The actor keeps a slim copy of the row, without the capability advertisement, which the
	// deregistration's commit returns. A repeated deregistration (nothing committed) or a server that
	// advertised nothing reads the committed row, when the database answers.
	if srv.CapabilityAdvertisement == nil {
		if full, err := s.store.GetServer(ctx, p.TenantID, id); err == nil {
			srv = full
		}
	}
	c.JSON(http.StatusOK, serverJSON(srv))
	return nil
}

// includeAdvertisement is the value of include that puts capability_advertisement in list items.
const includeAdvertisement = "capability_advertisement"

// serverListItemJSON is an item of GET /v1/mcp/servers: the server's detail, whose
// capability_advertisement (shadowing the embedded one) is left out unless asked for.
type serverListItemJSON struct {
	ServerDetailJSON
	CapabilityAdvertisement json.RawMessage `json:"capability_advertisement,omitempty"`
}

// listServers answers GET /v1/mcp/servers?status=&limit=&cursor=&include=, paginated by an opaque
// cursor. Items carry capability_advertisement only with include=capability_advertisement, and then a
// page holds at most ListAdvertisementLimit servers (400 page_too_large above it) and at most
// ListPageBytes of advertisements (the page ends early, next_cursor set): an advertisement may be
// large, a list of them larger.
func (s *Server) listServers(c *gin.Context, p persistence.Principal) error {
	f := persistence.ServerFilter{Limit: 100, WithoutAdvertisement: true}
	if v, ok := c.GetQuery("include"); ok {
		for _, part := range strings.Split(v, ",") {
			if part != includeAdvertisement {
				return badRequest("invalid_field", "include", "include takes only capability_advertisement")
			}
		}
		f.WithoutAdvertisement = false
	}
	if v := c.Query("status"); v != "" {
		st, err := health.Parse(v)
		if err != nil {
			return badRequest("invalid_field", "status", err.Error())
		}
		f.Status = st
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("invalid_field", "limit", "limit must be a whole number from 1 to 1000")
		}
		f.Limit = n
	}
	if most := config.Or(s.cfg.ListAdvertisementLimit, config.DefaultListAdvertisementLimit); !f.WithoutAdvertisement && f.Limit > most {
		prob := badRequest("page_too_large", "limit", fmt.Sprintf("with include=capability_advertisement a page holds at most %d servers: ask for limit=%d or fewer and follow next_cursor", most, most))
		prob.Extra = map[string]any{"max_limit": most}
		return prob
	}
	if v := c.Query("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) != 16 {
			return badRequest("invalid_field", "cursor", "cursor is not one this API returned")
		}
		copy(f.After[:], b)
	}
	servers, more, err := s.listPage(c.Request.Context(), p.TenantID, f)
	if err != nil {
		return storeError(err)
	}
	details, err := s.serverDetails(c.Request.Context(), p, servers)
	if err != nil {
		return storeError(err)
	}
	out := make([]serverListItemJSON, len(details))
	for i, d := range details {
		out[i].ServerDetailJSON = d
		if !f.WithoutAdvertisement {
			out[i].CapabilityAdvertisement = d.CapabilityAdvertisement
		}
	}
	next := ""
	if more && len(servers) > 0 {
		next = base64.RawURLEncoding.EncodeToString(servers[len(servers)-1].ServerID[:])
	}
	c.JSON(http.StatusOK, gin.H{"servers": out, "next_cursor": next})
	return nil
}

// listChunk is how many servers with advertisements listPage reads at once: what it holds beyond the
// page's byte budget is at most this many advertisements.
const listChunk = 16

// listPage reads a page of servers for f; more reports that a next page may hold servers (the page is
// full, or it ended early at its byte budget). Without advertisements it is one query of f.Limit rows;
// with them it reads listChunk rows at a time and stops before the server whose advertisement would
// take the page past ListPageBytes, so neither the answer nor what is read for it grows with limit
// times the largest advertisement.
func (s *Server) listPage(ctx context.Context, tenantID uuid.UUID, f persistence.ServerFilter) (page []persistence.Server, more bool, err error) {
	if f.WithoutAdvertisement {
		page, err = s.store.ListServers(ctx, tenantID, f)
		return page, len(page) == f.Limit, err
	}
	budget := config.Or(s.cfg.ListPageBytes, config.DefaultListPageBytes)
	used := 0
	chunk := f
	for len(page) < f.Limit {
		chunk.Limit = min(listChunk, f.Limit-len(page))
		rows, err := s.store.ListServers(ctx, tenantID, chunk)
		if err != nil {
			return nil, false, err
		}
		for _, r := range rows {
			n := len(r.CapabilityAdvertisement)
			if len(page) > 0 && used+n > budget {
				return page, true, nil
			}
			page, used = append(page, r), used+n
		}
		if len(rows) < chunk.Limit {
			return page, false, nil
		}
		chunk.After = rows[len(rows)-1].ServerID
	}
	return page, true, nil
}

func (s *Server) getServer(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	srv, err := s.store.GetServer(c.Request.Context(), p.TenantID, id)
	if err != nil {
		return storeError(err)
	}
	return s.writeServer(c, p, srv)
}

// SkillJSON is a skill of the API.
type SkillJSON struct {
	SkillID     uuid.UUID       `json:"skill_id"`
	ServerID    uuid.UUID       `json:"server_id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Enabled     bool            `json:"enabled"`
	Available   bool            `json:"available"`
	Orphaned    bool            `json:"orphaned"`
	OrphanedAt  *time.Time      `json:"orphaned_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	// Annotations are the tool's MCP annotations (null: none).
	Annotations json.RawMessage `json:"annotations"`
	// ChangedAt is set when a re-registration or re-import changed the tool's definition, which disabled
	// it; PreviousDefinition is the definition before ({description, input_schema, annotations}). Both
	// are null again once an operator enables the tool (approving the new definition).
	ChangedAt          *time.Time      `json:"changed_at"`
	PreviousDefinition json.RawMessage `json:"previous_definition"`
	// ServerEnabled is the server's enabled flag; Callable is enabled && available && server enabled.
	ServerEnabled bool `json:"server_enabled"`
	Callable      bool `json:"callable"`
}

func (s *Server) listSkills(c *gin.Context, p persistence.Principal) error {
	id, err := parseServerID(c.Param("server_id"))
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	if _, err := s.store.GetServer(ctx, p.TenantID, id); err != nil {
		return storeError(err)
	}
	skills, err := s.store.ListSkills(ctx, p.TenantID, id)
	if err != nil {
		return storeError(err)
	}
	srvEnabled, err := s.serverEnabled(ctx, p.TenantID, id)
	if err != nil {
		return storeError(err)
	}
	out := make([]SkillJSON, len(skills))
	for i, k := range skills {
		out[i] = skillJSON(remote.SkillState{Skill: k, ServerEnabled: srvEnabled})
	}
	c.JSON(http.StatusOK, gin.H{"skills": out})
	return nil
}

// AuditJSON is an audit event of the API.
type AuditJSON struct {
	EventID    uuid.UUID     `json:"event_id"`
	Seq        int64         `json:"seq"`
	Kind       string        `json:"kind"`
	ServerID   uuid.UUID     `json:"server_id"`
	ModuleName string        `json:"module_name"`
	Version    string        `json:"version"`
	Status     health.Status `json:"status"`
	From       health.Status `json:"from,omitempty"`
	TraceID    string        `json:"trace_id"`
	OccurredAt time.Time     `json:"occurred_at"`
}

func (s *Server) listAudit(c *gin.Context, p persistence.Principal) error {
	f := persistence.AuditFilter{Limit: 500}
	if v := c.Query("server_id"); v != "" {
		id, err := parseServerID(v)
		if err != nil {
			return err
		}
		f.ServerID = id
	}
	if v := c.Query("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("invalid_field", "after", "after must be a non-negative sequence number")
		}
		f.AfterSeq = n
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("invalid_field", "limit", "limit must be a whole number from 1 to 1000")
		}
		f.Limit = n
	}
	events, err := s.store.ListAudit(c.Request.Context(), p.TenantID, f)
	if err != nil {
		return storeError(err)
	}
	out := make([]AuditJSON, len(events))
	for i, e := range events {
		out[i] = AuditJSON{EventID: e.EventID, Seq: e.Seq, Kind: string(e.Kind), ServerID: e.ServerID, ModuleName: e.ModuleName,
			Version: e.Version, Status: e.Status, From: e.From, TraceID: e.TraceID, OccurredAt: e.OccurredAt.UTC()}
	}
	c.JSON(http.StatusOK, gin.H{"events": out})
	return nil
}

// storeError maps a persistence error to its problem.
func storeError(err error) error {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no such server in this tenant")
	case persistence.IsTransient(err):
		return unavailable("the database is not answering right now: retry", 2*time.Second, err)
	}
	return internalError(err)
}
