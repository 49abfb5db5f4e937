package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// startMetrics builds the service's meter providers and its instruments: the public, tenant-free set
// is served at /metrics on the API's address, both sets on the metrics listener (serveMetrics).
func (s *Service) startMetrics() error {
	var err error
	if s.prom, err = telemetry.NewPrometheus("mcpfleet"); err != nil {
		return err
	}
	s.metrics, err = telemetry.NewMetrics(s.prom.Provider, s.prom.PrivateProvider)
	return err
}

// serveMetrics serves every metric, the per-server series included, at /metrics on addr
// (MCPFLEET_METRICS_ADDR; nothing when empty), a listener of its own: the API's /metrics has only
// the public set. A failure to listen fails the start.
func (s *Service) serveMetrics(addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s (MCPFLEET_METRICS_ADDR): %w", addr, err)
	}
	if ip, err := netip.ParseAddr(hostOf(ln.Addr().String())); err == nil && !ip.IsLoopback() {
		s.log.Warn("the metrics listener is not on loopback: its series name tenants and their servers", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.prom.PrivateHandler)
	s.metricsLn = ln
	s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	go func() { _ = s.metricsSrv.Serve(ln) }()
	s.log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// MetricsURL is the URL of every metric, the per-server series included (empty when
// MCPFLEET_METRICS_ADDR is off).
func (s *Service) MetricsURL() string {
	if s.metricsLn == nil {
		return ""
	}
	return "http://" + s.metricsLn.Addr().String() + "/metrics"
}

// pgxTracer is the SQL tracer when traces are exported, else nil (no per-statement cost at all).
func (s *Service) pgxTracer(opt Options) pgx.QueryTracer {
	if !s.cfg.TraceExport && opt.TraceEndpoint == "" {
		return nil
	}
	return telemetry.NewPgxTracer(s.tracing.Provider, s.prom.Provider)
}

// Metrics are the service's instruments.
func (s *Service) Metrics() *telemetry.Metrics { return s.metrics }

// MCPObserver traces and counts MCP client operations with the service's tracer and metrics: call
// Start before an mcpclient operation and End with its error.
func (s *Service) MCPObserver() *telemetry.MCPObserver {
	return &telemetry.MCPObserver{Tracer: s.tracing.Tracer, Metrics: s.metrics}
}

// FlushTraces exports the spans ended so far (tests, before they look in the trace backend).
func (s *Service) FlushTraces(ctx context.Context) error { return s.tracing.Provider.ForceFlush(ctx) }
