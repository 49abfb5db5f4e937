package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// seqIDs hands out ids from a counter, so two providers given the same script make the same ids.
type seqIDs struct{ n atomic.Uint64 }

func (g *seqIDs) next() uint64 { return g.n.Add(1) }

func (g *seqIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	tid[0], tid[15] = 0xaa, byte(g.next())
	return tid, g.NewSpanID(context.Background(), tid)
}

func (g *seqIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	n := g.next()
	return trace.SpanID{0xbb, byte(n >> 8), byte(n)}
}

var t0 = time.Date(2026, 12, 5, 3, 0, 0, 123456789, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// spanScript uses every part of the tracing API this service (and otelpgx) uses, with explicit
// times, and returns the span context of every span it started, recorded or not.
func spanScript(t *testing.T, tp trace.TracerProvider) []trace.SpanContext {
	t.Helper()
	var started []trace.SpanContext
	start := func(tr trace.Tracer, ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
		ctx, s := tr.Start(ctx, name, opts...)
		started = append(started, s.SpanContext())
		return ctx, s
	}
	a := tp.Tracer("github.com/mcpfleet/mcpfleet", trace.WithInstrumentationVersion("1.2"), trace.WithSchemaURL("https://x/schema"),
		trace.WithInstrumentationAttributes(attribute.Bool("scoped", true)))
	b := tp.Tracer("")
	every := []attribute.KeyValue{
		attribute.String("s", "välue"), attribute.String("empty", ""), attribute.Bool("b", true), attribute.Bool("f", false),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("d", 3.25),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2, 1 << 40}),
		attribute.Float64Slice("ds", []float64{0.5, -1}), attribute.StringSlice("ss", []string{"a", "", "c"}),
		{Key: "nothing"}, {Key: "", Value: attribute.StringValue("no key")},
	}
	ts, err := trace.ParseTraceState("vendor=a1,other=b2")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{9},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	linked := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{4}, SpanID: trace.SpanID{5},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})

	// An HTTP server span under a remote parent, with everything on it.
	ctx, srv := start(a, trace.ContextWithRemoteSpanContext(context.Background(), remote), "POST /v1/mcp/servers/heartbeat",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(0)), trace.WithAttributes(every...),
		trace.WithLinks(trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.Int("l", 1), attribute.Int("l", 2)}}))
	srv.SetAttributes(attribute.String("s", "again"), attribute.Int("http.response.status_code", 500))
	srv.AddEvent("note", trace.WithTimestamp(at(1)), trace.WithAttributes(attribute.String("k", "v"), attribute.String("k", "w")))
	srv.RecordError(errors.New("boom"), trace.WithTimestamp(at(2)))
	srv.RecordError(nil)
	srv.SetStatus(codes.Error, "boom")
	srv.SetStatus(codes.Unset, "ignored")
	srv.SetName("POST /v1/mcp/servers/heartbeat (renamed)")
	// Its child: Ok is final.
	_, child := start(b, ctx, "server.heartbeat", trace.WithTimestamp(at(1)))
	child.SetAttributes(attribute.String("mcpfleet.server_id", "x"))
	child.SetStatus(codes.Ok, "kept without a description")
	child.SetStatus(codes.Error, "too late")
	child.End(trace.WithTimestamp(at(2)))
	child.End(trace.WithTimestamp(at(9))) // a second End changes nothing
	child.SetAttributes(attribute.String("after", "end"))
	srv.End(trace.WithTimestamp(at(3)))

	// A root with links (a batch flush), and a NewRoot under a parent.
	_, flush := start(a, context.Background(), "stamper.flush", trace.WithNewRoot(), trace.WithTimestamp(at(4)),
		trace.WithLinks(trace.Link{SpanContext: srv.SpanContext()}, trace.Link{}))
	flush.AddLink(trace.Link{SpanContext: linked})
	flush.End(trace.WithTimestamp(at(5)))
	_, root := start(a, ctx, "new root", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at(5)))
	root.End(trace.WithTimestamp(at(5)))

	// Past the limits: attributes, events, links.
	_, big := start(b, context.Background(), "big", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(at(6)))
	for i := range 130 {
		big.SetAttributes(attribute.Int(fmt.Sprintf("a%03d", i), i))
		big.AddEvent(fmt.Sprintf("e%03d", i), trace.WithTimestamp(at(6)))
		big.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{byte(i + 1)}})})
	}
	many := make([]attribute.KeyValue, 130)
	for i := range many {
		many[i] = attribute.Int(fmt.Sprintf("x%03d", i), i)
	}
	big.AddEvent("crowded", trace.WithTimestamp(at(7)), trace.WithAttributes(many...))
	big.SetAttributes(attribute.Int("a000", -1)) // an existing key past the limit is still set
	big.End(trace.WithTimestamp(at(8)))

	// An unsampled remote parent: a dropped span with the parent's trace id, not exported.
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{8}, SpanID: trace.SpanID{8}, Remote: true})
	_, dropped := start(a, trace.ContextWithRemoteSpanContext(context.Background(), unsampled), "dropped")
	if dropped.IsRecording() {
		t.Error("a span under an unsampled parent records")
	}
	dropped.End()

	// A panic through a deferred End is recorded and goes on.
	func() {
		defer func() {
			if r := recover(); r != "oops" {
				t.Errorf("recovered %v, want the panic to go on", r)
			}
		}()
		_, s := start(b, context.Background(), "panics", trace.WithTimestamp(at(9)))
		defer s.End(trace.WithTimestamp(at(10)))
		panic("oops")
	}()
	return started
}

