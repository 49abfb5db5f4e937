package telemetry_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

func TestNewSamplerNames(t *testing.T) {
	for _, tc := range []struct {
		name, arg string
		ok        bool
		desc      string
	}{
		{"", "", true, "ParentBased{root:AlwaysOnSampler"},
		{"parentbased_traceidratio", "0.01", true, "TraceIDRatioBased{0.01}"},
		{"traceidratio", "0.5", true, "TraceIDRatioBased{0.5}"},
		{"always_off", "", true, "AlwaysOffSampler"},
		{"PARENTBASED_ALWAYS_ON", "", true, "AlwaysOnSampler"},
		{"parentbased_traceidratio", "2", false, ""},
		{"sometimes", "", false, ""},
	} {
		s, err := telemetry.NewSampler(tc.name, tc.arg)
		if (err == nil) != tc.ok {
			t.Errorf("NewSampler(%q, %q) error = %v, want ok=%v", tc.name, tc.arg, err, tc.ok)
			continue
		}
		if err == nil && !strings.Contains(s.Description(), tc.desc) {
			t.Errorf("NewSampler(%q, %q) = %s, want it to contain %s", tc.name, tc.arg, s.Description(), tc.desc)
		}
	}
}

// newProvider returns a provider with the sampler as NewTracing builds it, recording into a span recorder.
func newProvider(t *testing.T, name, arg string) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	s, err := telemetry.NewSampler(name, arg)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func TestRatioSamplerKeepsTransitionsAndLinkedBatches(t *testing.T) {
	tp, _ := newProvider(t, "parentbased_traceidratio", "0.01")
	tr := tp.Tracer("test")
	sampled := 0
	var aSampled trace.SpanContext
	for range 20000 {
		_, span := tr.Start(context.Background(), "server.heartbeat")
		if span.SpanContext().IsSampled() {
			sampled++
			aSampled = span.SpanContext()
		}
		span.End()
	}
	// 1 % of 20000 is 200; a binomial deviation of 6 sigma is ±84.
	if sampled < 116 || sampled > 284 {
		t.Fatalf("%d of 20000 root spans sampled at ratio 0.01", sampled)
	}
	// A child of a sampled parent is sampled; of an unsampled one, not.
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), aSampled), "child")
	if !child.SpanContext().IsSampled() {
		t.Error("child of a sampled span not sampled")
	}
	// A transition is always sampled.
	for range 50 {
		_, span := tr.Start(context.Background(), "server.transition", trace.WithNewRoot())
		if !span.SpanContext().IsSampled() {
			t.Fatal("server.transition root not sampled")
		}
	}
	// A batch root linked to a sampled heartbeat is sampled; linked to none, it follows the ratio.
	_, flush := tr.Start(context.Background(), "stamper.flush", trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: aSampled}))
	if !flush.SpanContext().IsSampled() {
		t.Error("flush linked to a sampled heartbeat not sampled")
	}
}

// The sampler decides as the SDK's sampler of the same name, except for the spans it keeps.
func TestSamplerAgreesWithTheSDK(t *testing.T) {
	sdk := map[string]sdktrace.Sampler{
		"parentbased_always_on":    sdktrace.ParentBased(sdktrace.AlwaysSample()),
		"always_on":                sdktrace.AlwaysSample(),
		"traceidratio":             sdktrace.TraceIDRatioBased(0.25),
		"parentbased_traceidratio": sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25)),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, want := range sdk {
		got, err := telemetry.NewSampler(name, "0.25")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4000 {
			var tid trace.TraceID
			binary.BigEndian.PutUint64(tid[:8], rng.Uint64())
			binary.BigEndian.PutUint64(tid[8:], rng.Uint64())
			ctx := context.Background()
			switch i % 3 {
			case 1: // a sampled remote parent
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
			case 2: // an unsampled one
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}}))
			}
			p := sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: "server.heartbeat"}
			if g, w := got.ShouldSample(p).Decision, want.ShouldSample(p).Decision; g != w {
				t.Fatalf("%s, case %d: decided %v, the SDK %v", name, i%3, g, w)
			}
		}
	}
}

func TestAlwaysOffKeepsNothing(t *testing.T) {
	tp, _ := newProvider(t, "always_off", "")
	_, span := tp.Tracer("test").Start(context.Background(), "server.transition")
	if span.SpanContext().IsSampled() {
		t.Fatal("always_off sampled a transition")
	}
}

