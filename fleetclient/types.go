package fleetclient

import (
	"encoding/json"
	"time"
)

// Status is a server's health status as the service reports it. The set is
// closed: healthy, degraded, unhealthy, deregistered.
type Status string

// The statuses the service can report.
const (
	StatusHealthy      Status = "healthy"
	StatusDegraded     Status = "degraded"
	StatusUnhealthy    Status = "unhealthy"
	StatusDeregistered Status = "deregistered"
)

// Tool is one entry of a capability advertisement: an MCP tool as tools/list
// would describe it. InputSchema is a JSON Schema object kept verbatim.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// CapabilityAdvertisement is what a module says it offers when it registers.
type CapabilityAdvertisement struct {
	Tools []Tool `json:"tools"`
}

// RegisterRequest is the body of POST /v1/mcp/servers/register.
// ModuleName is unique per tenant: registering the same name again revives
// and updates the same server_id.
type RegisterRequest struct {
	ModuleName              string                  `json:"module_name"`
	Version                 string                  `json:"version"`
	SupportedProtocols      []string                `json:"supported_protocols"`
	CapabilityAdvertisement CapabilityAdvertisement `json:"capability_advertisement"`
	// Endpoint is the module's MCP URL (Streamable HTTP), if the service may
	// call it. Optional.
	Endpoint string `json:"endpoint,omitempty"`
}

// Server is the service's record of one registered MCP server.
type Server struct {
	ServerID                string                  `json:"server_id"`
	TenantID                string                  `json:"tenant_id"`
	ModuleName              string                  `json:"module_name"`
	Version                 string                  `json:"version"`
	SupportedProtocols      []string                `json:"supported_protocols"`
	CapabilityAdvertisement CapabilityAdvertisement `json:"capability_advertisement"`
	Endpoint                string                  `json:"endpoint,omitempty"`
	Status                  Status                  `json:"status"`
	LastHeartbeatAt         time.Time               `json:"last_heartbeat_at"`
	RegisteredAt            time.Time               `json:"registered_at"`
	// DeregisteredAt is nil unless Status is StatusDeregistered.
	DeregisteredAt *time.Time `json:"deregistered_at"`
	TraceID        string     `json:"trace_id,omitempty"`
}

// RegisterResponse is the answer to a registration: the server record plus
// the heartbeat interval the module must keep.
type RegisterResponse struct {
	Server
	// HeartbeatIntervalSeconds is the interval H the service expects. The
	// service sends whole seconds; fractions are accepted for test services.
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
	// RequestTraceID is the trace of this registration request.
	RequestTraceID string `json:"request_trace_id,omitempty"`
	// Created is true when the service answered 201 (a new server_id) and
	// false on 200 (re-registration of the same module_name).
	Created bool `json:"-"`
}

// HeartbeatInterval returns HeartbeatIntervalSeconds as a duration, or 0 if
// the service did not send one.
func (r *RegisterResponse) HeartbeatInterval() time.Duration {
	if r.HeartbeatIntervalSeconds <= 0 {
		return 0
	}
	return time.Duration(r.HeartbeatIntervalSeconds * float64(time.Second))
}

// HeartbeatResponse is the answer to a heartbeat.
type HeartbeatResponse struct {
	ServerID        string    `json:"server_id"`
	Status          Status    `json:"status"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// ListOptions filters GET /v1/mcp/servers. Zero fields are not sent.
type ListOptions struct {
	Status Status
	Limit  int
	Cursor string
	// IncludeCapabilityAdvertisement asks for each server's capability
	// advertisement (include=capability_advertisement); without it the listed
	// servers' CapabilityAdvertisement is empty. The service then takes pages
	// of at most 100 servers (MCPFLEET_LIST_ADVERTISEMENT_LIMIT): set Limit.
	// GetServer always returns it.
	IncludeCapabilityAdvertisement bool
	// MaxPages bounds how many pages AllServers fetches; 0 means 10,000.
	// ListServers ignores it.
	MaxPages int
}

// ServerPage is one page of GET /v1/mcp/servers. NextCursor is empty on the
// last page.
type ServerPage struct {
	Servers    []Server `json:"servers"`
	NextCursor string   `json:"next_cursor"`
}

// Skill is one tool of a registered server as the skill registry holds it.
// Available is false while its server is unhealthy or deregistered;
// Orphaned is true once the server stopped advertising the tool.
type Skill struct {
	SkillID     string          `json:"skill_id"`
	ServerID    string          `json:"server_id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Enabled     bool            `json:"enabled"`
	Available   bool            `json:"available"`
	Orphaned    bool            `json:"orphaned"`
	OrphanedAt  *time.Time      `json:"orphaned_at,omitempty"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// AuditEvent is one entry of the audit log. Kind is one of the service's
// audit kinds, e.g. "mcp.server.registered", "mcp.server.degraded",
// "mcp.server.unhealthy", "mcp.server.recovered", "mcp.server.deregistered".
type AuditEvent struct {
	EventID    string    `json:"event_id"`
	Seq        int64     `json:"seq,omitempty"`
	Kind       string    `json:"kind"`
	ServerID   string    `json:"server_id"`
	ModuleName string    `json:"module_name"`
	Version    string    `json:"version"`
	Status     Status    `json:"status"`
	TraceID    string    `json:"trace_id"`
	OccurredAt time.Time `json:"occurred_at"`
}

// ToolChange is one recorded change of a tool (GET /v1/mcp/skills/{id}/changes). Cause is
// "definition" (OldDefinition and NewDefinition differ) or "endpoint" (a registration moved the server
// from OldEndpoint, nil for none, to NewEndpoint).
type ToolChange struct {
	ChangeID      string          `json:"change_id"`
	Seq           int64           `json:"seq"`
	SkillID       string          `json:"skill_id"`
	ServerID      string          `json:"server_id"`
	Name          string          `json:"name"`
	Source        string          `json:"source"`
	Cause         string          `json:"cause"`
	OldDefinition json.RawMessage `json:"old_definition"`
	NewDefinition json.RawMessage `json:"new_definition"`
	OldEndpoint   *string         `json:"old_endpoint"`
	NewEndpoint   *string         `json:"new_endpoint"`
	WasEnabled    bool            `json:"was_enabled"`
	ChangedBy     *string         `json:"changed_by"`
	TraceID       *string         `json:"trace_id"`
	ChangedAt     time.Time       `json:"changed_at"`
}

// ToolChangesOptions pages GET /v1/mcp/skills/{id}/changes. Zero fields are not sent.
type ToolChangesOptions struct {
	After int64 // the Seq of the last change seen
	Limit int   // 1 to 1000; the service's default is 100
}

// AuditOptions filters GET /v1/mcp/audit. Zero fields are not sent.
type AuditOptions struct {
	ServerID string
}
