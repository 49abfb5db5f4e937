package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// AlwaysSampledSpan names the root span that is sampled whatever the ratio: it is rare (at most one per
// server and change of status) and its trace id is written into an audit event and an alert, where an
// operator will look it up.
const AlwaysSampledSpan = "server.transition"

// NewSampler returns the sampler named as OTEL_TRACES_SAMPLER names it (always_on, always_off,
// traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio; "" is
// parentbased_always_on), with arg as OTEL_TRACES_SAMPLER_ARG (the ratio, default 1). It decides as
// the SDK's samplers of those names do, and in addition keeps two kinds of root span that the ratio
// would drop (unless the sampler is one of the always_off ones):
//   - a span named AlwaysSampledSpan;
//   - a root span with a link to a sampled span — a batch flush that carries a sampled heartbeat, so
//     the link from that heartbeat's trace leads somewhere.
//
// It is one flat function rather than the SDK's samplers wrapped in one another, to keep span starts
// shallow: they run on actor goroutines, whose stacks start small and are copied when they grow.
func NewSampler(name, arg string) (sdktrace.Sampler, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	arg = strings.TrimSpace(arg)
	ratio := 1.0
	if arg != "" && strings.HasSuffix(name, "traceidratio") {
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		ratio = v
	}
	s := &sampler{}
	var sdk sdktrace.Sampler // the SDK's sampler of that name, for the description
	switch name {
	case "", "parentbased_always_on":
		s.parent, s.bound, sdk = true, math.MaxUint64, sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "always_on":
		s.bound, sdk = math.MaxUint64, sdktrace.AlwaysSample()
	case "traceidratio":
		s.bound, sdk = ratioBound(ratio), sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_traceidratio":
		s.parent, s.bound, sdk = true, ratioBound(ratio), sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
	s.desc = "KeepTransitionsAndLinked{" + sdk.Description() + "}"
	return s, nil
}

// ratioBound is the SDK's TraceIDRatioBased threshold: a root is sampled when the low 63 bits of the
// trace id's second half are below it; MaxUint64 samples everything.
func ratioBound(ratio float64) uint64 {
	if ratio >= 1 {
		return math.MaxUint64
	}
	return uint64(ratio * (1 << 63))
}

type sampler struct {
	parent bool   // follow a valid parent's decision
	bound  uint64 // roots: sample when the trace id's key is below it
	desc   string
}

func (s *sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	if s.parent && psc.IsValid() {
		if psc.IsSampled() {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: psc.TraceState()}
		}
		return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: psc.TraceState()}
	}
	if s.bound == math.MaxUint64 || binary.BigEndian.Uint64(p.TraceID[8:16])>>1 < s.bound {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: psc.TraceState()}
	}
	if !psc.IsValid() {
		keep := p.Name == AlwaysSampledSpan
		for i := 0; i < len(p.Links) && i < MaxLinks && !keep; i++ {
			keep = p.Links[i].SpanContext.IsSampled()
		}
		if keep {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
		}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: psc.TraceState()}
}

func (s *sampler) Description() string { return s.desc }

// MaxLinks bounds the span links of one batch span (a writer or stamper flush): a flush carrying more
// sampled requests links the first MaxLinks and counts the rest in the attribute
// mcpfleet.batch.links_dropped.
const MaxLinks = 128

// BatchLinks collects the links of one batch span: at most MaxLinks, sampled span contexts only
// (an unsampled span is not in any backend). The zero value is ready to use.
type BatchLinks struct {
	Links   []trace.Link
	Dropped int
}

// Add links c's span if it is sampled.
func (b *BatchLinks) Add(c Carrier) {
	if !c.SpanContext.IsSampled() {
		return
	}
	if len(b.Links) >= MaxLinks {
		b.Dropped++
		return
	}
	b.Links = append(b.Links, trace.Link{SpanContext: c.SpanContext})
}

// idGenerator is the SDK's random generator, plus one thing: a span started with a context from
// WithSpanID gets that span id. It is how an alert delivered later (perhaps by another process) names
// the span of the transition that caused it as its parent: both derive the id from the event id.
type idGenerator struct{}

// fixedSpanID is the context WithSpanID returns. The generator recognises it by a type assertion on
// the context it is given, not by a lookup through the context chain, so every other span (all of
// the heartbeat path, under deep request contexts) pays nothing for it.
type fixedSpanID struct {
	context.Context
	id   trace.SpanID
	used atomic.Bool
}

// WithSpanID returns a context in which the next span started directly from it gets span id id, once.
// The span must have no parent in ctx and must not be started with trace.WithNewRoot (the SDK would
// wrap the context before asking for ids); spans started from the context that Start returns, or
// later from this one, get random ids.
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return &fixedSpanID{Context: ctx, id: id}
}

// SpanIDFor derives a span id from a 16-byte event id (its first 8 bytes; never zero for a UUID v4).
func SpanIDFor(eventID [16]byte) trace.SpanID {
	var id trace.SpanID
	copy(id[:], eventID[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

func (idGenerator) fixed(ctx context.Context) (trace.SpanID, bool) {
	if f, ok := ctx.(*fixedSpanID); ok && f.used.CompareAndSwap(false, true) {
		return f.id, true
	}
	return trace.SpanID{}, false
}

func (g idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := g.fixed(ctx); ok {
		return id
	}
	return randomSpanID()
}

func (g idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	if id, ok := g.fixed(ctx); ok {
		return tid, id
	}
	return tid, randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
