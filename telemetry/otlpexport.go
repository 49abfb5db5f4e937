package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// otlpExporter sends a Provider's batches: OTLP/HTTP with protobuf bodies (POST to the traces URL,
// Content-Type application/x-protobuf), encoded by the batcher (appendRequest).
// It stands in for the SDK's otlptracehttp exporter, whose conversion and reflective marshalling
// were a third of tracing's cost at 100 % sampling, and reads the same standard variables (see
// otlpConfigFromEnv). A batch that fails with 429, 502, 503 or 504 or without an answer is sent again
// with a growing pause (Retry-After when the collector gives one) until it is accepted or a minute or
// the export's context runs out; any other answer fails the batch at once. The batcher calls send
// from one goroutine; the mutex only keeps a Shutdown or a stray caller safe.
type otlpExporter struct {
	cfg    otlpConfig
	client *http.Client

	mu      sync.Mutex
	zbuf    bytes.Buffer
	zw      *gzip.Writer
	stopped bool
}

// otlpConfig is where and how spans are exported.
type otlpConfig struct {
	url     string      // the traces URL
	headers http.Header // sent with every export
	gzip    bool
	timeout time.Duration // of one export request
	tls     *tls.Config   // nil: the default
}

// The retry schedule of a failed export, the SDK exporter's: first pause, largest pause, and the
// time after which a batch is given up.
const (
	otlpRetryFirst   = 5 * time.Second
	otlpRetryMax     = 30 * time.Second
	otlpRetryElapsed = time.Minute
	otlpTimeout      = 10 * time.Second
)

// otlpConfigFromEnv reads the OpenTelemetry exporter variables, the per-signal ones winning over the
// general ones, as the SDK's OTLP/HTTP exporter does:
//   - OTEL_EXPORTER_OTLP_ENDPOINT is a base URL, /v1/traces appended to its path;
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the traces URL as it is ("/" if it has no path);
//     endpoint, if not empty, overrides both and is a base URL. The scheme must be http or https.
//   - OTEL_EXPORTER_OTLP[_TRACES]_HEADERS: comma-separated key=value pairs, values URL-decoded.
//   - OTEL_EXPORTER_OTLP[_TRACES]_COMPRESSION: gzip or none.
//   - OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT: milliseconds (default 10000).
//   - OTEL_EXPORTER_OTLP[_TRACES]_CERTIFICATE: a PEM file of the CAs to trust;
//     OTEL_EXPORTER_OTLP[_TRACES]_CLIENT_CERTIFICATE and _CLIENT_KEY: PEM files of a client certificate.
//
// Unlike the SDK, which logs a bad value and goes on without it, a bad value is an error: the service
// refuses to start rather than export somewhere else than configured, or not at all.
func otlpConfigFromEnv(getenv func(string) string, endpoint string) (otlpConfig, error) {
	get := func(name string) (string, string) {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name)), "OTEL_EXPORTER_OTLP_" + name
	}
	cfg := otlpConfig{headers: http.Header{}, timeout: otlpTimeout}

	// The traces URL: endpoint or OTEL_EXPORTER_OTLP_ENDPOINT is a base URL, the per-signal variable is
	// the URL as it is.
	raw, name, asIs := endpoint, "the trace endpoint", false
	if raw == "" {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
			raw, name, asIs = v, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true
		} else if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); v != "" {
			raw, name = v, "OTEL_EXPORTER_OTLP_ENDPOINT"
		} else {
			raw = "http://localhost:4318" // the SDK's default
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return otlpConfig{}, fmt.Errorf("%s %q: want an http:// or https:// URL", name, raw)
	}
	if !asIs {
		u.Path = path.Join("/", u.Path, "v1/traces")
	} else if u.Path == "" {
		u.Path = "/"
	}
	cfg.url = u.String()

	if v, name := get("HEADERS"); v != "" {
		for pair := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" || strings.ContainsAny(k, " \t\r\n:") {
				return otlpConfig{}, fmt.Errorf("%s: %q is not key=value", name, pair)
			}
			val, err := url.PathUnescape(val)
			if err != nil {
				return otlpConfig{}, fmt.Errorf("%s: value of %s: %v", name, k, err)
			}
			cfg.headers.Set(k, strings.TrimSpace(val))
		}
	}
	if v, name := get("COMPRESSION"); v != "" {
		switch strings.ToLower(v) {
		case "gzip":
			cfg.gzip = true
		case "none":
		default:
			return otlpConfig{}, fmt.Errorf("%s %q: want gzip or none", name, v)
		}
	}
	if v, name := get("TIMEOUT"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return otlpConfig{}, fmt.Errorf("%s %q: want a positive number of milliseconds", name, v)
		}
		cfg.timeout = time.Duration(ms) * time.Millisecond
	}
	ca, caName := get("CERTIFICATE")
	cert, certName := get("CLIENT_CERTIFICATE")
	key, keyName := get("CLIENT_KEY")
	if ca != "" || cert != "" || key != "" {
		cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return otlpConfig{}, fmt.Errorf("%s: %w", caName, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return otlpConfig{}, fmt.Errorf("%s %s: no PEM certificate in it", caName, ca)
		}
		cfg.tls.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return otlpConfig{}, fmt.Errorf("%s and %s go together: set both or neither", certName, keyName)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return otlpConfig{}, fmt.Errorf("%s, %s: %w", certName, keyName, err)
		}
		cfg.tls.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// newOTLPExporter returns an exporter for cfg.
