package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// spySampler delegates to a sampler and keeps what it was asked.
type spySampler struct {
	sdktrace.Sampler
	mu     sync.Mutex
	params []sdktrace.SamplingParameters
}

func (s *spySampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	s.params = append(s.params, p)
	s.mu.Unlock()
	return s.Sampler.ShouldSample(p)
}

func (s *spySampler) asked() []sdktrace.SamplingParameters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sdktrace.SamplingParameters(nil), s.params...)
}

var testPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// otelginMiddleware is the middleware this package installed before tracing replaced it, configured
// as it was: the baseline of the benchmark and of the tests that must fail on it.
func otelginMiddleware(tp trace.TracerProvider) gin.HandlerFunc {
	return otelgin.Middleware("mcpfleet",
		otelgin.WithTracerProvider(tp),
		otelgin.WithPropagators(testPropagator),
		otelgin.WithMeterProvider(noop.NewMeterProvider()),
		otelgin.WithGinFilter(func(c *gin.Context) bool { return tracedRoute(c.FullPath()) }))
}

// middleware builds a tracing middleware; names is the engine's table of span names.
type middleware func(names *spanNames) gin.HandlerFunc

func newTracing(tp trace.TracerProvider) middleware {
	return func(names *spanNames) gin.HandlerFunc { return tracing(tp, testPropagator, names) }
}

func newOtelgin(tp trace.TracerProvider) middleware {
	return func(*spanNames) gin.HandlerFunc { return otelginMiddleware(tp) }
}

// tracedEngine serves POST /v1/mcp/servers/heartbeat (answering 200, or 503 with ?fail) and
// /healthz behind mw and the traceparent answer, and hands each request's span context to seen.
func tracedEngine(mw middleware, seen func(trace.SpanContext)) *gin.Engine {
	r := newEngine()
	names := &spanNames{}
	if mw != nil {
		r.Use(mw(names))
		s := &Server{deps: Deps{Propagator: testPropagator}}
		r.Use(s.traceparentOut())
	}
	h := func(c *gin.Context) {
		if seen != nil {
			seen(trace.SpanContextFromContext(c.Request.Context()))
		}
		if c.Query("fail") != "" {
			c.Status(http.StatusServiceUnavailable)
			return
		}
		c.Status(http.StatusOK)
	}
	r.POST(heartbeatRoute, h)
	r.GET("/healthz", h)
	names.add(r.Routes())
	return r
}

func serve(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func newProvider(s sdktrace.Sampler) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSpanProcessor(rec)), rec
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

const (
	incomingTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan  = "00f067aa0ba902b7"
)

// TestTracingUnsampledBuildsNothing: a request the sampler drops is not recorded and no attribute is
// built for it (the sampler is asked with none), yet its context carries a span context in a trace of
// its own, which audit events, trace_id fields and the traceparent answered name; and it allocates
// only what propagation needs. otelgin failed the attribute and allocation checks.
func TestTracingUnsampledBuildsNothing(t *testing.T) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
		header  []string
	}{
		{"export off", sdktrace.NeverSample(), nil},
		{"ratio 0, no parent", must(telemetry.NewSampler("parentbased_traceidratio", "0")), nil},
		{"unsampled parent", must(telemetry.NewSampler("parentbased_always_on", "")),
			[]string{"traceparent", "00-" + incomingTrace + "-" + incomingSpan + "-00"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spy := &spySampler{Sampler: c.sampler}
			tp, rec := newProvider(spy)
			var got trace.SpanContext
			h := tracedEngine(newTracing(tp), func(sc trace.SpanContext) { got = sc })
			w := serve(h, "POST", heartbeatRoute, c.header...)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d", w.Code)
			}
			if !got.IsValid() || got.IsSampled() {
				t.Fatalf("request context holds span context %+v, want a valid unsampled one", got)
			}
			if c.header != nil && got.TraceID().String() != incomingTrace {
				t.Errorf("trace %s, want the traceparent's %s", got.TraceID(), incomingTrace)
			}
			if tpOut := w.Header().Get("traceparent"); !strings.Contains(tpOut, got.TraceID().String()+"-"+got.SpanID().String()) {
				t.Errorf("answered traceparent %q, want the request's span %s", tpOut, got.SpanID())
			}
			if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
				t.Errorf("%d spans recorded, want none", n)
			}
			asked := spy.asked()
			if len(asked) != 1 {
				t.Fatalf("sampler asked %d times, want once", len(asked))
			}
			if len(asked[0].Attributes) != 0 {
				t.Errorf("the sampler was given %d attributes, built for a span nobody records: %v", len(asked[0].Attributes), asked[0].Attributes)
			}
			if asked[0].Name != "POST "+heartbeatRoute || asked[0].Kind != trace.SpanKindServer {
				t.Errorf("the sampler was asked about %q kind %v", asked[0].Name, asked[0].Kind)
			}
		})
	}
}

