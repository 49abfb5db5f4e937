// Package telemetry sets up mcpfleet's tracing and logging, and carries W3C trace context across
// actor messages, which protoactor-go does not do by itself.
//
// Nothing here is global: the service builds one Tracing and one logger and passes them down.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// TraceConfig configures tracing. Export is on when an OTLP endpoint is configured through the
// standard OTEL_* variables (the exporter reads the OTEL_EXPORTER_OTLP_* ones, see otlpConfigFromEnv,
// and the batch span processor its OTEL_BSP_* ones) or given as Endpoint. With export off, spans are not recorded but trace ids are
// still made and propagated, so the registration's trace_id, audit events and alerts carry one either
// way.
type TraceConfig struct {
	ServiceName string
	Export      bool
	// Endpoint, if set, is the OTLP/HTTP base URL (like OTEL_EXPORTER_OTLP_ENDPOINT, e.g.
	// http://127.0.0.1:4318; /v1/traces is appended) and overrides the environment.
	Endpoint string
	// SamplerName and SamplerArg are OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, as the service
	// configuration read them; see NewSampler.
	SamplerName, SamplerArg string
	// Sampler overrides the sampler when export is on; nil means NewSampler(SamplerName, SamplerArg).
	Sampler sdktrace.Sampler
	// Log receives the export's failures and, at shutdown, the count of spans dropped; nil: not logged.
	Log *slog.Logger
}

// Tracing owns the tracer provider.
type Tracing struct {
	Provider   *Provider
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
}

// NewTracing builds the tracer provider. Call Shutdown to flush spans.
func NewTracing(ctx context.Context, cfg TraceConfig) (*Tracing, error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "mcpfleet"
	}
	var b *batcher
	sampler := cfg.Sampler
	if cfg.Export || cfg.Endpoint != "" {
		if sampler == nil {
			var err error
			if sampler, err = NewSampler(cfg.SamplerName, cfg.SamplerArg); err != nil {
				return nil, fmt.Errorf("tracing: %w", err)
			}
		}
		ecfg, err := otlpConfigFromEnv(os.Getenv, cfg.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
		bcfg, err := batchConfigFromEnv(os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		res, err := tracingResource(cfg.ServiceName)
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		b = newBatcher(bcfg, newOTLPExporter(ecfg), res, cfg.Log)
	}
	tp := newProvider(sampler, b)
	return &Tracing{
		Provider:   tp,
		Tracer:     tp.Tracer("github.com/mcpfleet/mcpfleet"),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// tracingResource is the resource spans are exported with: OTEL_RESOURCE_ATTRIBUTES's attributes and
// service.name serviceName (which wins), as the SDK's WithResource merges them.
func tracingResource(serviceName string) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Environment(), resource.NewSchemaless(semconv.ServiceName(serviceName)))
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	return res, nil
}

// Shutdown flushes and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.Provider.Shutdown(ctx) }

// TraceID returns the hex trace id of the span in ctx, or "" if there is none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Carrier is the trace context carried inside an actor message: the span context of the operation that
// sent it. The zero value means "no trace".
type Carrier struct {
	SpanContext trace.SpanContext
}

// CarrierFrom captures the span context of ctx.
func CarrierFrom(ctx context.Context) Carrier {
	return Carrier{SpanContext: trace.SpanContextFromContext(ctx)}
}

// Context returns a context whose parent span is the carried one, for starting a child span inside
// an actor.
func (c Carrier) Context() context.Context {
	if !c.SpanContext.IsValid() {
		return context.Background()
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), c.SpanContext)
}

// TraceID returns the carried trace id in hex, or "".
func (c Carrier) TraceID() string {
	if !c.SpanContext.HasTraceID() {
		return ""
	}
	return c.SpanContext.TraceID().String()
}
