package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// AlwaysSampledSpans names the root spans that are sampled whatever the ratio: each is rare (at most
// one per server and change of status) and its trace id is written into an audit event and an
// alert, where an operator will look it up.
var AlwaysSampledSpans = map[string]bool{"server.transition": true}

// NewSampler returns the sampler named as OTEL_TRACES_SAMPLER names it (always_on, always_off,
// traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio; "" is
// parentbased_always_on), with arg as OTEL_TRACES_SAMPLER_ARG (the ratio, default 1), wrapped so that
// two kinds of root span are kept although the ratio would drop them (unless the sampler is one of the
// always_off ones):
//   - a span named in AlwaysSampledSpans;
//   - a root span with a link to a sampled span — a batch flush that carries a sampled heartbeat, so
//     the link from that heartbeat's trace leads somewhere.
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
	switch name {
	case "", "parentbased_always_on":
		return keepSampler{sdktrace.ParentBased(sdktrace.AlwaysSample())}, nil
	case "always_on":
		return keepSampler{sdktrace.AlwaysSample()}, nil
	case "traceidratio":
		return keepSampler{sdktrace.TraceIDRatioBased(ratio)}, nil
	case "parentbased_traceidratio":
		return keepSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}, nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// keepSampler is NewSampler's wrapper. It looks at links only for root spans, and at most at
// MaxLinks of them, so its cost on the hot path (child spans) is one branch.
type keepSampler struct{ base sdktrace.Sampler }

func (s keepSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		keep := AlwaysSampledSpans[p.Name]
		for i := 0; i < len(p.Links) && i < MaxLinks && !keep; i++ {
			keep = p.Links[i].SpanContext.IsSampled()
		}
		if keep {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
				Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
		}
	}
	return s.base.ShouldSample(p)
}

func (s keepSampler) Description() string {
	return "KeepTransitionsAndLinked{" + s.base.Description() + "}"
}

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

type fixedSpanID struct {
	id   trace.SpanID
	used atomic.Bool
}

type fixedSpanIDKey struct{}

// WithSpanID returns a context in which the next span started gets span id id (once: spans started
// later from the same context get random ids).
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, fixedSpanIDKey{}, &fixedSpanID{id: id})
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
	if f, ok := ctx.Value(fixedSpanIDKey{}).(*fixedSpanID); ok && f.used.CompareAndSwap(false, true) {
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
