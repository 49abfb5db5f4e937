package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/internal/freeport"
	"github.com/mcpfleet/mcpfleet/service"
)

// The Jaeger end-to-end test: a real Jaeger v2 (built from the tools module, memory storage) receives
// the service's OTLP export, and the test reads the traces back through Jaeger's query API.

// jaegerBinary returns the Jaeger binary at .data/bin/jaeger, building it from tools/ (its own module,
// outside the service's dependency graph) if it is missing or older than tools/go.mod or go.sum. The
// build's compile step is cached by Go's build cache; the first one on a machine takes minutes.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, ".data", "bin", "jaeger")
	tools := filepath.Join(root, "tools")
	if !stale(bin, filepath.Join(tools, "go.mod"), filepath.Join(tools, "go.sum")) {
		return bin
	}
	if testing.Short() {
		t.Skip("the Jaeger binary is not built: run `cd tools && go build -o ../.data/bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger`, or run the tests without -short (they build it)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building Jaeger needs the go command: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	t.Logf("building Jaeger into %s (minutes the first time on a machine)", bin)
	cmd := exec.Command(goTool, "build", "-o", tmp, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = tools
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		t.Fatalf("build Jaeger in %s: %v\n%s", tools, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// stale reports whether target is missing or older than any of sources.
func stale(target string, sources ...string) bool {
	ti, err := os.Stat(target)
	if err != nil {
		return true
	}
	for _, s := range sources {
		if si, err := os.Stat(s); err == nil && si.ModTime().After(ti.ModTime()) {
			return true
		}
	}
	return false
}

// jaegerConfig is a Jaeger v2 configuration (an OpenTelemetry Collector configuration): an OTLP/HTTP
// receiver, memory storage and the query API, on loopback ports only; no internal metrics endpoint.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

type jaeger struct {
	otlp  string // OTLP/HTTP base URL
	query string // query API base URL
}

// startJaeger runs Jaeger until the test ends.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	dir := t.TempDir()
	ports := freeport.Distinct(t, 3)
	qhttp, qgrpc, otlp := ports[0], ports[1], ports[2]
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, qhttp, qgrpc, otlp), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Jaeger: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("Jaeger's log:\n%s", tail(b, 4000))
		}
	})
	j := &jaeger{otlp: fmt.Sprintf("http://127.0.0.1:%d", otlp), query: fmt.Sprintf("http://127.0.0.1:%d", qhttp)}
	waitFor(t, "Jaeger to come up", 60*time.Second, func() bool {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("Jaeger exited: %v\n%s", err, tail(b, 4000))
		default:
		}
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", otlp))
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return j
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// The Jaeger query API's JSON (api/traces).
type jTrace struct {
	TraceID string  `json:"traceID"`
	Spans   []jSpan `json:"spans"`
}

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jSpan) tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// parent returns the span id of s's parent in its own trace, or "".
func (s jSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && sameID(r.TraceID, s.TraceID) {
			return r.SpanID
		}
	}
	return ""
}

// linksTo reports whether s refers to a span of trace traceID other than as its parent.
func (s jSpan) linksTo(traceID string) bool {
	for _, r := range s.References {
		if sameID(r.TraceID, traceID) && !(r.RefType == "CHILD_OF" && sameID(r.TraceID, s.TraceID)) {
			return true
		}
	}
	return false
}

// sameID compares hex ids as Jaeger writes them (it may drop leading zeros).
func sameID(a, b string) bool { return strings.TrimLeft(a, "0") == strings.TrimLeft(b, "0") }

func (tr jTrace) ops(name string) []jSpan {
	var out []jSpan
	for _, s := range tr.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr jTrace) span(t *testing.T, name string) jSpan {
	t.Helper()
	ss := tr.ops(name)
	if len(ss) == 0 {
		var names []string
		for _, s := range tr.Spans {
			names = append(names, s.OperationName)
		}
		t.Fatalf("trace %s has no %q span; it has %q", tr.TraceID, name, names)
	}
	return ss[0]
}

