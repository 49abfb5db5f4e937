package actors

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// spanTestActor is a server actor with links to a registration and a last heartbeat, tracing into tp.
func spanTestActor(tp trace.TracerProvider) *serverActor {
	sc := func(b byte) telemetry.Carrier {
		return telemetry.Carrier{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{b, 1}, SpanID: trace.SpanID{b, 2}, TraceFlags: trace.FlagsSampled, Remote: true})}
	}
	tenant := uuid.New()
	rec := newServerRecord(uuid.New(), moduleKey{tenantID: tenant, moduleName: "weather"})
	rec.registrationTrace, rec.lastHeartbeatTrace = linkOf(sc(1)), linkOf(sc(2))
	return &serverActor{rec: rec, deps: &serverDeps{tracer: tp.Tracer("test")}}
}

// A recorded transition span has the server's identity, the change and the lag as attributes and links
// to the server's last heartbeat and registration, all added after the sampler decided; an unrecorded
// one builds none of them.
func TestTransitionSpanAttributesOnlyWhenRecorded(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	a := spanTestActor(tp)
	tr := &lifecycle.Transition{EventID: uuid.New(), From: health.Healthy, To: health.Unhealthy, Lag: 31 * time.Second}
	a.startTransitionSpan(tr).End()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		got[kv.Key] = kv.Value
	}
	for k, want := range map[attribute.Key]string{"mcpfleet.server_id": a.rec.id().String(), "mcpfleet.tenant_id": a.rec.tenantID().String(),
		"mcpfleet.module_name": "weather", "mcpfleet.status.from": "healthy", "mcpfleet.status.to": "unhealthy"} {
		if got[k].AsString() != want {
			t.Errorf("%s = %q, want %q", k, got[k].AsString(), want)
		}
	}
	if got["mcpfleet.lag_ms"].AsInt64() != 31000 {
		t.Errorf("mcpfleet.lag_ms = %d", got["mcpfleet.lag_ms"].AsInt64())
	}
	if s.Name() != telemetry.AlwaysSampledSpan || s.Parent().IsValid() {
		t.Errorf("span %q with parent %v: want a root %q", s.Name(), s.Parent(), telemetry.AlwaysSampledSpan)
	}
	if l := s.Links(); len(l) != 2 || l[0].SpanContext.TraceID() != (trace.TraceID{2, 1}) || l[1].SpanContext.TraceID() != (trace.TraceID{1, 1}) {
		t.Errorf("links %v: want the last heartbeat's, then the registration's", l)
	}

	// Nothing exported: the span is not recorded, and starting it builds neither attributes nor links.
	off := spanTestActor(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))
	allocs := testing.AllocsPerRun(100, func() { off.startTransitionSpan(tr).End() })
	t.Logf("allocations per unrecorded transition span: %.0f", allocs)
	if allocs > 3 {
		t.Errorf("an unrecorded transition span costs %.0f allocations, want at most 3 (none for attributes or links)", allocs)
	}
}
