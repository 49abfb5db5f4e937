package telemetry

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Provider is the service's tracer provider (issue 14): what the OpenTelemetry SDK's TracerProvider
// with a batch span processor and the OTLP exporter did, for the spans this service makes, at a
// fraction of the cost. At 100 % sampling a heartbeat makes two recorded spans; with the SDK each
// cost a span, a snapshot of it when it ended, a map to deduplicate its attributes, a place in the
// batch processor's queue and then its encoding — together with their garbage a third of the
// service's CPU per heartbeat. Here a recorded span is one allocation (an exported span's
// attributes live in a recycled slice), and End encodes it straight into the batch it is exported
// in; nothing else is kept.
//
// Contract, as the SDK's:
//   - Start takes its parent from the context (none with trace.WithNewRoot), keeps a valid parent's
//     trace id, makes a new span id (the idGenerator: WithSpanID's fixed id once), and asks the
//     sampler with the parent context, trace id, name, kind, start attributes and links; a dropped
//     span still has its span context (ids, and the parent's flags with the sampled flag cleared), so
//     propagation and the trace ids written into audit events are the same whether a span is recorded
//     or not. RecordOnly records a span that is not exported.
//   - A recorded span keeps at most 128 attributes (a key set again keeps its first place and takes
//     the last value; a new key past the limit is dropped and counted; an invalid attribute is dropped
//     and counted), 128 events and 128 links (past those the oldest is dropped and counted), and the
//     first 128 attributes of an event or a link, as given. Values are not truncated (the SDK's
//     default limits).
//   - SetStatus: Ok is final, an Error's description is kept, Unset changes nothing. RecordError adds
//     an "exception" event (exception.type, exception.message). End records a panic in flight as an
//     "exception" event and lets it go on; a second End, and anything after End, is ignored.
//   - Export (when an exporter is configured): a sampled span is encoded when it ends into the batch
//     being filled; a batch of OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans, or whatever is there each
//     OTEL_BSP_SCHEDULE_DELAY, is sent (otlpExporter: retries included) under
//     OTEL_BSP_EXPORT_TIMEOUT; at most OTEL_BSP_MAX_QUEUE_SIZE spans wait, and a span that ends when
//     they are all waiting is dropped and counted (Dropped), never waited for: a slow collector does
//     not slow a request. ForceFlush sends what was ended before it; Shutdown flushes, stops the
//     exporter, and from then on spans are not recorded.
type Provider struct {
	embedded.TracerProvider

	sampler sdktrace.Sampler
	ids     sdktrace.IDGenerator
	batch   *batcher // nil: nothing is exported (no span is recorded either)

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*tracer
	stopped atomic.Bool
}

// The limits of a recorded span (the SDK's defaults).
const (
	maxSpanAttributes  = 128
	maxSpanEvents      = 128
	maxSpanLinks       = 128
	maxAttrsPerElement = 128 // per event, per link
)

// defaultTracerName names the scope of a tracer asked for without a name, as the SDK does.
const defaultTracerName = "go.opentelemetry.io/otel/sdk/tracer"

// newProvider returns a provider that samples with sampler and exports through b (nil: nothing is
// recorded; spans still have span contexts).
func newProvider(sampler sdktrace.Sampler, b *batcher) *Provider {
	if b == nil {
		sampler = sdktrace.NeverSample()
	}
	p := &Provider{sampler: sampler, ids: idGenerator{}, batch: b, tracers: map[instrumentation.Scope]*tracer{}}
	if b != nil {
		b.start()
	}
	return p
}

// Tracer returns the tracer of the instrumentation scope name (with the options' version, schema URL
// and attributes); the same one for the same scope.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if name == "" {
		name = defaultTracerName
	}
	c := trace.NewTracerConfig(opts...)
	scope := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL(),
		Attributes: c.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.tracers[scope]; ok {
		return t
	}
	t := &tracer{p: p, scope: -1}
	if p.batch != nil {
		t.scope = p.batch.addScope(scope)
	}
	p.tracers[scope] = t
	return t
}

// ForceFlush exports every sampled span that ended before it was called, and returns when they are
// sent (or failed), or when ctx is done.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.batch == nil || p.stopped.Load() {
		return nil
	}
	return p.batch.flush(ctx)
}

// Shutdown flushes, stops the export and ends recording: spans started later are not recorded.
// Calling it again does nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.stopped.Swap(true) || p.batch == nil {
		return nil
	}
	return p.batch.stop(ctx)
}

// Dropped is how many sampled spans were not exported because the export queue was full.
func (p *Provider) Dropped() uint64 {
	if p.batch == nil {
		return 0
	}
	return p.batch.dropped.Load()
}

// tracer starts the spans of one instrumentation scope.
type tracer struct {
	embedded.Tracer
	p     *Provider
	scope int // the scope's index in the batcher; -1 without one
}

