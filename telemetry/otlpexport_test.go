package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP endpoint that keeps the bodies it was sent (gunzipped) and answers with
// the statuses it is given in turn (200 once they run out).
type collector struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   [][]byte
	headers  []http.Header
	statuses []int
}

func newCollector(t *testing.T, statuses ...int) *collector {
	c := &collector{statuses: statuses}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("gzip body: %v", err)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		c.mu.Lock()
		c.bodies = append(c.bodies, b)
		c.headers = append(c.headers, r.Header.Clone())
		status := http.StatusOK
		if len(c.statuses) > 0 {
			status, c.statuses = c.statuses[0], c.statuses[1:]
		}
		c.mu.Unlock()
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) requests() ([][]byte, []http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.bodies), slices.Clone(c.headers)
}

// testSpans are spans with every kind of field the encoder writes: two resources (one with a schema
// URL), two scopes (one with a version and attributes, one empty), attributes of every type, events,
// links, statuses, remote and local parents, a trace state and dropped counts.
func testSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	ts, err := trace.ParseTraceState("vendor=a1,other=b2")
	if err != nil {
		t.Fatal(err)
	}
	sc := func(sid byte, remote bool) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{sid, 1, 2, 3, 4, 5, 6, 7},
			TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: remote})
	}
	resA := resource.NewSchemaless(attribute.String("service.name", "mcpfleet"), attribute.Int("pid", 7))
	resB := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "other"))
	scopeA := instrumentation.Scope{Name: "github.com/mcpfleet/mcpfleet", Version: "1.2", SchemaURL: "https://x/schema",
		Attributes: attribute.NewSet(attribute.Bool("scoped", true))}
	start := time.Date(2026, 12, 3, 17, 0, 0, 123456789, time.UTC)
	every := []attribute.KeyValue{
		attribute.String("s", "välue"), attribute.String("empty", ""), attribute.Bool("b", true), attribute.Bool("f", false),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("d", 3.25),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2, 1 << 40}),
		attribute.Float64Slice("ds", []float64{0.5, -1}), attribute.StringSlice("ss", []string{"a", "", "c"}),
		{Key: "nothing"},
	}
	stubs := tracetest.SpanStubs{
		{
			Name: "POST /v1/mcp/servers/heartbeat", SpanContext: sc(1, false), Parent: sc(9, true), SpanKind: trace.SpanKindServer,
			StartTime: start, EndTime: start.Add(3 * time.Millisecond), Attributes: every, DroppedAttributes: 2,
			Events:        []sdktrace.Event{{Name: "error", Time: start.Add(time.Millisecond), Attributes: every[:3], DroppedAttributeCount: 1}},
			Links:         []sdktrace.Link{{SpanContext: sc(5, true), Attributes: every[4:6], DroppedAttributeCount: 3}},
			DroppedEvents: 1, DroppedLinks: 4, Status: sdktrace.Status{Code: codes.Error, Description: "boom"},
			Resource: resA, InstrumentationScope: scopeA,
		},
		{
			Name: "server.heartbeat", SpanContext: sc(2, false), Parent: sc(1, false), SpanKind: trace.SpanKindInternal,
			StartTime: start, EndTime: start.Add(time.Millisecond), Status: sdktrace.Status{Code: codes.Ok},
			Resource: resA, InstrumentationScope: instrumentation.Scope{},
		},
		{Name: "elsewhere", SpanContext: sc(3, false), SpanKind: trace.SpanKindClient, StartTime: start, EndTime: start,
			Resource: resB, InstrumentationScope: scopeA},
		{Name: "again", SpanContext: sc(4, false), SpanKind: trace.SpanKindProducer, StartTime: start, EndTime: start.Add(time.Second),
			Resource: resA, InstrumentationScope: scopeA},
		{Name: "consumer", SpanContext: sc(6, false), SpanKind: trace.SpanKindConsumer, Resource: resA},
	}
	return stubs.Snapshots()
}

