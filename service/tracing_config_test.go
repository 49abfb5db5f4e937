package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/service"
)

// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG are read with the rest of the configuration and
// given to the tracer provider; an unknown sampler stops the start with a message naming it.
func TestTraceSamplerConfiguration(t *testing.T) {
	env := map[string]string{
		"MCPFLEET_DATABASE_URL":       "postgres://cyberos_app@127.0.0.1:5432/x",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.01",
	}
	cfg, err := service.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.TraceExport || cfg.TraceSampler != "parentbased_traceidratio" || cfg.TraceSamplerArg != "0.01" {
		t.Fatalf("FromEnv: export %v sampler %q arg %q", cfg.TraceExport, cfg.TraceSampler, cfg.TraceSamplerArg)
	}

	db := pgtest.New(t)
	cfg.DatabaseURL, cfg.HTTPAddr = db.AppURL, "127.0.0.1:0"
	cfg.TraceSampler = "sometimes"
	svc, err := service.Start(context.Background(), cfg, service.Options{ManualMonitor: true})
	if err == nil {
		_ = svc.Close(context.Background())
		t.Fatal("the service started with OTEL_TRACES_SAMPLER=sometimes")
	}
	if !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER") {
		t.Fatalf("error %q does not name OTEL_TRACES_SAMPLER", err)
	}
}

// A bad exporter variable stops the start with a message naming it, instead of exporting without it
// (the SDK's exporter logged and went on).
func TestTraceExporterConfiguration(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
	cfg, err := service.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t)
	cfg.DatabaseURL, cfg.HTTPAddr = db.AppURL, "127.0.0.1:0"
	// The exporter reads its variables from the process's environment, as the SDK's did.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization") // no value
	svc, err := service.Start(context.Background(), cfg, service.Options{ManualMonitor: true})
	if err == nil {
		_ = svc.Close(context.Background())
		t.Fatal("the service started with OTEL_EXPORTER_OTLP_HEADERS=authorization")
	}
	if !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Fatalf("error %q does not name OTEL_EXPORTER_OTLP_HEADERS", err)
	}
}
