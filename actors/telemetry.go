package actors

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Tracing inside the actors. protoactor-go has no OpenTelemetry support, so every message that crosses
// actors carries the span context of its cause (a telemetry.Carrier field) and the receiving actor
// starts its span from it:
//
//	HTTP request (httpapi's tracing middleware) ─▶ fleet.register ─▶ server.register ─▶ writer.apply ─▶ SQL of the command
//	HTTP request (httpapi's tracing middleware) ─▶ server.heartbeat [─▶ server.recover ─▶ writer.apply ─▶ SQL]
//	writer.flush (root; a link to every request it carries) ─▶ BEGIN, batch, COMMIT
//	stamper.flush (root; a link to every sampled heartbeat it carries) ─▶ UPDATE
//	server.transition (root; links to the last heartbeat and the registration) ─▶ writer.apply ─▶ SQL (with the skill cascade)
//	                  └▶ alert.deliver (later) ─▶ webhook POST
//
// Batch spans hold at most telemetry.MaxLinks links. The monitor's per-server evaluation makes no
// span (100k servers every 5 s would be 20k spans a second); only a transition does.

// carrier lets files that do not import telemetry name the type of a carried span context.
type carrier = telemetry.Carrier

// tel is what an actor needs to trace and measure its work. Its zero value records nothing.
type tel struct {
	tracer  trace.Tracer
	metrics *telemetry.Metrics
}

func newTel(tracer trace.Tracer, m *telemetry.Metrics) tel {
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	return tel{tracer: tracer, metrics: m}
}

func (t tel) trc() trace.Tracer {
	if t.tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t.tracer
}

// startSpan starts span name as a child of the carried span (or a root if nothing is carried).
func startSpan(tracer trace.Tracer, c telemetry.Carrier, name string) trace.Span {
	_, span := tracer.Start(c.Context(), name)
	return span
}

// endSpan ends span, marking it failed if err is not nil.
func endSpan(span trace.Span, err error) { telemetry.EndSpan(span, err) }

// setServerAttrs puts the server's identity on span, only if it is recording (building the attributes
// allocates; a non-recording span on the heartbeat path must stay free).
func setServerAttrs(span trace.Span, tenantID, serverID uuid.UUID, module string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attribute.String("mcpfleet.tenant_id", tenantID.String()),
		attribute.String("mcpfleet.server_id", serverID.String()),
		attribute.String("mcpfleet.module_name", module),
	)
}

// statusAttrs is the mcpfleet.status attribute of each status code (statusCodes); code 0, nothing
// committed yet, has none (the zero KeyValue, which a span drops).
var statusAttrs = func() []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, len(statusCodes))
	for i, s := range statusCodes[1:] {
		kvs[i+1] = attribute.String("mcpfleet.status", string(s))
	}
	return kvs
}()

// startTransitionSpan starts the span of a monitor-driven transition t, linked to the server's last
// heartbeat and its registration. A new decision is a new root whose span id is derived from its event
// id (so alert.deliver, maybe in a later process, can name it as parent); a decision that repeats a
// pending one whose commit answer was lost (t.Retry: same event id) is a child of that one's span, in
// its trace. Links and attributes are added only to a recorded span (see startStatusSpan).
func (a *serverActor) startTransitionSpan(t *lifecycle.Transition) trace.Span {
	lag := attribute.Int64("mcpfleet.lag_ms", t.Lag.Milliseconds())
	var span trace.Span
	if pc := retryCarrier(t); pc.SpanContext.IsValid() {
		span = a.startStatusSpan(pc.Context(), telemetry.AlwaysSampledSpan, t.From, t.To, lag, attribute.Bool("mcpfleet.retry", true))
	} else {
		// A root: the background context has no parent (trace.WithNewRoot would defeat WithSpanID).
		ctx := telemetry.WithSpanID(context.Background(), telemetry.SpanIDFor(t.EventID))
		span = a.startStatusSpan(ctx, telemetry.AlwaysSampledSpan, t.From, t.To, lag)
	}
	if span.IsRecording() {
		for _, l := range []link{a.rec.lastHeartbeatTrace, a.rec.registrationTrace} {
			if sc := l.spanContext(); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	return span
}

// retryCarrier is the span of the decision a retried transition repeats; the zero Carrier if t is not
// a retry.
func retryCarrier(t *lifecycle.Transition) telemetry.Carrier {
	if !t.Retry {
		return telemetry.Carrier{}
	}
	return telemetry.EventCarrier(t.TraceID, t.EventID)
}

// startStatusSpan starts span name under parent for a status change from → to of this server, with
// the server's identity, the change and extra as attributes, set only if the span is recorded: the
// sampler decides without them (by name and parent), and building them (the ids' strings) was most of
// what a transition's tracing cost with nothing exported — a tenth of the service's CPU while a fleet
// went unhealthy at once.
func (a *serverActor) startStatusSpan(parent context.Context, name string, from, to health.Status, extra ...attribute.KeyValue) trace.Span {
	_, span := a.deps.tracer.Start(parent, name)
	if span.IsRecording() {
		span.SetAttributes(append(a.transitionAttrs(from, to), extra...)...)
	}
	return span
}

// startFlush starts the writer.flush span of one group commit: a root, linked to the (sampled)
// requests it carries. If any is sampled, the returned context names the request of each command
// (persistence.WithParents), so that the store traces the command's statements in that request's trace,
// under a writer.apply span.
func (t tel) startFlush(ctx context.Context, batch []queuedWrite) (context.Context, trace.Span, []persistence.Command) {
	var links telemetry.BatchLinks
	var cmds []persistence.Command
	n := 0
	for _, q := range batch {
		links.Add(q.req.trace)
		n += len(q.req.cmds)
	}
	cmds = make([]persistence.Command, 0, n)
	for _, q := range batch {
		cmds = append(cmds, q.req.cmds...)
	}
	ctx, span := t.trc().Start(ctx, "writer.flush", trace.WithNewRoot(), trace.WithLinks(links.Links...))
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("mcpfleet.batch.requests", len(batch)), attribute.Int("mcpfleet.batch.commands", n),
			attribute.Int("mcpfleet.batch.links_dropped", links.Dropped))
	}
	if len(links.Links) > 0 {
		parents := make([]trace.SpanContext, 0, n)
		for _, q := range batch {
			for range q.req.cmds {
				parents = append(parents, q.req.trace.SpanContext)
			}
		}
		ctx = persistence.WithParents(ctx, parents)
	}
	return ctx, span, cmds
}