// decodeRequest parses an export body, its resource spans in a fixed order (the SDK's exporter
// groups resources in a map, so its order is not the batch's).
func decodeRequest(t *testing.T, body []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatalf("the export body is not an ExportTraceServiceRequest: %v", err)
	}
	key := func(m proto.Message) string {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		return string(b)
	}
	slices.SortFunc(req.ResourceSpans, func(a, b *resourceSpans) int { return strings.Compare(key(a.Resource), key(b.Resource)) })
	return &req
}

type resourceSpans = tracepb.ResourceSpans

func TestEncodeSpansAgreesWithTheOTLPExporter(t *testing.T) {
	spans := testSpans(t)
	c := newCollector(t)
	sdk, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(c.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sdk.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	ours := newOTLPExporter(otlpConfig{url: c.URL + "/v1/traces", timeout: time.Second})
	if err := ours.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	bodies, headers := c.requests()
	if len(bodies) != 2 {
		t.Fatalf("collector got %d requests, want 2", len(bodies))
	}
	want, got := decodeRequest(t, bodies[0]), decodeRequest(t, bodies[1])
	if !proto.Equal(want, got) {
		t.Errorf("the encoding differs from the SDK exporter's:\n got %v\nwant %v", got, want)
	}
	if n := len(got.ResourceSpans); n != 2 {
		t.Errorf("%d resource spans, want 2", n)
	}
	if ct := headers[1].Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("Content-Type %q", ct)
	}
	// The batch's order within a resource and scope is kept.
	var names []string
	for _, rs := range got.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
			}
		}
	}
	if i, j := slices.Index(names, "POST /v1/mcp/servers/heartbeat"), slices.Index(names, "again"); i < 0 || j < i {
		t.Errorf("span order %v: want the batch's", names)
	}
}

