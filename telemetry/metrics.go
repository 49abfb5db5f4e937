package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/mcpfleet/mcpfleet/health"
)

// Prometheus holds the service's two sets of metrics, each with a meter provider and a registry of
// its own (nothing is registered globally):
//   - the public set (Provider, Registry, Handler): tenant-free series with bounded label sets, safe to
//     serve without an API key — aggregates over the whole fleet, the Go runtime and the process;
//   - the private set (PrivateProvider, PrivateRegistry): per-server series, whose labels name tenants
//     and their servers. PrivateHandler serves both sets; serve it only on a listener of its own
//     (MCPFLEET_METRICS_ADDR, loopback by default), never on the API's.
type Prometheus struct {
	Provider        *sdkmetric.MeterProvider
	Registry        *prometheus.Registry
	Handler         http.Handler
	PrivateProvider *sdkmetric.MeterProvider
	PrivateRegistry *prometheus.Registry
	PrivateHandler  http.Handler
}

// CardinalityLimit bounds the series of each instrument, public or private: beyond it, new label sets
// are counted in one series labelled otel_metric_overflow="true" (the OpenTelemetry SDK's overflow).
// Public instruments have closed label sets well under it; private ones are per server.
const CardinalityLimit = 2000

// NewPrometheus builds the two meter providers and their handlers. Call Shutdown when done.
func NewPrometheus(serviceName string) (*Prometheus, error) {
	if serviceName == "" {
		serviceName = "mcpfleet"
	}
	res := resource.NewSchemaless(semconv.ServiceName(serviceName))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	// target_info is the public registry's: the private handler gathers both, and one family may be
	// collected only once.
	preg := prometheus.NewRegistry()
	pexp, err := otelprom.New(otelprom.WithRegisterer(preg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	p := &Prometheus{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res),
			sdkmetric.WithCardinalityLimit(CardinalityLimit)),
		Registry: reg, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		PrivateProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(pexp), sdkmetric.WithResource(res),
			sdkmetric.WithCardinalityLimit(CardinalityLimit)),
		PrivateRegistry: preg,
	}
	p.PrivateHandler = promhttp.HandlerFor(prometheus.Gatherers{reg, preg}, promhttp.HandlerOpts{})
	return p, nil
}

// Shutdown stops both meter providers.
func (p *Prometheus) Shutdown(ctx context.Context) error {
	return errors.Join(p.Provider.Shutdown(ctx), p.PrivateProvider.Shutdown(ctx))
}

// The label values the instruments take. Each set is closed, so every series is known in advance and
// its attribute set is built once.
const (
	WriterCommands = "commands" // the durable-command writer
	WriterStamps   = "stamps"   // the heartbeat stamper
)

// Rejection reasons of a heartbeat (label reason of mcpfleet_heartbeats_total{outcome="rejected"}).
const (
	ReasonInvalid         = "invalid_request" // 400: a body or server_id that does not parse
	ReasonUnauthenticated = "unauthenticated" // 401
	ReasonForbidden       = "forbidden"       // 403: the key's role may not heartbeat
	ReasonNotRegistered   = "not_registered"  // 404: no such server in the caller's tenant
	ReasonDeregistered    = "deregistered"    // 409: the server deregistered
	ReasonTooLarge        = "too_large"       // 413
	ReasonUnsupported     = "unsupported"     // 415
	ReasonThrottled       = "throttled"       // 429: the address made too many failed key lookups
	ReasonUnavailable     = "unavailable"     // 503: starting, or the recovery could not be made durable
	ReasonOther           = "other"           // anything else
)

var rejectReasons = []string{ReasonInvalid, ReasonUnauthenticated, ReasonForbidden, ReasonNotRegistered,
	ReasonDeregistered, ReasonTooLarge, ReasonUnsupported, ReasonThrottled, ReasonUnavailable, ReasonOther}