// endFlush records a group commit's outcome on its span and in the metrics.
func (t tel) endFlush(ctx context.Context, span trace.Span, start time.Time, n int, errs []error) {
	err := firstErr(errs)
	t.metrics.Flush(ctx, telemetry.WriterCommands, n, time.Since(start), err)
	endSpan(span, err)
}

// flushStamps writes one batch of heartbeat stamps under a stamper.flush span linked to the sampled
// heartbeats it carries, and returns the span's carrier (for the log of a failure), the stale fences whose
// stamps were dropped, and the error.
func (t tel) flushStamps(store stampStore, batch []persistence.Stamp, links telemetry.BatchLinks) (telemetry.Carrier, []persistence.Fence, error) {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, span := t.trc().Start(c, "stamper.flush", trace.WithNewRoot(), trace.WithLinks(links.Links...))
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("mcpfleet.batch.stamps", len(batch)), attribute.Int("mcpfleet.batch.links_dropped", links.Dropped))
	}
	start := time.Now()
	fenced, err := store.StampHeartbeatsFenced(c, batch)
	t.metrics.Flush(c, telemetry.WriterStamps, len(batch), time.Since(start), err)
	endSpan(span, err)
	return telemetry.SpanCarrier(span), fenced, err
}

// startDelivery starts the alert.deliver span of one webhook delivery attempt: a child of the span of
// the transition that raised the alert (its id derives from the event id), so the delivery is in the
// same trace as the transition, the audit event and the alert's trace_id.
func (t tel) startDelivery(ctx context.Context, al persistence.Alert, attempt int) (context.Context, trace.Span) {
	ctx, span := t.trc().Start(telemetry.EventCarrier(al.TraceID, al.EventID).Into(ctx), "alert.deliver",
		trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("mcpfleet.event_id", al.EventID.String()),
			attribute.String("mcpfleet.tenant_id", al.TenantID.String()), attribute.Int("mcpfleet.attempt", attempt))
	}
	return ctx, span
}

// endDelivery records a delivery attempt's outcome.
func (t tel) endDelivery(ctx context.Context, span trace.Span, attempt int, err error) {
	t.metrics.AlertDelivery(ctx, attempt, err)
	endSpan(span, err)
}

// injectTraceparent writes ctx's span context into h as W3C traceparent (and tracestate).
func injectTraceparent(ctx context.Context, h map[string][]string) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// eventContext is the context of a log record about an event recorded in trace traceID.
func eventContext(ctx context.Context, al persistence.Alert) context.Context {
	return telemetry.EventCarrier(al.TraceID, al.EventID).Into(ctx)
}

// Short names for telemetry's, for the files that do not import it.
const (
	telemetryWriterCommands = telemetry.WriterCommands
	telemetryWriterStamps   = telemetry.WriterStamps
)

type batchLinks = telemetry.BatchLinks

// carrierOf returns the carrier of span.
func carrierOf(span trace.Span) carrier { return telemetry.SpanCarrier(span) }