// Start starts a span; see Provider for the contract.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg := trace.NewSpanStartConfig(opts...)
	var psc trace.SpanContext
	sctx := ctx // the context the ids and the sampler see
	if cfg.NewRoot() {
		sctx = trace.ContextWithSpanContext(ctx, psc)
	} else {
		psc = trace.SpanContextFromContext(ctx)
	}
	var tid trace.TraceID
	var sid trace.SpanID
	if psc.TraceID().IsValid() {
		tid, sid = psc.TraceID(), t.p.ids.NewSpanID(sctx, psc.TraceID())
	} else {
		tid, sid = t.p.ids.NewIDs(sctx)
	}
	sr := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: sctx, TraceID: tid, Name: name,
		Kind: cfg.SpanKind(), Attributes: cfg.Attributes(), Links: cfg.Links()})
	scc := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: sr.Tracestate,
		TraceFlags: psc.TraceFlags() &^ trace.FlagsSampled}
	if sr.Decision == sdktrace.RecordAndSample {
		scc.TraceFlags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(scc)
	if sr.Decision == sdktrace.Drop || t.p.stopped.Load() {
		s := &droppedSpan{sc: sc, p: t.p}
		return trace.ContextWithSpan(ctx, s), s
	}
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &span{t: t, sc: sc, parent: psc, kind: trace.ValidateSpanKind(cfg.SpanKind()), name: name, start: start,
		export: sr.Decision == sdktrace.RecordAndSample}
	for _, l := range cfg.Links() {
		s.AddLink(l)
	}
	s.SetAttributes(sr.Attributes...)
	s.SetAttributes(cfg.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

// droppedSpan is a span the sampler dropped: its span context, nothing recorded. Every unsampled
// request starts two (its HTTP span and its actor's), so it holds only what it answers: embedding
// noop.Span would add a second, unused span context: 160 bytes a span instead of 96.
type droppedSpan struct {
	embedded.Span
	sc trace.SpanContext
	p  *Provider
}

// SpanContext returns the span's span context.
func (s *droppedSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the provider that started the span.
func (s *droppedSpan) TracerProvider() trace.TracerProvider { return s.p }

// IsRecording is false: nothing is recorded.
func (*droppedSpan) IsRecording() bool { return false }

// The rest records nothing.
func (*droppedSpan) End(...trace.SpanEndOption)              {}
func (*droppedSpan) AddEvent(string, ...trace.EventOption)   {}
func (*droppedSpan) AddLink(trace.Link)                      {}
func (*droppedSpan) RecordError(error, ...trace.EventOption) {}
func (*droppedSpan) SetStatus(codes.Code, string)            {}
func (*droppedSpan) SetName(string)                          {}
func (*droppedSpan) SetAttributes(...attribute.KeyValue)     {}

// span is a recorded span.
type span struct {
	embedded.Span
	t      *tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	start  time.Time
	export bool // sampled: encoded for export when it ends

	ended atomic.Bool // set under mu; read without it by IsRecording
	mu    sync.Mutex
	// Written under mu until ended; read by End's encoding after it.
	name          string
	end           time.Time
	attrs         []attribute.KeyValue
	attrsBuf      *[]attribute.KeyValue // where attrs came from in attrBufs (an exported span's), or nil
	droppedAttrs  int
	events        []spanEvent
	droppedEvents int
	links         []spanLink
	droppedLinks  int
	status        sdktrace.Status
}

type spanEvent struct {
	name    string
	time    time.Time
	attrs   []attribute.KeyValue
	dropped int
}

type spanLink struct {
	sc      trace.SpanContext
	attrs   []attribute.KeyValue
	dropped int
}

// SpanContext returns the span's span context.
func (s *span) SpanContext() trace.SpanContext { return s.sc }

// IsRecording reports whether the span has not ended.
func (s *span) IsRecording() bool { return !s.ended.Load() }

// TracerProvider returns the provider that started the span.
func (s *span) TracerProvider() trace.TracerProvider { return s.t.p }

// SetName renames the span.
func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended.Load() {
		s.name = name
	}
}

// SetAttributes sets attributes: see Provider for the limits.
func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		return
	}
	if s.attrs == nil {
		if s.export {
			s.attrsBuf = attrBufs.Get().(*[]attribute.KeyValue)
			s.attrs = (*s.attrsBuf)[:0]
		} else {
			s.attrs = make([]attribute.KeyValue, 0, min(len(kv), maxSpanAttributes))
		}
	}
	var dropped int
	s.attrs, dropped = setAttrs(s.attrs, kv, maxSpanAttributes)
	s.droppedAttrs += dropped
}

// setAttrs sets each valid attribute of kv in attrs — a key already there takes the new value in its
// place, a new key is appended while attrs holds fewer than limit — and returns attrs and how many
// were dropped (invalid, or new past the limit). The search is linear: spans hold a dozen attributes.
func setAttrs(attrs, kv []attribute.KeyValue, limit int) ([]attribute.KeyValue, int) {
	dropped := 0
next:
	for _, a := range kv {
		if !a.Valid() {
			dropped++
			continue
		}
		for i := range attrs {
			if attrs[i].Key == a.Key {
				attrs[i] = a
				continue next
			}
		}
		if len(attrs) >= limit {
			dropped++
			continue
		}
		attrs = append(attrs, a)
	}
	return attrs, dropped
}