// Metrics holds mcpfleet's instruments. Build it once with NewMetrics and pass it down; a nil *Metrics
// is valid and records nothing (metrics off, unit tests). Every method is safe for concurrent use and,
// on the hot paths (heartbeats, HTTP), does not allocate.
type Metrics struct {
	heartbeats  metric.Int64Counter
	hbAccepted  []metric.AddOption
	hbRejected  map[string][]metric.AddOption
	transitions metric.Int64Counter
	transOpts   map[[2]health.Status][]metric.AddOption
	lag         metric.Float64Histogram
	batchSize   metric.Int64Histogram
	flush       metric.Float64Histogram
	writerOpts  map[string][]metric.RecordOption
	flushOpts   map[[2]string][]metric.RecordOption
	restarts    metric.Int64Counter
	alerts      metric.Int64Counter
	alertOK     []metric.AddOption
	alertFailed []metric.AddOption
	retries     metric.Int64Counter
	http        metric.Float64Histogram
	mcp         metric.Float64Histogram // public: kind and outcome
	mcpOpts     map[[2]string][]metric.RecordOption
	mcpServer   metric.Float64Histogram // private: per tenant and server; nil without a private provider

	httpMu       sync.RWMutex
	httpOpts     map[httpKey][]metric.RecordOption
	httpOverflow []metric.RecordOption

	servers [4]atomic.Int64 // by health.Statuses() index
	backlog [2]atomic.Int64 // commands, stamps
	// The node's load, as the fleet's saturation gauge last measured it (NodeLoad).
	schedP99  atomic.Int64  // nanoseconds
	runnable  atomic.Uint64 // math.Float64bits of ready goroutines per CPU
	saturated atomic.Bool
	nodeLoad  struct {
		p99, runnable metric.Float64ObservableGauge
		saturated     metric.Int64ObservableGauge
	}
	reg   metric.Registration
	meter metric.Meter // the public meter, for instruments registered later (ObserveCluster)
}

type httpKey struct {
	method, route string
	status        int
}

