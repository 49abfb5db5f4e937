package remote

import (
	"context"
	"errors"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

const opCallTool = "call_tool"

// CheckCall reports whether a tool call to the server configured by cfg could be sent, without touching
// the network: the server has an endpoint the policy accepts and a credential this service can open in an
// authentication mode it offers. Errors are those of this side: ErrNoEndpoint, ErrNoSecretKey,
// ErrNoCredential, ErrCredentialUnreadable, *AuthUnsupportedError, or one wrapping
// mcpclient.ErrEndpointRefused.
func (s *Service) CheckCall(cfg persistence.ServerConfig) error {
	cl, _, err := s.client(cfg, opCallTool, s.cfg.Timeout)
	if err != nil {
		return err
	}
	cl.CloseIdleConnections()
	return nil
}

// CallTool calls tool on the server srv configured by cfg, once: it is never retried, whatever happens
// (a remote tool is a non-idempotent write). The operation has one deadline (Config.Timeout) covering the
// handshake and the tools/call; cancelling ctx ends it promptly and the server is told with
// notifications/cancelled. A completed call — including one whose tool reported isError — is a contact:
// it stamps last_contact and last_latency_ms and counts as liveness evidence, through the same recorder
// as every other operation, which cannot fail the call. A failed call records nothing.
//
// Errors are *mcpclient.Error for the far side (transport, timeout, auth, protocol, invalid_response) and
// those of CheckCall for this side.
func (s *Service) CallTool(ctx context.Context, srv persistence.Server, cfg persistence.ServerConfig, tool string, args map[string]any) (mcpclient.ToolResult, error) {
	cl, _, err := s.client(cfg, opCallTool, s.cfg.Timeout)
	if err != nil {
		return mcpclient.ToolResult{}, err
	}
	defer cl.CloseIdleConnections()
	start := time.Now()
	octx, op := s.obs.Start(ctx, telemetry.MCPCallTool, srv.TenantID, srv.ModuleName, tool)
	res, err := cl.CallTool(octx, tool, args)
	op.End(octx, err)
	var me *mcpclient.Error
	switch {
	case err == nil:
		s.log.InfoContext(ctx, "tool called", "server_id", cfg.ServerID, "host", endpointHost(cfg.Endpoint), "tool", tool,
			"is_error", res.IsError, "latency_ms", time.Since(start).Milliseconds())
	case errors.As(err, &me):
		s.log.InfoContext(ctx, "tool call failed", "server_id", cfg.ServerID, "host", endpointHost(cfg.Endpoint), "tool", tool,
			"failure_class", me.Class, "latency_ms", time.Since(start).Milliseconds())
	}
	return res, err
}
