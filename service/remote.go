package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/mcpfleet/mcpfleet/remote"
)

// newRemote narrows the configuration into the MCP client side's own and builds it. Probes run every
// heartbeat interval: a probe is the heartbeat of a server that cannot send one. Credentials sealed in
// the legacy format are sealed again, bound to their endpoint's origin, before anything can use them; a
// failure of that pass is logged, not fatal (the credentials it missed read as credential_unreadable
// until the next start).
func (s *Service) newRemote(ctx context.Context, cfg Config, log *slog.Logger, fleet remote.Fleet) *remote.Service {
	if cfg.SecretKey == nil {
		log.Warn("MCPFLEET_SECRET_KEY is not set: MCP servers that need a credential cannot be configured or reached")
	}
	r := remote.New(remote.Config{
		AllowHosts: cfg.EndpointAllowlist, Timeout: cfg.MCPTimeout, ProbeInterval: cfg.HeartbeatInterval,
		ProbeConcurrency: cfg.ProbeConcurrency, ClientVersion: "mcpfleet", MaxToolsPerServer: cfg.MaxToolsPerServer, MaxCatalogueBytes: cfg.MaxCatalogueBytes,
	}, remote.Deps{Store: s.store, Fleet: fleet, Key: cfg.SecretKey, Log: log, Observer: s.MCPObserver()})
	if n, err := r.ResealLegacyCredentials(ctx); err != nil {
		log.Error("legacy credentials not all sealed again for their endpoint's origin", "resealed", n, "err", err)
	} else if n > 0 {
		log.Info("legacy credentials sealed again for their endpoint's origin", "resealed", n)
	}
	return r
}

// Remote is the MCP client side (tests drive probing through it).
func (s *Service) Remote() *remote.Service { return s.remote }

// splitList splits a comma-separated list, trimming entries and dropping empty ones.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$`)

// validateMCPClient checks the MCP client settings.
func (c Config) validateMCPClient() []error {
	var errs []error
	for _, e := range c.EndpointAllowlist {
		if _, err := netip.ParsePrefix(e); err == nil {
			continue
		}
		if _, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			continue
		}
		if len(e) > 253 || !hostNameRE.MatchString(e) {
			errs = append(errs, fmt.Errorf("MCPFLEET_ENDPOINT_ALLOWLIST: %q is not a host name, an IP address or a CIDR prefix", e))
		}
	}
	if c.MCPTimeout != 0 && (c.MCPTimeout < 100*time.Millisecond || c.MCPTimeout > 5*time.Minute) {
		errs = append(errs, fmt.Errorf("MCPFLEET_MCP_TIMEOUT=%s: want 100ms to 5m", c.MCPTimeout))
	}
	if c.ProbeConcurrency < 0 || c.ProbeConcurrency > 10000 {
		errs = append(errs, fmt.Errorf("MCPFLEET_PROBE_CONCURRENCY=%d: want 1 to 10000", c.ProbeConcurrency))
	}
	return errs
}