func addOpt(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

func recOpt(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// MaxHTTPSeries bounds the label sets of http.server.request.duration: routes (patterns, "" for an
// unmatched path), methods and status codes are closed sets already, so this is a backstop; past it,
// requests are recorded under http_route="_overflow" alone.
const MaxHTTPSeries = 1024

// instruments creates every instrument of m on meter (and the per-server one on private, if any) and
// returns the two gauges the observation callback reports.
func (m *Metrics) instruments(meter metric.Meter, private metric.MeterProvider) (servers, backlog metric.Int64ObservableGauge, err error) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	m.heartbeats, err = meter.Int64Counter("mcpfleet.heartbeats",
		metric.WithDescription("Heartbeats answered, by outcome (accepted, rejected) and, for rejections, reason."))
	check(err)
	m.transitions, err = meter.Int64Counter("mcpfleet.server.transitions",
		metric.WithDescription("Committed status transitions of servers (monitor, recovery, deregistration), by from and to."))
	check(err)
	m.lag, err = meter.Float64Histogram("mcpfleet.detection.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a server's last liveness evidence to its unhealthy transition, on the service clock."),
		metric.WithExplicitBucketBoundaries(0.5, 1, 2.5, 5, 10, 15, 20, 25, 30, 31, 32.5, 35, 37.5, 40, 45, 60, 90, 120, 300, 600))
	check(err)
	m.batchSize, err = meter.Int64Histogram("mcpfleet.writer.batch.size",
		metric.WithDescription("Items per flush: durable commands per group commit (writer=commands), servers per heartbeat-stamp UPDATE (writer=stamps)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 5000, 10000))
	check(err)
	m.flush, err = meter.Float64Histogram("mcpfleet.writer.flush.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one flush (transaction) of the writer or the stamper, by writer and outcome."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	check(err)
	m.restarts, err = meter.Int64Counter("mcpfleet.actor.restarts",
		metric.WithDescription("Supervision events: actors restarted after a panic or respawned after they stopped, by event."))
	check(err)
	m.alerts, err = meter.Int64Counter("mcpfleet.alert.deliveries",
		metric.WithDescription("Alert webhook delivery attempts, by outcome (delivered, failed)."))
	check(err)
	m.retries, err = meter.Int64Counter("mcpfleet.alert.retries",
		metric.WithDescription("Alert webhook delivery attempts that were retries of an earlier failed one."))
	check(err)
	m.http, err = meter.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP requests, by method, route and status code."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	check(err)
	m.mcp, err = meter.Float64Histogram("mcpfleet.mcp.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("MCP client operations (handshake, list_tools, call_tool) by kind and outcome class."),
		metric.WithExplicitBucketBoundaries(mcpBuckets...))
	check(err)
	if private != nil {
		m.mcpServer, err = private.Meter("github.com/mcpfleet/mcpfleet").Float64Histogram("mcpfleet.mcp.server.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("MCP client operations by kind, outcome class, tenant and configured server name."),
			metric.WithExplicitBucketBoundaries(mcpBuckets...))
		check(err)
	}
	servers, err = meter.Int64ObservableGauge("mcpfleet.servers",
		metric.WithDescription("Registered servers by status, as the fleet holds them (committed state)."))
	check(err)
	backlog, err = meter.Int64ObservableGauge("mcpfleet.writer.backlog",
		metric.WithDescription("Work waiting for the next flush: queued durable requests (writer=commands), servers with an unwritten heartbeat stamp (writer=stamps)."))
	check(err)
	m.nodeLoad.p99, err = meter.Float64ObservableGauge("mcpfleet.node.sched.latency.p99", metric.WithUnit("s"),
		metric.WithDescription("99th percentile of the time this process's goroutines waited for a CPU over the last 500 ms."))
	check(err)
	m.nodeLoad.runnable, err = meter.Float64ObservableGauge("mcpfleet.node.runnable",
		metric.WithDescription("Goroutines ready to run and waiting for a CPU, per CPU, averaged over the last 500 ms."))
	check(err)
	m.nodeLoad.saturated, err = meter.Int64ObservableGauge("mcpfleet.node.saturated",
		metric.WithDescription("1 while the node is saturated and refuses first registrations (MCPFLEET_SATURATION_LATENCY), else 0."))
	check(err)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("metrics: %v", errs)
	}
	return servers, backlog, nil

}

// precompute builds every attribute option set once, so recording allocates nothing; it returns the
// observation options of the servers and backlog gauges.
func (m *Metrics) precompute() (statusOpts, backlogOpts [][]metric.ObserveOption) {
	m.hbAccepted = addOpt(attribute.String("outcome", "accepted"))
	for _, r := range rejectReasons {
		m.hbRejected[r] = addOpt(attribute.String("outcome", "rejected"), attribute.String("reason", r))
	}
	for _, from := range append([]health.Status{""}, health.Statuses()...) {
		for _, to := range health.Statuses() {
			m.transOpts[[2]health.Status{from, to}] = addOpt(attribute.String("from", string(from)), attribute.String("to", string(to)))
		}
	}
	statusOpts = make([][]metric.ObserveOption, len(health.Statuses()))
	for i, st := range health.Statuses() {
		statusOpts[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("status", string(st))))}
	}
	writers := []string{WriterCommands, WriterStamps}
	backlogOpts = make([][]metric.ObserveOption, len(writers))
	for i, w := range writers {
		m.writerOpts[w] = recOpt(attribute.String("writer", w))
		for _, o := range []string{"ok", "error"} {
			m.flushOpts[[2]string{w, o}] = recOpt(attribute.String("writer", w), attribute.String("outcome", o))
		}
		backlogOpts[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("writer", w)))}
	}
	for _, k := range mcpKinds {
		for _, o := range mcpOutcomes {
			m.mcpOpts[[2]string{k, o}] = recOpt(attribute.String("kind", k), attribute.String("outcome", o))
		}
	}
	m.alertOK = addOpt(attribute.String("outcome", "delivered"))
	m.alertFailed = addOpt(attribute.String("outcome", "failed"))
	return statusOpts, backlogOpts
}

