package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/mcpendpoint"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/ui"
)

// MCPConfig configures the MCP endpoint (zero values take the defaults).
type MCPConfig struct {
	Unavailable  mcpendpoint.Mode // MCPFLEET_MCP_UNAVAILABLE_TOOLS: keep (default) or hide
	ListHold     time.Duration    // MCPFLEET_MCP_LIST_HOLD: default one monitor period
	AllowedHosts []string         // MCPFLEET_MCP_ALLOWED_HOSTS: host names besides loopback that Host and Origin may name
	// MaxSessionsPerKey and MaxStreamsPerKey are MCPFLEET_MCP_SESSIONS_PER_KEY (default 32) and
	// MCPFLEET_MCP_STREAMS_PER_KEY (default 64).
	MaxSessionsPerKey, MaxStreamsPerKey int
	PollInterval                        time.Duration // tests: how often tenants' tools are read (default 250 ms)
}

// mcpFromEnv reads the MCP endpoint's settings into c (zero takes mcpendpoint's default).
func (c *Config) mcpFromEnv(e *config.Env) {
	c.MCP.Unavailable = mcpendpoint.Mode(e.String("MCPFLEET_MCP_UNAVAILABLE_TOOLS", string(mcpendpoint.Keep)))
	c.MCP.ListHold = e.Duration("MCPFLEET_MCP_LIST_HOLD", 0)
	c.MCP.AllowedHosts = splitList(e.String("MCPFLEET_MCP_ALLOWED_HOSTS", ""))
	c.MCP.MaxSessionsPerKey = e.Int("MCPFLEET_MCP_SESSIONS_PER_KEY", 0, 1, 10000)
	c.MCP.MaxStreamsPerKey = e.Int("MCPFLEET_MCP_STREAMS_PER_KEY", 0, 1, 10000)
}

// validateMCP checks the MCP endpoint's settings.
func (c Config) validateMCP() []error {
	var errs []error
	switch c.MCP.Unavailable {
	case "", mcpendpoint.Keep, mcpendpoint.Hide:
	default:
		errs = append(errs, fmt.Errorf("MCPFLEET_MCP_UNAVAILABLE_TOOLS=%q: want keep or hide", c.MCP.Unavailable))
	}
	if c.MCP.ListHold < 0 || c.MCP.ListHold > time.Hour {
		errs = append(errs, fmt.Errorf("MCPFLEET_MCP_LIST_HOLD=%s: want 0 (one monitor period) to 1h", c.MCP.ListHold))
	}
	return errs
}

// newMCPEndpoint builds the MCP endpoint: tools/call goes through the gateway, keys are checked by the
// API's authenticator (set by mountMCP once the API exists).
func (s *Service) newMCPEndpoint(cfg Config, opt Options, log *slog.Logger) *mcpendpoint.Endpoint {
	hosts := cfg.MCP.AllowedHosts
	if h, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		hosts = append(hosts, h)
	}
	return mcpendpoint.New(mcpendpoint.Config{
		Unavailable: cfg.MCP.Unavailable, ListHold: cfg.MCP.ListHold, MonitorPeriod: cfg.MonitorInterval,
		FlapWindow: cfg.FlapWindow, FlapThreshold: cfg.FlapThreshold,
		RetryAfter: cfg.HeartbeatInterval, PollInterval: cfg.MCP.PollInterval, AllowedHosts: hosts,
		MaxSessionsPerKey: cfg.MCP.MaxSessionsPerKey, MaxStreamsPerKey: cfg.MCP.MaxStreamsPerKey,
	}, mcpendpoint.Deps{
		Store: s.store, Gateway: s.gateway, Clock: opt.Clock, Log: log.With("component", "mcp_endpoint"), Version: "1",
		Authenticate: func(r *http.Request) (persistence.Principal, *mcpendpoint.AuthError) {
			p, pr := s.api.Authenticate(r)
			if pr != nil {
				return p, &mcpendpoint.AuthError{Status: pr.Status, Slug: pr.Type, Detail: pr.Detail, RetryAfter: pr.RetryAfter}
			}
			return p, nil
		},
	})
}

// MCPEndpoint is the MCP endpoint.
func (s *Service) MCPEndpoint() *mcpendpoint.Endpoint { return s.mcp }

var _ interface {
	Authenticate(*http.Request) (persistence.Principal, *httpapi.Problem)
} = (*httpapi.Server)(nil)

// listSignals tells the MCP endpoint of every operator change this node commits, so the tenant's list is
// read at once (mcpendpoint.Endpoint.Changed) instead of at the next poll: a tool enabled or disabled, a
// server changed (enabled, disabled, endpoint) or imported — through the API and the dashboard alike,
// which both change them through the remote side wrapped here. Each method signals after its change
// committed, and only if it succeeded; everything else passes through (configuring a server lists
// nothing: its tools come with its import).
type listSignals struct {
	*remote.Service
	mcp *mcpendpoint.Endpoint
}

var (
	_ httpapi.Remote = listSignals{}
	_ ui.Remote      = listSignals{}
)

// Update implements httpapi.Remote.
func (l listSignals) Update(ctx context.Context, tenantID, serverID uuid.UUID, in remote.PatchInput) (remote.Server, error) {
	srv, err := l.Service.Update(ctx, tenantID, serverID, in)
	l.signal(tenantID, err)
	return srv, err
}

// Import implements httpapi.Remote.
func (l listSignals) Import(ctx context.Context, tenantID, serverID, by uuid.UUID) (remote.ImportReport, error) {
	rep, err := l.Service.Import(ctx, tenantID, serverID, by)
	l.signal(tenantID, err)
	return rep, err
}

// SetSkillEnabled implements httpapi.Remote.
func (l listSignals) SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool) (remote.SkillState, error) {
	st, err := l.Service.SetSkillEnabled(ctx, tenantID, skillID, enabled)
	l.signal(tenantID, err)
	return st, err
}

func (l listSignals) signal(tenantID uuid.UUID, err error) {
	if err == nil {
		l.mcp.Changed(tenantID)
	}
}

// registrationSignals tells the MCP endpoint of every registration this node commits: a registration
// writes a self-registered server's catalogue (new tools, a changed tool disabled, vanished ones
// orphaned, an endpoint move disabling them) and revives a server's tools.
type registrationSignals struct {
	httpapi.Fleet
	mcp *mcpendpoint.Endpoint
}

// Unwrap implements httpapi.FleetWrapper: the chaos hooks of the fleet underneath stay reachable.
func (r registrationSignals) Unwrap() httpapi.Fleet { return r.Fleet }

// Register implements httpapi.Fleet.
func (r registrationSignals) Register(ctx context.Context, req actors.RegisterRequest) (actors.RegisterResult, error) {
	res, err := r.Fleet.Register(ctx, req)
	if err == nil {
		r.mcp.Changed(req.TenantID)
	}
	return res, err
}
