package service

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/ui"
)

// newUI narrows the configuration into the dashboard's and builds it, after the gateway (its approvals).
// The dashboard reads the health model's clock, so a test's fake clock reaches the durations it shows.
// Its operator actions go through rem (the remote side, wrapped to signal the MCP endpoint).
func (s *Service) newUI(cfg Config, opt Options, log *slog.Logger, rem ui.Remote) (*ui.UI, error) {
	return ui.New(ui.Config{
		HeartbeatInterval: cfg.HeartbeatInterval, FlapWindow: cfg.FlapWindow, FlapThreshold: cfg.FlapThreshold,
		SecureCookies: cfg.UISecureCookies, TraceURL: cfg.TraceURL,
	}, ui.Deps{Store: s.store, Auth: apiAuth{s}, Remote: rem, Calls: uiCalls{gw: s.gateway, store: s.store}, Log: log, Clock: opt.Clock})
}

// apiAuth is the API's authentication for the dashboard. The dashboard is built before the API (which
// mounts it), so this reaches the API only when a request comes, by which time it exists.
type apiAuth struct{ s *Service }

func (a apiAuth) Authenticate(r *http.Request) (persistence.Principal, *httpapi.Problem) {
	return a.s.api.Authenticate(r)
}

func (a apiAuth) Guard(r *http.Request, hash []byte, lookup func(context.Context) error) error {
	return a.s.api.Guard(r, hash, lookup)
}