// NewMetrics creates the instruments on the meter "github.com/mcpfleet/mcpfleet" of public, whose
// series carry no tenant data and have closed label sets, and of private (nil: none), whose
// per-server series name tenants and their servers. Prometheus names (with the exporter's suffixes)
// are in docs/telemetry.md.
func NewMetrics(public, private metric.MeterProvider) (*Metrics, error) {
	meter := public.Meter("github.com/mcpfleet/mcpfleet")
	m := &Metrics{hbRejected: map[string][]metric.AddOption{}, transOpts: map[[2]health.Status][]metric.AddOption{},
		writerOpts: map[string][]metric.RecordOption{}, flushOpts: map[[2]string][]metric.RecordOption{},
		httpOpts: map[httpKey][]metric.RecordOption{}, mcpOpts: map[[2]string][]metric.RecordOption{},
		httpOverflow: recOpt(attribute.String("http.route", "_overflow")), meter: meter}
	servers, backlog, err := m.instruments(meter, private)
	if err != nil {
		return nil, err
	}
	statusOpts, backlogOpts := m.precompute()
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i := range m.servers {
			o.ObserveInt64(servers, m.servers[i].Load(), statusOpts[i]...)
		}
		for i := range m.backlog {
			o.ObserveInt64(backlog, m.backlog[i].Load(), backlogOpts[i]...)
		}
		o.ObserveFloat64(m.nodeLoad.p99, time.Duration(m.schedP99.Load()).Seconds())
		o.ObserveFloat64(m.nodeLoad.runnable, math.Float64frombits(m.runnable.Load()))
		saturated := int64(0)
		if m.saturated.Load() {
			saturated = 1
		}
		o.ObserveInt64(m.nodeLoad.saturated, saturated)
		return nil
	}, servers, backlog, m.nodeLoad.p99, m.nodeLoad.runnable, m.nodeLoad.saturated)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return m, nil
}

// HeartbeatAccepted counts an accepted heartbeat.
func (m *Metrics) HeartbeatAccepted(ctx context.Context) {
	if m == nil {
		return
	}
	m.heartbeats.Add(ctx, 1, m.hbAccepted...)
}

// HeartbeatRejected counts a rejected heartbeat; reason is one of the Reason constants.
func (m *Metrics) HeartbeatRejected(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	opts, ok := m.hbRejected[reason]
	if !ok {
		opts = m.hbRejected[ReasonOther]
	}
	m.heartbeats.Add(ctx, 1, opts...)
}

func statusIndex(s health.Status) int {
	for i, st := range health.Statuses() {
		if st == s {
			return i
		}
	}
	return -1
}

// ServerStatus moves one server from status from to status to in the servers gauge; from "" adds a
// server (registered, or loaded at start), to "" removes one.
func (m *Metrics) ServerStatus(from, to health.Status) {
	if m == nil || from == to {
		return
	}
	if i := statusIndex(from); i >= 0 {
		m.servers[i].Add(-1)
	}
	if i := statusIndex(to); i >= 0 {
		m.servers[i].Add(1)
	}
}

// Transition counts a committed status transition.
func (m *Metrics) Transition(ctx context.Context, from, to health.Status) {
	if m == nil {
		return
	}
	if opts, ok := m.transOpts[[2]health.Status{from, to}]; ok {
		m.transitions.Add(ctx, 1, opts...)
	}
}

// DetectionLag records the lag of a monitor-driven unhealthy transition.
func (m *Metrics) DetectionLag(ctx context.Context, lag time.Duration) {
	if m == nil {
		return
	}
	m.lag.Record(ctx, lag.Seconds())
}

// Flush records one flush of writer (WriterCommands or WriterStamps): how many items it carried, how
// long it took, and whether it failed.
func (m *Metrics) Flush(ctx context.Context, writer string, items int, d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.batchSize.Record(ctx, int64(items), m.writerOpts[writer]...)
	m.flush.Record(ctx, d.Seconds(), m.flushOpts[[2]string{writer, outcome}]...)
}

// Backlog sets the backlog of writer (WriterCommands or WriterStamps).
func (m *Metrics) Backlog(writer string, n int) {
	if m == nil {
		return
	}
	i := 0
	if writer == WriterStamps {
		i = 1
	}
	m.backlog[i].Store(int64(n))
}

// NodeLoad sets the node's load as the fleet's saturation gauge measured it: the p99 time goroutines
// waited for a CPU, the goroutines ready per CPU, and whether first registrations are refused.
func (m *Metrics) NodeLoad(p99 time.Duration, runnablePerCPU float64, saturated bool) {
	if m == nil {
		return
	}
	m.schedP99.Store(int64(p99))
	m.runnable.Store(math.Float64bits(runnablePerCPU))
	m.saturated.Store(saturated)
}

