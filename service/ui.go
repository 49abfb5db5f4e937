package service

import (
	"log/slog"

	"github.com/mcpfleet/mcpfleet/ui"
)

// newUI narrows the configuration into the dashboard's and builds it, after the gateway (its approvals).
// The dashboard reads the health model's clock, so a test's fake clock reaches the durations it shows.
func (s *Service) newUI(cfg Config, opt Options, log *slog.Logger) (*ui.UI, error) {
	return ui.New(ui.Config{
		HeartbeatInterval: cfg.HeartbeatInterval, FlapWindow: cfg.FlapWindow, FlapThreshold: cfg.FlapThreshold,
		SecureCookies: cfg.UISecureCookies,
	}, ui.Deps{Store: s.store, Remote: s.remote, Calls: uiCalls{gw: s.gateway, store: s.store}, Log: log, Clock: opt.Clock})
}