func (j *jaeger) get(path string, q url.Values) ([]jTrace, error) {
	u := j.query + path
	if q != nil {
		u += "?" + q.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	var out struct{ Data []jTrace }
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return out.Data, nil
}

// trace polls Jaeger for trace id until ok accepts it (spans arrive in batches).
func (j *jaeger) trace(t *testing.T, id string, ok func(jTrace) bool) jTrace {
	t.Helper()
	var last jTrace
	var err error
	defer func() { // runs also when waitFor fails the test
		if t.Failed() {
			var names []string
			for _, s := range last.Spans {
				names = append(names, s.OperationName)
			}
			t.Logf("trace %s as last read (err %v); spans: %q", id, err, names)
		}
	}()
	waitFor(t, "trace "+id+" complete in Jaeger", 30*time.Second, func() bool {
		var trs []jTrace
		if trs, err = j.get("/api/traces/"+id, nil); err != nil || len(trs) != 1 {
			return false
		}
		last = trs[0]
		return ok(last)
	})
	return last
}

// search polls Jaeger's trace search until ok accepts the result.
func (j *jaeger) search(t *testing.T, q url.Values, what string, ok func([]jTrace) bool) []jTrace {
	t.Helper()
	now := time.Now()
	q.Set("service", "mcpfleet")
	q.Set("start", fmt.Sprint(now.Add(-time.Hour).UnixMicro()))
	q.Set("limit", "1000")
	var trs []jTrace
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("Jaeger search %s as last read: err %v, %d traces", q.Encode(), err, len(trs))
		}
	}()
	waitFor(t, "Jaeger search: "+what, 30*time.Second, func() bool {
		q.Set("end", fmt.Sprint(time.Now().Add(time.Minute).UnixMicro()))
		trs, err = j.get("/api/traces", q)
		return err == nil && ok(trs)
	})
	return trs
}

// summary lists the trace's spans as name(id←parent, links), for the test log.
func (tr jTrace) summary() string {
	var b strings.Builder
	for _, s := range tr.Spans {
		fmt.Fprintf(&b, "\n  %s (%s ← %s)", s.OperationName, s.SpanID, s.parent())
		for _, r := range s.References {
			if !(r.RefType == "CHILD_OF" && sameID(r.TraceID, s.TraceID)) {
				fmt.Fprintf(&b, " link→%s/%s", r.TraceID, r.SpanID)
			}
		}
	}
	return b.String()
}

func hasSpan(tr jTrace, pred func(jSpan) bool) bool {
	for _, s := range tr.Spans {
		if pred(s) {
			return true
		}
	}
	return false
}

type hook struct {
	header http.Header
	body   []byte
}