// ActorEvent counts a supervision event of the actor system (Deps.OnEvent) that restarted or
// respawned an actor: "server_actor_restart", "server_actor_respawn", "system_actor_restart". Other
// events are not restarts and are not counted here.
func (m *Metrics) ActorEvent(event string) {
	if m == nil || !slices.Contains(restartEvents, event) {
		return
	}
	m.restarts.Add(context.Background(), 1, metric.WithAttributes(attribute.String("event", event)))
}

// restartEvents is the closed label set of mcpfleet.actor.restarts.
var restartEvents = []string{"server_actor_restart", "server_actor_respawn", "system_actor_restart"}

// AlertDelivery counts one webhook delivery attempt; attempt is 1 for the first.
func (m *Metrics) AlertDelivery(ctx context.Context, attempt int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.alerts.Add(ctx, 1, m.alertFailed...)
	} else {
		m.alerts.Add(ctx, 1, m.alertOK...)
	}
	if attempt > 1 {
		m.retries.Add(ctx, 1)
	}
}

// knownMethods keeps the method label bounded: anything else is "_OTHER" (as the HTTP semantic
// conventions say).
var knownMethods = map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
	"DELETE": "DELETE", "OPTIONS": "OPTIONS", "CONNECT": "CONNECT", "TRACE": "TRACE"}

// HTTPRequest records one HTTP request. route is the matched route pattern ("" for none).
func (m *Metrics) HTTPRequest(ctx context.Context, method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if mm, ok := knownMethods[method]; ok {
		method = mm
	} else {
		method = "_OTHER"
	}
	k := httpKey{method: method, route: route, status: status}
	m.httpMu.RLock()
	opts, ok := m.httpOpts[k]
	m.httpMu.RUnlock()
	if !ok {
		kv := []attribute.KeyValue{attribute.String("http.request.method", method),
			attribute.Int("http.response.status_code", status)}
		if route != "" {
			kv = append(kv, attribute.String("http.route", route))
		}
		opts = recOpt(kv...)
		m.httpMu.Lock()
		if prev, ok := m.httpOpts[k]; ok {
			opts = prev
		} else if len(m.httpOpts) < MaxHTTPSeries {
			m.httpOpts[k] = opts
		} else {
			opts = m.httpOverflow
		}
		m.httpMu.Unlock()
	}
	m.http.Record(ctx, d.Seconds(), opts...)
}

var mcpBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30}

// mcpOperation records one MCP client operation: in public by kind and outcome (anything outside
// their closed sets as "other"), in private also by tenant and server name.
func (m *Metrics) mcpOperation(ctx context.Context, kind, tenant, server, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	pk, po := kind, outcome
	if !slices.Contains(mcpKinds, pk) {
		pk = MCPOther
	}
	if !slices.Contains(mcpOutcomes, po) {
		po = MCPOther
	}
	m.mcp.Record(ctx, d.Seconds(), m.mcpOpts[[2]string{pk, po}]...)
	if m.mcpServer != nil {
		m.mcpServer.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("kind", pk),
			attribute.String("outcome", po), attribute.String("tenant_id", tenant), attribute.String("server", server)))
	}
}

// StatusReason maps the HTTP status of a rejected heartbeat to its reason.
func StatusReason(status int) string {
	switch status {
	case http.StatusBadRequest:
		return ReasonInvalid
	case http.StatusUnauthorized:
		return ReasonUnauthenticated
	case http.StatusForbidden:
		return ReasonForbidden
	case http.StatusNotFound:
		return ReasonNotRegistered
	case http.StatusConflict:
		return ReasonDeregistered
	case http.StatusRequestEntityTooLarge:
		return ReasonTooLarge
	case http.StatusUnsupportedMediaType:
		return ReasonUnsupported
	case http.StatusTooManyRequests:
		return ReasonThrottled
	case http.StatusServiceUnavailable:
		return ReasonUnavailable
	}
	return ReasonOther
}
