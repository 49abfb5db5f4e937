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

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
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

// decodeRequest parses an export body.
func decodeRequest(t *testing.T, body []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatalf("the export body is not an ExportTraceServiceRequest: %v", err)
	}
	return &req
}

func TestExporterRetriesWhatTheCollectorCouldNotTake(t *testing.T) {
	body := []byte("a batch")
	c := newCollector(t, http.StatusServiceUnavailable) // with Retry-After: 1
	e := newOTLPExporter(otlpConfig{url: c.URL, timeout: time.Second, gzip: true,
		headers: http.Header{"Authorization": {"Bearer x"}}})
	if err := e.send(context.Background(), body); err != nil {
		t.Fatalf("export after one 503: %v", err)
	}
	bodies, headers := c.requests()
	if len(bodies) != 2 || !bytes.Equal(bodies[0], body) || !bytes.Equal(bodies[1], body) {
		t.Fatalf("collector got %d requests, want the same batch twice", len(bodies))
	}
	if headers[1].Get("Authorization") != "Bearer x" || headers[1].Get("Content-Encoding") != "gzip" ||
		headers[1].Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("headers %v: want the configured header, gzip and protobuf", headers[1])
	}

	bad := newCollector(t, http.StatusBadRequest)
	e = newOTLPExporter(otlpConfig{url: bad.URL, timeout: time.Second})
	if err := e.send(context.Background(), body); err == nil || !strings.Contains(err.Error(), "400") {
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
	if err := e.send(ctx, body); err == nil || !strings.Contains(err.Error(), "502") {
		t.Errorf("export to a failing collector: err %v, want the context's end and the last status", err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.send(context.Background(), body); err == nil {
		t.Error("export after Shutdown succeeded")
	}
}

// A batch that grew the compression buffer past maxKeptBuffer does not leave it pinned; an ordinary
// one keeps it for the next batch.
func TestExporterDropsHugeBuffers(t *testing.T) {
	c := newCollector(t)
	e := newOTLPExporter(otlpConfig{url: c.URL, timeout: 5 * time.Second, gzip: true})
	if err := e.send(context.Background(), []byte("small")); err != nil {
		t.Fatal(err)
	}
	if e.zbuf.Cap() == 0 {
		t.Fatal("an ordinary batch's buffer was not kept")
	}
	if err := e.send(context.Background(), incompressible(maxKeptBuffer+1)); err != nil {
		t.Fatal(err)
	}
	if e.zbuf.Cap() > maxKeptBuffer {
		t.Errorf("after a %d-byte batch the exporter keeps %d bytes of buffer", maxKeptBuffer+1, e.zbuf.Cap())
	}
	if bodies, _ := c.requests(); len(bodies) != 2 || len(bodies[1]) <= maxKeptBuffer {
		t.Errorf("the huge batch was not sent whole")
	}
}

// incompressible is n bytes gzip cannot shrink.
func incompressible(n int) []byte {
	b := make([]byte, n)
	x := uint32(1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
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