func TestExporterRetriesWhatTheCollectorCouldNotTake(t *testing.T) {
	spans := testSpans(t)[:1]
	c := newCollector(t, http.StatusServiceUnavailable) // with Retry-After: 1
	e := newOTLPExporter(otlpConfig{url: c.URL, timeout: time.Second, gzip: true,
		headers: http.Header{"Authorization": {"Bearer x"}}})
	if err := e.ExportSpans(context.Background(), spans); err != nil {
		t.Fatalf("export after one 503: %v", err)
	}
	bodies, headers := c.requests()
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Fatalf("collector got %d requests, want the same batch twice", len(bodies))
	}
	if headers[1].Get("Authorization") != "Bearer x" || headers[1].Get("Content-Encoding") != "gzip" {
		t.Errorf("headers %v: want the configured header and gzip", headers[1])
	}
	decodeRequest(t, bodies[1])

	bad := newCollector(t, http.StatusBadRequest)
	e = newOTLPExporter(otlpConfig{url: bad.URL, timeout: time.Second})
	if err := e.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("export answered 400: err %v, want the status", err)
	}
	if b, _ := bad.requests(); len(b) != 1 {
		t.Errorf("a 400 was sent %d times, want once", len(b))
	}

	// A collector that keeps refusing: the export gives up when its context ends, not after a minute.
	down := newCollector(t, http.StatusBadGateway, http.StatusBadGateway, http.StatusBadGateway)
	e = newOTLPExporter(otlpConfig{url: down.URL, timeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.ExportSpans(ctx, spans); err == nil || !strings.Contains(err.Error(), "502") {
		t.Errorf("export to a failing collector: err %v, want the context's end and the last status", err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), spans); err == nil {
		t.Error("export after Shutdown succeeded")
	}
}

// A batch that grew the exporter's buffers past maxKeptBuffer does not leave them pinned; an ordinary
// one keeps them for the next batch.
func TestExporterDropsHugeBuffers(t *testing.T) {
	c := newCollector(t)
	e := newOTLPExporter(otlpConfig{url: c.URL, timeout: 5 * time.Second, gzip: true})
	small := testSpans(t)[:1]
	if err := e.ExportSpans(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	if e.buf == nil || e.zbuf.Cap() == 0 {
		t.Fatal("an ordinary batch's buffers were not kept")
	}
	huge := []sdktrace.ReadOnlySpan{&incompressible{ReadOnlySpan: tracetest.SpanStub{Name: "huge"}.Snapshot()}}
	if err := e.ExportSpans(context.Background(), huge); err != nil {
		t.Fatal(err)
	}
	if e.buf != nil || e.zbuf.Cap() > maxKeptBuffer {
		t.Errorf("after a %d-byte batch the exporter keeps %d + %d bytes of buffers", maxKeptBuffer+1, cap(e.buf), e.zbuf.Cap())
	}
	if bodies, _ := c.requests(); len(bodies) != 2 || len(bodies[1]) <= maxKeptBuffer {
		t.Errorf("the huge batch was not sent whole")
	}
}

// incompressible gives a span an attribute gzip cannot shrink, so the compressed buffer grows too.
type incompressible struct{ sdktrace.ReadOnlySpan }

func (s *incompressible) Attributes() []attribute.KeyValue {
	b := make([]byte, maxKeptBuffer+1)
	x := uint32(1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return []attribute.KeyValue{attribute.String("blob", string(b))}
}

func TestOTLPConfigFromEnv(t *testing.T) {
	for _, c := range []struct {
		name     string
		env      map[string]string
		endpoint string
		want     otlpConfig // url, gzip, timeout; headers checked apart
		headers  http.Header
		err      string
	}{
		{name: "default", want: otlpConfig{url: "http://localhost:4318/v1/traces", timeout: 10 * time.Second}},
		{name: "base URL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			want: otlpConfig{url: "http://127.0.0.1:4318/v1/traces", timeout: 10 * time.Second}},
		{name: "base URL with a path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example/otlp/"},
			want: otlpConfig{url: "https://c.example/otlp/v1/traces", timeout: 10 * time.Second}},
		{name: "traces URL as it is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/custom"},
			want: otlpConfig{url: "http://b:2/custom", timeout: 10 * time.Second}},
		{name: "traces URL without a path", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2"},
			want: otlpConfig{url: "http://b:2/", timeout: 10 * time.Second}},
		{name: "option endpoint wins", endpoint: "http://127.0.0.1:9/", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2"},
			want: otlpConfig{url: "http://127.0.0.1:9/v1/traces", timeout: 10 * time.Second}},
		{name: "headers, compression, timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc, x-b = 2",
			"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_COMPRESSION": "none", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"},
			want:    otlpConfig{url: "http://localhost:4318/v1/traces", gzip: true, timeout: 2500 * time.Millisecond},
			headers: http.Header{"Authorization": {"Bearer abc"}, "X-B": {"2"}}},
		{name: "per-signal headers win", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"},
			want: otlpConfig{url: "http://localhost:4318/v1/traces", timeout: 10 * time.Second}, headers: http.Header{"B": {"2"}}},
		{name: "no scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "grpc scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://c:4317"}, err: "http:// or https://"},
		{name: "bad header", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, err: "key=value"},
		{name: "bad compression", env: map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, err: "gzip or none"},
		{name: "bad timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, err: "milliseconds"},
		{name: "missing CA file", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, err: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{name: "client cert without key", env: map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/x.pem"}, err: "go together"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := otlpConfigFromEnv(func(k string) string { return c.env[k] }, c.endpoint)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.url != c.want.url || got.gzip != c.want.gzip || got.timeout != c.want.timeout {
				t.Errorf("got url %q gzip %v timeout %s, want %q %v %s", got.url, got.gzip, got.timeout, c.want.url, c.want.gzip, c.want.timeout)
			}
			if c.headers == nil {
				c.headers = http.Header{}
			}
			if !reflect.DeepEqual(got.headers, c.headers) {
				t.Errorf("headers %v, want %v", got.headers, c.headers)
			}
		})
	}
}

// BenchmarkEncodeSpans measures the encoding of a batch of 512 heartbeat-like spans.
func BenchmarkEncodeSpans(b *testing.B) {
	spans := testSpans(&testing.T{})
	batch := make([]sdktrace.ReadOnlySpan, 0, 512)
	for len(batch) < 512 {
		batch = append(batch, spans[:2]...)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendSpans(buf[:0], batch)
	}
	b.ReportMetric(float64(len(buf))/512, "bytes/span")
}