// exported is one exported span with its resource and scope.
type exported struct {
	res   *resourcepb.Resource
	scope *commonpb.InstrumentationScope
	span  *tracepb.Span
}

// exportedSpans decodes bodies into their spans, keyed by span id. The time of an event the script
// could not give one (a panic's) is zeroed.
func exportedSpans(t *testing.T, bodies [][]byte) map[string]exported {
	t.Helper()
	out := map[string]exported{}
	for _, body := range bodies {
		for _, rs := range decodeRequest(t, body).ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.Name == "panics" {
						for _, e := range s.Events {
							e.TimeUnixNano = 0
						}
					}
					if _, dup := out[string(s.SpanId)]; dup {
						t.Errorf("span %q exported twice", s.Name)
					}
					out[string(s.SpanId)] = exported{rs.Resource, ss.Scope, s}
				}
			}
		}
	}
	return out
}

// The provider is held to the SDK: the same script, through the SDK's TracerProvider and OTLP
// exporter and through Provider, exports the same resource, scopes and spans — every field — and
// gives every span, recorded or not, the same span context.
func TestProviderAgreesWithTheSDK(t *testing.T) {
	sampler, err := NewSampler("parentbased_always_on", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,service.name=overridden")
	service := semconv.ServiceName("mcpfleet")

	sdkCol := newCollector(t)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sdkCol.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(&seqIDs{}),
		sdktrace.WithResource(resource.NewSchemaless(service)))
	wantStarted := spanScript(t, sdk)
	if err := sdk.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	ourCol := newCollector(t)
	ours := testProvider(t, ourCol, batchConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 2048, maxBatch: 512}, sampler)
	ours.ids = &seqIDs{}
	gotStarted := spanScript(t, ours)
	if err := ours.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}

	if !slices.EqualFunc(gotStarted, wantStarted, func(a, b trace.SpanContext) bool { return a.Equal(b) }) {
		t.Errorf("span contexts differ:\n got %v\nwant %v", gotStarted, wantStarted)
	}
	sdkBodies, _ := sdkCol.requests()
	ourBodies, headers := ourCol.requests()
	if len(ourBodies) != 1 {
		t.Errorf("the flush sent %d requests, want one batch", len(ourBodies))
	}
	if ct := headers[0].Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("Content-Type %q", ct)
	}
	want, got := exportedSpans(t, sdkBodies), exportedSpans(t, ourBodies)
	if len(want) != 6 || len(got) != len(want) {
		t.Fatalf("exported %d spans, the SDK %d (want 6: the dropped one is not)", len(got), len(want))
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("span %q not exported", w.span.Name)
			continue
		}
		if !proto.Equal(g.span, w.span) {
			t.Errorf("span %q differs from the SDK's:\n got %v\nwant %v", w.span.Name, g.span, w.span)
		}
		if len(w.res.Attributes) != 2 {
			t.Errorf("the SDK's resource %v: want service.name and OTEL_RESOURCE_ATTRIBUTES'", w.res)
		}
		if !proto.Equal(g.scope, w.scope) || !proto.Equal(g.res, w.res) {
			t.Errorf("span %q: resource %v scope %v, the SDK's %v %v", w.span.Name, g.res, g.scope, w.res, w.scope)
		}
	}
}