// webhook is an alert receiver that records what it is sent.
func webhook(t *testing.T) (*httptest.Server, <-chan hook) {
	t.Helper()
	got := make(chan hook, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- hook{header: r.Header.Clone(), body: b}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestJaegerTracesRegistrationHeartbeatAndUnhealthyTransition(t *testing.T) {
	j := startJaeger(t)
	hookSrv, hooks := webhook(t)
	h := newHarness(t, func(c *service.Config, o *service.Options) {
		o.TraceEndpoint = j.otlp
		c.AlertWebhookURL, c.AlertWebhookSecret = hookSrv.URL, "jaeger-test-secret"
	})

	// Known trace ids, as a module that traces its own calls would send them.
	regTrace, hbTrace := "4bf92f3577b34da6a3ce929d0e0e4736", "5cf92f3577b34da6a3ce929d0e0e4737"
	module := "jaeger-" + uuid.NewString()[:8]
	r := h.do("POST", "/v1/mcp/servers/register", h.module(), registration(module, "lookup"),
		"traceparent", "00-"+regTrace+"-00f067aa0ba902b7-01")
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	id := r.json(t)["server_id"].(string)
	if got := r.header.Get("traceparent"); !strings.Contains(got, regTrace) {
		t.Errorf("register answered traceparent %q, want one in trace %s", got, regTrace)
	}
	r = h.do("POST", "/v1/mcp/servers/heartbeat", h.module(), map[string]string{"server_id": id},
		"traceparent", "00-"+hbTrace+"-00f067aa0ba902b8-01")
	if r.status != http.StatusOK {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	// The stamper flushes every 50 ms here; wait until the stamp is written.
	waitFor(t, "the heartbeat stamp to be flushed", 10*time.Second, func() bool {
		return h.Svc.Metrics() != nil && strings.Contains(h.scrape(), `mcpfleet_writer_batch_size_count{writer="stamps"}`)
	})

	// Silence: 3H and a monitor pass later the server is unhealthy.
	h.advance(3*h.Cfg.HeartbeatInterval + time.Second)
	h.runMonitor()
	var unhealthy auditView
	for _, e := range h.audit(id) {
		if e.Kind == "mcp.server.unhealthy" {
			unhealthy = e
		}
	}
	if unhealthy.TraceID == "" {
		t.Fatalf("no unhealthy audit event with a trace id: %+v", h.audit(id))
	}
	var alert hook
	select {
	case alert = <-hooks:
	case <-time.After(30 * time.Second):
		t.Fatal("no alert delivered to the webhook within 30s")
	}
	var payload struct {
		TraceID string `json:"trace_id"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(alert.body, &payload); err != nil {
		t.Fatalf("alert body: %v: %s", err, alert.body)
	}
	if payload.TraceID != unhealthy.TraceID || payload.EventID != unhealthy.EventID {
		t.Errorf("alert trace_id %s event_id %s, want the audit event's %s %s", payload.TraceID, payload.EventID, unhealthy.TraceID, unhealthy.EventID)
	}
	tp := strings.Split(alert.header.Get("traceparent"), "-")
	if len(tp) != 4 || tp[1] != unhealthy.TraceID {
		t.Fatalf("alert webhook traceparent %q, want one in trace %s", alert.header.Get("traceparent"), unhealthy.TraceID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Svc.FlushTraces(ctx); err != nil {
		t.Fatalf("flush traces: %v", err)
	}

	// 1. The registration trace: HTTP → fleet actor → server actor → writer → the SQL that inserts the
	// audit row, each a child of the one before.
	reg := j.trace(t, regTrace, func(tr jTrace) bool {
		return hasSpan(tr, func(s jSpan) bool { return strings.Contains(s.tag("db.query.text"), "INSERT INTO audit_events") })
	})
	t.Logf("registration trace %s: %s", regTrace, reg.summary())
	httpSpan := reg.span(t, "POST /v1/mcp/servers/register")
	fleetSpan, serverSpan, apply := reg.span(t, "fleet.register"), reg.span(t, "server.register"), reg.span(t, "writer.apply")
	for _, c := range []struct {
		child, parent jSpan
	}{{fleetSpan, httpSpan}, {serverSpan, fleetSpan}, {apply, serverSpan}} {
		if !sameID(c.child.parent(), c.parent.SpanID) {
			t.Errorf("%s's parent is %s, want %s (%s)", c.child.OperationName, c.child.parent(), c.parent.OperationName, c.parent.SpanID)
		}
	}
	if got := serverSpan.tag("mcpfleet.server_id"); got != id {
		t.Errorf("server.register has mcpfleet.server_id %q, want %s", got, id)
	}
	var auditSQL jSpan
	for _, s := range reg.Spans {
		if strings.Contains(s.tag("db.query.text"), "INSERT INTO audit_events") {
			auditSQL = s
		}
	}
	if !sameID(auditSQL.parent(), apply.SpanID) {
		t.Errorf("the audit insert's parent is %s, want writer.apply %s", auditSQL.parent(), apply.SpanID)
	}
	for _, s := range reg.Spans {
		for _, tag := range s.Tags {
			if v := fmt.Sprint(tag.Value); strings.Contains(v, h.module()) || strings.Contains(v, "jaeger-test-secret") {
				t.Errorf("span %s tag %s carries a credential", s.OperationName, tag.Key)
			}
		}
	}
	// ... and the writer's flush that committed it links to it.
	j.search(t, url.Values{"operation": {"writer.flush"}}, "a writer.flush linked to the registration", func(trs []jTrace) bool {
		for _, tr := range trs {
			if hasSpan(tr, func(s jSpan) bool { return s.OperationName == "writer.flush" && s.linksTo(regTrace) }) {
				return true
			}
		}
		return false
	})

	// 2. A heartbeat trace: HTTP → server actor, linked from the stamper flush that wrote its stamp.
	hb := j.trace(t, hbTrace, func(tr jTrace) bool { return len(tr.ops("server.heartbeat")) > 0 })
	t.Logf("heartbeat trace %s: %s", hbTrace, hb.summary())
	hbHTTP, hbServer := hb.span(t, "POST /v1/mcp/servers/heartbeat"), hb.span(t, "server.heartbeat")
	if !sameID(hbServer.parent(), hbHTTP.SpanID) {
		t.Errorf("server.heartbeat's parent is %s, want the HTTP span %s", hbServer.parent(), hbHTTP.SpanID)
	}
	j.search(t, url.Values{"operation": {"stamper.flush"}}, "a stamper.flush linked to the heartbeat", func(trs []jTrace) bool {
		for _, tr := range trs {
			if hasSpan(tr, func(s jSpan) bool {
				return s.OperationName == "stamper.flush" && s.linksTo(hbTrace) && hasSpan(tr, func(s jSpan) bool {
					return strings.Contains(s.tag("db.query.text"), "UPDATE mcp_servers m SET last_heartbeat_at")
				})
			}) {
				return true
			}
		}
		return false
	})

	// 3. The unhealthy transition: its own trace, the audit event's and the alert's, linked back to the
	// last heartbeat and the registration; the alert's delivery is in it, and is the webhook's parent.
	tr := j.trace(t, unhealthy.TraceID, func(tr jTrace) bool {
		return len(tr.ops("server.transition")) > 0 && len(tr.ops("alert.deliver")) > 0 &&
			hasSpan(tr, func(s jSpan) bool { return strings.Contains(s.tag("db.query.text"), "INSERT INTO audit_events") })
	})
	t.Logf("transition trace %s: %s", unhealthy.TraceID, tr.summary())
	transition := tr.span(t, "server.transition")
	if transition.parent() != "" {
		t.Errorf("server.transition has a parent %s; it should be a root", transition.parent())
	}
	if !transition.linksTo(hbTrace) {
		t.Errorf("server.transition does not link to the last heartbeat's trace %s: %+v", hbTrace, transition.References)
	}
	if !transition.linksTo(regTrace) {
		t.Errorf("server.transition does not link to the registration's trace %s", regTrace)
	}
	if got := transition.tag("mcpfleet.status.to"); got != "unhealthy" {
		t.Errorf("server.transition mcpfleet.status.to = %q", got)
	}
	deliver := tr.span(t, "alert.deliver")
	if !sameID(deliver.parent(), transition.SpanID) {
		t.Errorf("alert.deliver's parent is %s, want server.transition %s", deliver.parent(), transition.SpanID)
	}
	if !sameID(tp[2], deliver.SpanID) {
		t.Errorf("the webhook's traceparent names span %s, want alert.deliver %s", tp[2], deliver.SpanID)
	}

	// The SQL metrics of otelpgx are on the service's /metrics (they exist only with tracing on).
	if page := h.scrape(); !strings.Contains(page, "db_client_operation_duration_seconds_count") {
		t.Error("/metrics lacks db_client_operation_duration_seconds")
	}

	// 4. Tag search by server_id finds all three.
	j.search(t, url.Values{"tags": {fmt.Sprintf(`{"mcpfleet.server_id":%q}`, id)}}, "the server's traces by tag", func(trs []jTrace) bool {
		found := map[string]bool{}
		for _, tr := range trs {
			for _, want := range []string{regTrace, hbTrace, unhealthy.TraceID} {
				if sameID(tr.TraceID, want) {
					found[want] = true
				}
			}
		}
		return len(found) == 3
	})
}

// scrape returns the service's /metrics page.
func (h *harness) scrape() string {
	h.T.Helper()
	r := h.do("GET", "/metrics", "", nil)
	if r.status != http.StatusOK {
		h.T.Fatalf("GET /metrics: %d %s", r.status, r.body)
	}
	return string(r.body)
}