func TestWithSpanIDAndEventCarrier(t *testing.T) {
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TraceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	event := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ctx := telemetry.WithSpanID(context.Background(), telemetry.SpanIDFor(event))
	ctx, span := tr.Tracer.Start(ctx, "server.transition")
	if got, want := span.SpanContext().SpanID(), telemetry.SpanIDFor(event); got != want {
		t.Fatalf("span id %s, want %s", got, want)
	}
	// Only once: a child started from the returned context gets its own id.
	_, child := tr.Tracer.Start(ctx, "child")
	if child.SpanContext().SpanID() == span.SpanContext().SpanID() {
		t.Fatal("the fixed span id was used twice")
	}
	c := telemetry.EventCarrier(span.SpanContext().TraceID().String(), event)
	if c.SpanContext.TraceID() != span.SpanContext().TraceID() || c.SpanContext.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("EventCarrier = %v, want the transition span %v", c.SpanContext, span.SpanContext())
	}
	if telemetry.EventCarrier("not hex", event).SpanContext.IsValid() {
		t.Fatal("EventCarrier of a bad trace id is valid")
	}
}

func TestBatchLinksBounded(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	var b telemetry.BatchLinks
	for range telemetry.MaxLinks + 10 {
		b.Add(telemetry.Carrier{SpanContext: sampled})
		b.Add(telemetry.Carrier{SpanContext: unsampled})
	}
	if len(b.Links) != telemetry.MaxLinks || b.Dropped != 10 {
		t.Fatalf("links %d dropped %d, want %d and 10", len(b.Links), b.Dropped, telemetry.MaxLinks)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *telemetry.Metrics
	ctx := context.Background()
	m.HeartbeatAccepted(ctx)
	m.HeartbeatRejected(ctx, telemetry.ReasonNotRegistered)
	m.ServerStatus("", health.Healthy)
	m.Transition(ctx, health.Healthy, health.Unhealthy)
	m.DetectionLag(ctx, time.Second)
	m.Flush(ctx, telemetry.WriterCommands, 3, time.Millisecond, nil)
	m.Backlog(telemetry.WriterStamps, 4)
	m.ActorEvent("server_actor_restart")
	m.AlertDelivery(ctx, 2, errors.New("x"))
	m.HTTPRequest(ctx, "POST", "/v1/mcp/servers/heartbeat", 200, time.Millisecond)
	var o *telemetry.MCPObserver
	_, op := o.Start(ctx, telemetry.MCPCallTool, uuid.New(), "weather", "forecast")
	op.End(ctx, nil)
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// newPrometheusMetrics builds both metric sets and the instruments on them, shut down at the end of t.
func newPrometheusMetrics(t *testing.T) (*telemetry.Prometheus, *telemetry.Metrics) {
	t.Helper()
	p, err := telemetry.NewPrometheus("mcpfleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(p.Provider, p.PrivateProvider)
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

func TestPrometheusExposition(t *testing.T) {
	p, m := newPrometheusMetrics(t)
	ctx := context.Background()
	tenant := uuid.New()
	m.HeartbeatAccepted(ctx)
	m.HeartbeatAccepted(ctx)
	m.HeartbeatRejected(ctx, telemetry.StatusReason(404))
	m.ServerStatus("", health.Healthy)
	m.ServerStatus("", health.Healthy)
	m.ServerStatus(health.Healthy, health.Unhealthy)
	m.Transition(ctx, health.Healthy, health.Unhealthy)
	m.DetectionLag(ctx, 31*time.Second)
	m.Flush(ctx, telemetry.WriterCommands, 3, 2*time.Millisecond, nil)
	m.Flush(ctx, telemetry.WriterStamps, 500, 4*time.Millisecond, errors.New("down"))
	m.Backlog(telemetry.WriterCommands, 7)
	m.NodeLoad(30*time.Millisecond, 4.5, true)
	m.ActorEvent("server_actor_restart")
	m.ActorEvent("monitor_stall") // not a restart: not counted
	m.AlertDelivery(ctx, 1, errors.New("503"))
	m.AlertDelivery(ctx, 2, nil)
	m.HTTPRequest(ctx, "POST", "/v1/mcp/servers/heartbeat", 200, time.Millisecond)
	m.HTTPRequest(ctx, "BREW", "", 404, time.Millisecond)
	o := &telemetry.MCPObserver{Metrics: m}
	_, op := o.Start(ctx, telemetry.MCPHandshake, tenant, "weather", "")
	op.End(ctx, &mcpclient.Error{Class: mcpclient.ClassAuth, Reason: "no"})

	out := scrape(t, p.Handler)
	if strings.Contains(out, "weather") || strings.Contains(out, tenant.String()) {
		t.Errorf("the public metrics name a tenant or its server:\n%s", out)
	}
	private := scrape(t, p.PrivateHandler)
	for _, want := range []string{
		`mcpfleet_mcp_server_operation_duration_seconds_count{kind="handshake",outcome="auth",server="weather",tenant_id="` + tenant.String() + `"} 1`,
		`mcpfleet_heartbeats_total{outcome="accepted"} 2`, // the private handler serves the public set too
		`go_goroutines`,
	} {
		if !strings.Contains(private, want) {
			t.Errorf("the private metrics lack %s", want)
		}
	}
	if n := strings.Count(private, "\ntarget_info{"); n != 1 {
		t.Errorf("the private metrics have %d target_info series, want 1", n)
	}
	for _, want := range []string{
		`mcpfleet_heartbeats_total{outcome="accepted"} 2`,
		`mcpfleet_heartbeats_total{outcome="rejected",reason="not_registered"} 1`,
		`mcpfleet_servers{status="healthy"} 1`,
		`mcpfleet_servers{status="unhealthy"} 1`,
		`mcpfleet_servers{status="deregistered"} 0`,
		`mcpfleet_server_transitions_total{from="healthy",to="unhealthy"} 1`,
		`mcpfleet_detection_lag_seconds_bucket{le="32.5"} 1`,
		`mcpfleet_writer_batch_size_bucket{writer="stamps",le="512"} 1`,
		`mcpfleet_writer_flush_duration_seconds_count{outcome="error",writer="stamps"} 1`,
		`mcpfleet_writer_backlog{writer="commands"} 7`,
		`mcpfleet_node_sched_latency_p99_seconds 0.03`,
		`mcpfleet_node_runnable 4.5`,
		`mcpfleet_node_saturated 1`,
		`mcpfleet_actor_restarts_total{event="server_actor_restart"} 1`,
		`mcpfleet_alert_deliveries_total{outcome="delivered"} 1`,
		`mcpfleet_alert_deliveries_total{outcome="failed"} 1`,
		`mcpfleet_alert_retries_total 1`,
		`http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",http_route="/v1/mcp/servers/heartbeat"} 1`,
		`http_server_request_duration_seconds_count{http_request_method="_OTHER",http_response_status_code="404"} 1`,
		`mcpfleet_mcp_client_operation_duration_seconds_count{kind="handshake",outcome="auth"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(out, "monitor_stall") {
		t.Error("a non-restart event was counted as a restart")
	}
	if t.Failed() {
		t.Log(out)
	}
}

// The public series stay bounded whatever the requests and operations: routes past MaxHTTPSeries
// fold into one _overflow series, and a kind or an outcome outside the closed sets is "other".
func TestPublicLabelSetsAreBounded(t *testing.T) {
	p, m := newPrometheusMetrics(t)
	ctx := context.Background()
	for i := range 2 * telemetry.MaxHTTPSeries {
		m.HTTPRequest(ctx, "GET", fmt.Sprintf("/route-%d", i), 200, time.Millisecond)
	}
	o := &telemetry.MCPObserver{Metrics: m}
	_, op := o.Start(ctx, "made-up-kind", uuid.New(), "weather", "")
	op.End(ctx, &mcpclient.Error{Class: mcpclient.Class("made-up-class")})

	out := scrape(t, p.Handler)
	if n := strings.Count(out, "\nhttp_server_request_duration_seconds_count{"); n != telemetry.MaxHTTPSeries+1 {
		t.Errorf("%d HTTP series, want %d and one overflow", n, telemetry.MaxHTTPSeries)
	}
	for _, want := range []string{
		`http_server_request_duration_seconds_count{http_route="_overflow"} ` + fmt.Sprint(telemetry.MaxHTTPSeries),
		`mcpfleet_mcp_client_operation_duration_seconds_count{kind="other",outcome="other"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the public metrics lack %s", want)
		}
	}
	if strings.Contains(out, "made-up") {
		t.Error("a label value outside the closed sets reached the public metrics")
	}
}