// maxUnsampledAllocs bounds what the middleware may allocate for a request without traceparent that is
// not sampled: the span (the SDK's non-recording span), the context holding it, the request copied
// with that context, and the traceparent answered (its value and the header slice). otelgin allocated
// 27 (at v0.65.0).
const maxUnsampledAllocs = 5

func TestTracingUnsampledAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	tp, _ := newProvider(sdktrace.NeverSample())
	bare := allocsPerRequest(tracedEngine(nil, nil), heartbeatRoute)
	for _, c := range []struct {
		name string
		mw   middleware
		max  float64
	}{{"tracing", newTracing(tp), maxUnsampledAllocs}} {
		if got := allocsPerRequest(tracedEngine(c.mw, nil), heartbeatRoute) - bare; got > c.max {
			t.Errorf("%s: an unsampled request allocates %.0f times more than without tracing, want at most %.0f", c.name, got, c.max)
		} else {
			t.Logf("%s: %.0f allocations per unsampled request", c.name, got)
		}
	}
}

// allocsPerRequest is what h allocates serving a POST to target without a body (the recorder reused).
func allocsPerRequest(h http.Handler, target string) float64 {
	req := httptest.NewRequest("POST", target, nil)
	w := httptest.NewRecorder()
	return testing.AllocsPerRun(200, func() {
		w.Body.Reset()
		clear(w.Header())
		h.ServeHTTP(w, req)
	})
}

// TestTracingSampledChild: a sampled incoming traceparent gets a recorded child span with the HTTP
// server attributes, named as otelgin named it; a 5xx marks it failed; filtered routes get no span.
func TestTracingSampledChild(t *testing.T) {
	tp, rec := newProvider(must(telemetry.NewSampler("parentbased_traceidratio", "0")))
	var got trace.SpanContext
	h := tracedEngine(newTracing(tp), func(sc trace.SpanContext) { got = sc })
	w := serve(h, "POST", heartbeatRoute+"?fail=1", "traceparent", "00-"+incomingTrace+"-"+incomingSpan+"-01", "User-Agent", "beat/1")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", w.Code)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans recorded, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "POST "+heartbeatRoute || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().SpanID().String() != incomingSpan || s.SpanContext().TraceID().String() != incomingTrace || !s.Parent().IsRemote() {
		t.Errorf("span parent %v in trace %s, want the traceparent's span %s in %s", s.Parent().SpanID(), s.SpanContext().TraceID(), incomingSpan, incomingTrace)
	}
	if got.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("the request's context holds span %s, the recorded span is %s", got.SpanID(), s.SpanContext().SpanID())
	}
	a := attrsOf(s)
	for k, want := range map[attribute.Key]string{
		"http.request.method": "POST", "http.route": heartbeatRoute, "url.path": heartbeatRoute,
		"url.scheme": "http", "server.address": "mcpfleet", "user_agent.original": "beat/1",
		"network.protocol.version": "1.1", "client.address": "192.0.2.1", "network.peer.address": "192.0.2.1",
	} {
		if got := a[k].String(); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
	if got := a["http.response.status_code"].AsInt64(); got != http.StatusServiceUnavailable {
		t.Errorf("http.response.status_code = %d", got)
	}
	if s.Status().Code != codes.Error {
		t.Errorf("status %v, want Error for a 503", s.Status())
	}
	if tpOut := w.Header().Get("traceparent"); !strings.Contains(tpOut, incomingTrace+"-"+s.SpanContext().SpanID().String()+"-01") {
		t.Errorf("answered traceparent %q, want the recorded span", tpOut)
	}

	got = trace.SpanContext{}
	serve(h, "GET", "/healthz", "traceparent", "00-"+incomingTrace+"-"+incomingSpan+"-01")
	if got.SpanID().String() != "0000000000000000" && got.SpanID().String() != incomingSpan {
		t.Errorf("/healthz got span %s, want none of its own", got.SpanID())
	}
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans after /healthz, want still 1", n)
	}
}