// limitAttrs is the first limit attributes of kv, as given, and how many past them were dropped: the
// SDK neither deduplicates nor validates the attributes of an event or a link.
func limitAttrs(kv []attribute.KeyValue, limit int) ([]attribute.KeyValue, int) {
	if len(kv) > limit {
		return kv[:limit], len(kv) - limit
	}
	return kv, 0
}

// AddEvent adds an event.
func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	attrs, dropped := limitAttrs(c.Attributes(), maxAttrsPerElement)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended.Load() {
		s.addEvent(spanEvent{name: name, time: c.Timestamp(), attrs: attrs, dropped: dropped})
	}
}

// addEvent appends e, dropping the oldest event past the limit; s.mu is held.
func (s *span) addEvent(e spanEvent) {
	if len(s.events) >= maxSpanEvents {
		s.events = append(s.events[:0], s.events[1:]...)
		s.droppedEvents++
	}
	s.events = append(s.events, e)
}

// AddLink adds a link; one with no valid span context, no attributes and no trace state is ignored.
func (s *span) AddLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	attrs, dropped := limitAttrs(slices.Clone(l.Attributes), maxAttrsPerElement)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		return
	}
	if len(s.links) >= maxSpanLinks {
		s.links = append(s.links[:0], s.links[1:]...)
		s.droppedLinks++
	}
	s.links = append(s.links, spanLink{sc: l.SpanContext, attrs: attrs, dropped: dropped})
}

// SetStatus sets the status: Ok is final, Unset changes nothing, only an Error keeps its description.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() || s.status.Code > code {
		return
	}
	s.status = sdktrace.Status{Code: code}
	if code == codes.Error {
		s.status.Description = description
	}
}

// RecordError adds an "exception" event for err (nothing for nil).
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || !s.IsRecording() {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeName(err)), semconv.ExceptionMessage(err.Error())))
	if c := trace.NewEventConfig(opts...); c.StackTrace() {
		opts = append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(stackTrace())))
	}
	s.AddEvent(semconv.ExceptionEventName, opts...)
}

// End ends the span and, if it is sampled, encodes it for export.
func (s *span) End(opts ...trace.SpanEndOption) {
	end := s.start.Add(time.Since(s.start)) // the monotonic clock's duration
	s.mu.Lock()
	if s.ended.Load() {
		s.mu.Unlock()
		return
	}
	c := trace.NewSpanEndConfig(opts...)
	if recovered := recover(); recovered != nil {
		defer panic(recovered) // recorded, not stopped
		attrs := []attribute.KeyValue{semconv.ExceptionType(typeName(recovered)), semconv.ExceptionMessage(fmt.Sprint(recovered))}
		if c.StackTrace() {
			attrs = append(attrs, semconv.ExceptionStacktrace(stackTrace()))
		}
		s.addEvent(spanEvent{name: semconv.ExceptionEventName, time: time.Now(), attrs: attrs})
	}
	if ts := c.Timestamp(); !ts.IsZero() {
		end = ts
	}
	s.end = end
	s.ended.Store(true)
	s.mu.Unlock()
	if s.export && s.t.scope >= 0 {
		s.t.p.batch.add(s.t.scope, s)
	}
	s.releaseAttrs()
}

// attrBufs recycles exported spans' attribute slices: an exported span's attributes are garbage as
// soon as End has encoded them (or dropped the span), and at 100 % sampling, two spans and fifteen
// attributes a heartbeat, they were a third of the bytes tracing allocated — bytes the collector then
// had to mark the whole fleet's heap for.
var attrBufs = sync.Pool{New: func() any { s := make([]attribute.KeyValue, 0, 16); return &s }}

// releaseAttrs gives an exported span's attribute slice back to attrBufs; End calls it once the span
// is encoded. Nothing reads a span's attributes after End: every method that would is ignored then.
// The pool's slices stay bounded: setAttrs never appends past maxSpanAttributes, so a slice that
// started at 16 doubles to 128 at most.
func (s *span) releaseAttrs() {
	if s.attrsBuf == nil {
		return
	}
	clear(s.attrs) // the values' strings are not kept alive by the pool
	*s.attrsBuf = s.attrs[:0]
	attrBufs.Put(s.attrsBuf)
	s.attrs, s.attrsBuf = nil, nil
}

// typeName is the SDK's exception.type of v: package path and name, or the type's text for a builtin.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// stackTrace is the calling goroutine's stack, for exception.stacktrace.
func stackTrace() string {
	buf := make([]byte, 2048)
	for {
		n := runtime.Stack(buf, false)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