// testProvider is a Provider exporting to c with cfg, shut down at the test's end.
func testProvider(t *testing.T, c *collector, cfg batchConfig, sampler sdktrace.Sampler) *Provider {
	t.Helper()
	exp := newOTLPExporter(otlpConfig{url: c.URL, timeout: 5 * time.Second})
	res, err := tracingResource("mcpfleet")
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(sampler, newBatcher(cfg, exp, res, nil))
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

func alwaysOn(t *testing.T) sdktrace.Sampler {
	s, err := NewSampler("always_on", "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// endSpans starts and ends n spans named name.
func endSpans(p *Provider, name string, n int) {
	tr := p.Tracer("test")
	for range n {
		_, s := tr.Start(context.Background(), name)
		s.End()
	}
}

// spanCount is how many spans bodies hold.
func spanCount(t *testing.T, bodies [][]byte) int {
	return len(exportedSpans(t, bodies))
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A full batch is sent at once, a partial one after the schedule's delay, and nothing is sent twice.
func TestBatcherSendsFullBatchesAndPartialOnesAfterTheDelay(t *testing.T) {
	c := newCollector(t)
	p := testProvider(t, c, batchConfig{delay: 100 * time.Millisecond, timeout: 5 * time.Second, maxQueue: 16, maxBatch: 4}, alwaysOn(t))
	endSpans(p, "s", 4)
	waitFor(t, "the full batch", func() bool { b, _ := c.requests(); return len(b) == 1 })
	if b, _ := c.requests(); spanCount(t, b) != 4 {
		t.Fatalf("the full batch held %d spans, want 4", spanCount(t, b))
	}
	endSpans(p, "s", 1)
	waitFor(t, "the partial batch after the delay", func() bool { b, _ := c.requests(); return len(b) == 2 })
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.requests(); len(b) != 2 || spanCount(t, b) != 5 {
		t.Errorf("%d requests with %d spans, want 2 with 5", len(b), spanCount(t, b))
	}
}

// A collector that does not answer does not hold up a request: what does not fit the queue is dropped
// and counted, what fits is sent once the collector answers.
func TestBatcherDropsWhatTheQueueCannotHold(t *testing.T) {
	release := make(chan struct{})
	var got [][]byte
	var mu sync.Mutex
	entered := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		entered <- struct{}{}
		<-release
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
	}))
	defer srv.Close()
	defer close(release)
	exp := newOTLPExporter(otlpConfig{url: srv.URL, timeout: 30 * time.Second})
	p := newProvider(alwaysOn(t), newBatcher(batchConfig{delay: time.Hour, timeout: 30 * time.Second, maxQueue: 8, maxBatch: 4}, exp, nil, nil))
	endSpans(p, "first", 4) // handed off, and its export blocks in the collector
	<-entered
	done := make(chan struct{})
	go func() {
		defer close(done)
		endSpans(p, "queued", 8) // one batch waits, one fills cur
		endSpans(p, "dropped", 8)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ending spans waited for the collector")
	}
	if d := p.Dropped(); d != 8 {
		t.Errorf("dropped %d spans, want 8", d)
	}
	release <- struct{}{}
	for range 2 {
		<-entered
		release <- struct{}{}
	}
	waitFor(t, "the three batches", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	mu.Lock()
	defer mu.Unlock()
	names := map[string]int{}
	for _, e := range exportedSpans(t, got) {
		names[e.span.Name]++
	}
	if names["first"] != 4 || names["queued"] != 8 || names["dropped"] != 0 {
		t.Errorf("exported %v, want 4 first and 8 queued", names)
	}
}

// Shutdown sends what ended and stops recording; a span ending after it is dropped.
func TestShutdownFlushesAndStopsRecording(t *testing.T) {
	c := newCollector(t)
	p := testProvider(t, c, batchConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 16, maxBatch: 8}, alwaysOn(t))
	endSpans(p, "before", 3)
	_, open := p.Tracer("test").Start(context.Background(), "open")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.requests(); spanCount(t, b) != 3 {
		t.Errorf("shutdown sent %d spans, want 3", spanCount(t, b))
	}
	_, after := p.Tracer("test").Start(context.Background(), "after")
	if after.IsRecording() || !after.SpanContext().IsValid() {
		t.Errorf("a span started after shutdown: recording %v, span context %v; want not recording, with ids", after.IsRecording(), after.SpanContext())
	}
	open.End()
	if p.Dropped() != 1 {
		t.Errorf("dropped %d, want the span that ended after shutdown", p.Dropped())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("a second shutdown: %v", err)
	}
}

// With export off nothing records, and spans still have span contexts, a remote parent's trace id kept.
func TestProviderWithoutExportRecordsNothing(t *testing.T) {
	tr, err := NewTracing(context.Background(), TraceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx, s := tr.Tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "x")
	if s.IsRecording() || s.SpanContext().TraceID() != parent.TraceID() || s.SpanContext().IsSampled() ||
		!trace.SpanContextFromContext(ctx).Equal(s.SpanContext()) {
		t.Errorf("span %v recording %v: want not recorded, in the parent's trace, unsampled, in its context", s.SpanContext(), s.IsRecording())
	}
	if err := tr.Provider.ForceFlush(context.Background()); err != nil {
		t.Error(err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// A span the sampler drops is what every unsampled request pays twice (its HTTP span and its actor's):
// its span context in a 96-byte span and the 48-byte context that holds it, nothing else — a dropped
// span embedding noop.Span (a second span context) costs 208 bytes. It answers as a span: its span
// context, its provider, not recording, and every recording method a no-op.
func TestDroppedSpanHoldsOnlyItsSpanContext(t *testing.T) {
	p := newProvider(sdktrace.NeverSample(), nil)
	tr := p.Tracer("test")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, Remote: true}))
	ctx, s := tr.Start(parent, "x")
	s.SetAttributes(attribute.Int("a", 1))
	s.AddEvent("e")
	s.RecordError(errors.New("e"))
	s.SetStatus(codes.Error, "e")
	s.SetName("y")
	s.AddLink(trace.Link{})
	s.End()
	if s.IsRecording() || s.TracerProvider() != p || s.SpanContext().TraceID() != (trace.TraceID{7}) ||
		!trace.SpanContextFromContext(ctx).Equal(s.SpanContext()) {
		t.Errorf("dropped span %v (recording %v, provider %v): want the parent's trace, not recording, this provider",
			s.SpanContext(), s.IsRecording(), s.TracerProvider())
	}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, s := tr.Start(parent, "x")
			s.End()
		}
	})
	if got := r.AllocedBytesPerOp(); got > 96+48 {
		t.Errorf("a dropped span costs %d bytes, want at most %d (the span and its context)", got, 96+48)
	}
}