func newOTLPExporter(cfg otlpConfig) *otlpExporter {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.tls != nil {
		tr.TLSClientConfig = cfg.tls
	}
	return &otlpExporter{cfg: cfg, client: &http.Client{Transport: tr}}
}

// send posts body (an encoded ExportTraceServiceRequest), again on a retryable failure (see
// otlpExporter), until it is accepted, fails for good, or ctx is done.
func (e *otlpExporter) send(ctx context.Context, body []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("otlp exporter: shut down")
	}
	if e.cfg.gzip {
		e.zbuf.Reset()
		if e.zw == nil {
			e.zw = gzip.NewWriter(&e.zbuf)
		} else {
			e.zw.Reset(&e.zbuf)
		}
		_, _ = e.zw.Write(body) // writes to a bytes.Buffer do not fail
		_ = e.zw.Close()
		body = e.zbuf.Bytes()
		defer e.release()
	}
	start := time.Now()
	pause := otlpRetryFirst
	for {
		retry, after, err := e.post(ctx, body)
		if err == nil || !retry {
			return err
		}
		if after > 0 {
			pause = after
		}
		if time.Since(start)+pause > otlpRetryElapsed {
			return fmt.Errorf("otlp export: giving up after %s: %w", time.Since(start).Round(time.Millisecond), err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("otlp export: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		pause = min(pause*2, otlpRetryMax)
	}
}

// maxKeptBuffer is the largest encoding buffer kept for the next batch: one batch of huge spans does
// not pin its memory for the exporter's life.
const maxKeptBuffer = 16 << 20

// release drops the compression buffer if a batch grew it past maxKeptBuffer.
func (e *otlpExporter) release() {
	if e.zbuf.Cap() > maxKeptBuffer {
		e.zbuf = bytes.Buffer{}
	}
}

// post sends body once. retry says whether a failure may be retried, after is the pause the
// collector asked for (0: none).
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry bool, after time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.url, bytes.NewReader(body))
	if err != nil {
		return false, 0, fmt.Errorf("otlp export: %w", err)
	}
	for k, vs := range e.cfg.headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.cfg.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return true, 0, fmt.Errorf("otlp export: %w", err) // send stops when its context is done
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // keep the connection reusable
		return false, 0, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	err = fmt.Errorf("otlp export: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			after = time.Duration(min(s, int(otlpRetryElapsed/time.Second))) * time.Second
		}
		return true, after, err
	}
	return false, 0, err
}

// Shutdown stops the exporter: later exports fail. The batcher has exported what it held before it
// calls this.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	e.client.CloseIdleConnections()
	return nil
}
