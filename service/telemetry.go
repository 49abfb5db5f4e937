package service

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// startMetrics builds the service's meter provider (served at /metrics from its own Prometheus
// registry) and its instruments.
func (s *Service) startMetrics() error {
	var err error
	if s.prom, err = telemetry.NewPrometheus("mcpfleet"); err != nil {
		return err
	}
	s.metrics, err = telemetry.NewMetrics(s.prom.Provider)
	return err
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