// An exported span's attribute slice is recycled once End has encoded it: a span with attributes
// allocates no more than one without, and a span that takes a recycled slice exports its own
// attributes only — none of the span before, whose encoding the reuse must not touch.
func TestExportedSpansRecycleTheirAttributes(t *testing.T) {
	c := newCollector(t)
	p := testProvider(t, c, batchConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 16, maxBatch: 1 << 20}, alwaysOn(t))
	tr := p.Tracer("test")
	span := func(attrs ...attribute.KeyValue) {
		_, s := tr.Start(context.Background(), "x")
		s.SetAttributes(attrs...)
		s.End()
	}
	span(attribute.Int("warm", 1)) // the pool's first slice
	bare := testing.AllocsPerRun(200, func() { span() })
	three := []attribute.KeyValue{attribute.String("a", "1"), attribute.String("b", "2"), attribute.Int("c", 3)}
	with := testing.AllocsPerRun(200, func() { span(three...) })
	if with > bare {
		t.Errorf("a span with three attributes allocates %v times, one without %v: the attributes' slice is not recycled", with, bare)
	}

	p2 := testProvider(t, c, batchConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 16, maxBatch: 1 << 20}, alwaysOn(t))
	tr = p2.Tracer("test")
	want := map[string][]string{}
	for i := range 50 {
		_, s := tr.Start(context.Background(), fmt.Sprint("s", i))
		var keys []string
		for k := range i%5 + 1 { // shrinking and growing: a longer slice's tail must not show
			key := fmt.Sprintf("k%d-%d", i, k)
			keys = append(keys, key)
			s.SetAttributes(attribute.String(key, key))
		}
		s.End()
		s.SetAttributes(attribute.String("after-end", "x")) // ignored, not written into a recycled slice
		want[fmt.Sprint("s", i)] = keys
	}
	if err := p2.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	bodies, _ := c.requests()
	got := 0
	for _, e := range exportedSpans(t, bodies) {
		keys, ok := want[e.span.Name]
		if !ok {
			continue
		}
		got++
		var have []string
		for _, kv := range e.span.Attributes {
			have = append(have, kv.Key)
			if kv.Value.GetStringValue() != kv.Key {
				t.Errorf("span %s: %s = %q", e.span.Name, kv.Key, kv.Value.GetStringValue())
			}
		}
		if !slices.Equal(have, keys) {
			t.Errorf("span %s exported attributes %v, want %v", e.span.Name, have, keys)
		}
	}
	if got != len(want) {
		t.Errorf("%d of %d spans exported", got, len(want))
	}
}