// TestTracingSampledAttributesArePerRequest: the attributes of recorded spans are collected in pooled
// slices; each span gets exactly its own request's, none left over from an earlier one, and a request
// whose handler panics still gets its request attributes (not an answer it never gave).
func TestTracingSampledAttributesArePerRequest(t *testing.T) {
	tp, rec := newProvider(sdktrace.AlwaysSample())
	h := tracedEngine(newTracing(tp), nil)
	panicky := gin.New()
	panicky.Use(gin.CustomRecovery(func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
	names := &spanNames{}
	panicky.Use(tracing(tp, testPropagator, names))
	panicky.POST(heartbeatRoute, func(*gin.Context) { panic("handler bug") })
	names.add(panicky.Routes())

	serve(h, "POST", heartbeatRoute+"?fail=1", "User-Agent", "first/1")
	serve(h, "POST", heartbeatRoute)
	serve(panicky, "POST", heartbeatRoute, "User-Agent", "third/3")
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	first, second, third := attrsOf(spans[0]), attrsOf(spans[1]), attrsOf(spans[2])
	if first["user_agent.original"].AsString() != "first/1" || first["http.response.status_code"].AsInt64() != 503 {
		t.Errorf("first span's attributes %v", first)
	}
	if _, ok := second["user_agent.original"]; ok || second["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("second span's attributes %v: want its own answer and no user agent (it sent none)", second)
	}
	if len(spans[1].Attributes()) != len(second) {
		t.Errorf("second span has %d attributes, %d distinct: a duplicate from an earlier request", len(spans[1].Attributes()), len(second))
	}
	if _, ok := third["http.response.status_code"]; ok || third["user_agent.original"].AsString() != "third/3" || third["http.route"].AsString() != heartbeatRoute {
		t.Errorf("panicking request's attributes %v: want the request's, no status code", third)
	}
}

// TestTracingClientAddressIsGins: a recorded span's client.address is what gin's ClientIP answers on
// the service's engine, for a peer that names itself and for the forwarding headers gin trusts; and
// the common case, an IPv4 peer and no such header, costs no allocation (gin's parses and formats).
func TestTracingClientAddressIsGins(t *testing.T) {
	tp, rec := newProvider(sdktrace.AlwaysSample())
	r := newEngine()
	names := &spanNames{}
	r.Use(tracing(tp, testPropagator, names))
	var gins string
	r.POST(heartbeatRoute, func(c *gin.Context) { gins = c.ClientIP() })
	names.add(r.Routes())
	for _, tc := range []struct {
		name, remote string
		header       []string
		want         string
	}{
		{"IPv4 peer", "192.0.2.1:4711", nil, "192.0.2.1"},
		{"X-Forwarded-For", "192.0.2.1:4711", []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"X-Forwarded-For, two hops", "192.0.2.1:4711", []string{"X-Forwarded-For", "203.0.113.7, 198.51.100.9"}, "203.0.113.7"},
		{"X-Real-IP", "192.0.2.1:4711", []string{"X-Real-IP", "198.51.100.2"}, "198.51.100.2"},
		{"IPv6 peer", "[2001:db8::1]:4711", nil, "2001:db8::1"},
		{"IPv4-mapped IPv6 peer", "[::ffff:192.0.2.1]:4711", nil, "192.0.2.1"},
		{"no address", "pipe", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			req := httptest.NewRequest("POST", heartbeatRoute, nil)
			req.RemoteAddr = tc.remote
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			r.ServeHTTP(httptest.NewRecorder(), req)
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			got := attrsOf(spans[0])["client.address"].AsString()
			if got != gins || got != tc.want {
				t.Errorf("client.address %q, gin's ClientIP %q, want %q", got, gins, tc.want)
			}
		})
	}
	req := httptest.NewRequest("POST", heartbeatRoute, nil)
	req.RemoteAddr = "192.0.2.1:4711"
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = req
	if n := testing.AllocsPerRun(100, func() { spanClientAddress(c, "192.0.2.1") }); n != 0 {
		t.Errorf("client address of an IPv4 peer without forwarding headers: %v allocations, want 0", n)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkTracingMiddleware compares otelgin with tracing on one request to the heartbeat route,
// unsampled (export off, the default) and sampled (export on, no exporter), against no middleware.
// Run: go test -run '^$' -bench TracingMiddleware -benchmem ./httpapi/
func BenchmarkTracingMiddleware(b *testing.B) {
	never, _ := newProvider(sdktrace.NeverSample())
	always := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Run("none", func(b *testing.B) { benchRequests(b, tracedEngine(nil, nil)) })
	for _, c := range []struct {
		name string
		mw   func(trace.TracerProvider) middleware
	}{{"otelgin", newOtelgin}, {"tracing", newTracing}} {
		b.Run(c.name+"/unsampled", func(b *testing.B) { benchRequests(b, tracedEngine(c.mw(never), nil)) })
		b.Run(c.name+"/sampled", func(b *testing.B) { benchRequests(b, tracedEngine(c.mw(always), nil)) })
	}
}

func benchRequests(b *testing.B, h http.Handler) {
	req := httptest.NewRequest("POST", heartbeatRoute, nil)
	req.Header.Set("User-Agent", "mcpfleet-load")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		w.Body.Reset()
		clear(w.Header())
		h.ServeHTTP(w, req)
	}
}

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	m.Run()
}
