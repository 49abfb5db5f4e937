package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/health"
)

// startGateway narrows the configuration into the tool-call gateway's own, builds it and runs its start
// sweep (calls a previous process left running are marked interrupted, never re-sent). Calls go out
// through the MCP client side, so each one stamps the server's last contact and counts as liveness
// evidence exactly like a connection test or an import.
func (s *Service) startGateway(ctx context.Context, cfg Config, opt Options, log *slog.Logger) error {
	clock := opt.Clock
	if clock == nil {
		clock = health.RealClock{}
	}
	s.gateway = gateway.New(gateway.Config{
		MaxCallsPerRun: cfg.MaxCallsPerRun, ApprovalWindow: cfg.ApprovalWindow, CallsPerServer: cfg.CallsPerServer,
		QueueTimeout: cfg.MCPTimeout, RetryAfter: cfg.HeartbeatInterval,
	}, gateway.Deps{Store: s.store, Caller: s.remote, Clock: clock, Log: log.With("component", "gateway")})
	return s.gateway.Start(ctx)
}

// Gateway is the tool-call gateway (tests expire approval windows through it).
func (s *Service) Gateway() *gateway.Gateway { return s.gateway }

// gatewayFromEnv reads the gateway's settings into c.
func (c *Config) gatewayFromEnv(e *config.Env) {
	c.MaxCallsPerRun = e.Int("MCPFLEET_MAX_CALLS_PER_RUN", config.DefaultMaxCallsPerRun, 1, gateway.MaxCallsPerRunLimit)
	c.CallsPerServer = e.Int("MCPFLEET_CALLS_PER_SERVER", config.DefaultCallsPerServer, 1, 1000)
	c.ApprovalWindow = e.Duration("MCPFLEET_APPROVAL_WINDOW", config.DefaultApprovalWindow)
}

// validateGateway checks the gateway's settings (zero takes the default).
func (c Config) validateGateway() []error {
	var errs []error
	if c.MaxCallsPerRun < 0 || c.MaxCallsPerRun > gateway.MaxCallsPerRunLimit {
		errs = append(errs, fmt.Errorf("MCPFLEET_MAX_CALLS_PER_RUN=%d: want 1 to %d", c.MaxCallsPerRun, gateway.MaxCallsPerRunLimit))
	}
	if c.CallsPerServer < 0 || c.CallsPerServer > 1000 {
		errs = append(errs, fmt.Errorf("MCPFLEET_CALLS_PER_SERVER=%d: want 1 to 1000", c.CallsPerServer))
	}
	if c.ApprovalWindow != 0 && (c.ApprovalWindow < time.Second || c.ApprovalWindow > 7*24*time.Hour) {
		errs = append(errs, fmt.Errorf("MCPFLEET_APPROVAL_WINDOW=%s: want 1s to 168h", c.ApprovalWindow))
	}
	return errs
}