// A batch that grew its buffers past maxKeptBuffer does not keep them.
func TestBatcherDropsHugeBuffers(t *testing.T) {
	c := newCollector(t)
	p := testProvider(t, c, batchConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 16, maxBatch: 8}, alwaysOn(t))
	_, s := p.Tracer("test").Start(context.Background(), "huge")
	s.SetAttributes(attribute.String("blob", strings.Repeat("x", maxKeptBuffer+1)))
	s.End()
	endSpans(p, "small", 1)
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := p.batch
	if b.body != nil {
		t.Errorf("the request buffer keeps %d bytes", cap(b.body))
	}
	select {
	case sb := <-b.free:
		for _, enc := range sb.scopes {
			if cap(enc) > maxKeptBuffer {
				t.Errorf("a recycled batch keeps %d bytes", cap(enc))
			}
		}
	default:
		t.Error("the exported batch was not recycled")
	}
}

func TestBatchConfigFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want batchConfig
		err  string
	}{
		{name: "defaults", want: batchConfig{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}},
		{name: "all set", env: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_EXPORT_TIMEOUT": "1000",
			"OTEL_BSP_MAX_QUEUE_SIZE": "8192", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1024"},
			want: batchConfig{delay: 200 * time.Millisecond, timeout: time.Second, maxQueue: 8192, maxBatch: 1024}},
		{name: "batch larger than the queue", env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100"},
			want: batchConfig{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 100, maxBatch: 100}},
		{name: "not a number", env: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"}, err: "OTEL_BSP_SCHEDULE_DELAY"},
		{name: "zero", env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, err: "OTEL_BSP_MAX_QUEUE_SIZE"},
		{name: "negative", env: map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-1"}, err: "positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := batchConfigFromEnv(func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// BenchmarkRecordedSpan is a heartbeat's two recorded spans (the HTTP span with its dozen attributes
// and server.heartbeat with three), encoded into batches that are sent to a collector that discards.
func BenchmarkRecordedSpan(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	s, _ := NewSampler("always_on", "")
	p := newProvider(s, newBatcher(batchConfig{delay: time.Second, timeout: 5 * time.Second, maxQueue: 1 << 16, maxBatch: 512},
		newOTLPExporter(otlpConfig{url: srv.URL, timeout: 5 * time.Second}), nil, nil))
	defer p.Shutdown(context.Background())
	httpTr, actorTr := p.Tracer("httpapi"), p.Tracer("actors")
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String("POST"), semconv.URLScheme("http"), semconv.ServerAddress("mcpfleet"),
		semconv.ServerPort(8080), semconv.NetworkPeerAddress("127.0.0.1"), semconv.NetworkPeerPort(50000), semconv.UserAgentOriginal("load/1"),
		semconv.ClientAddress("127.0.0.1"), semconv.URLPath("/v1/mcp/servers/heartbeat"), semconv.NetworkProtocolVersion("1.1"),
		semconv.HTTPRoute("/v1/mcp/servers/heartbeat")}
	b.ReportAllocs()
	for b.Loop() {
		ctx, h := httpTr.Start(context.Background(), "POST /v1/mcp/servers/heartbeat", trace.WithSpanKind(trace.SpanKindServer))
		_, a := actorTr.Start(ctx, "server.heartbeat")
		a.SetAttributes(attribute.String("mcpfleet.tenant_id", "3f1c0e4e-1111-4c3b-9f59-6a1f0e2b7c11"),
			attribute.String("mcpfleet.server_id", "9a8b7c6d-2222-4c3b-9f59-6a1f0e2b7c11"), attribute.String("mcpfleet.module_name", "load-0000001"))
		a.End()
		h.SetAttributes(append(attrs, semconv.HTTPResponseStatusCode(200), semconv.HTTPResponseBodySize(90))...)
		h.End()
	}
}
