package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SpanCarrier returns the carrier of span, for the messages its work sends.
func SpanCarrier(span trace.Span) Carrier { return Carrier{SpanContext: span.SpanContext()} }

// Into returns ctx (its deadline and values kept) with the carried span as the parent of the spans
// started from it; ctx itself if nothing is carried.
func (c Carrier) Into(ctx context.Context) context.Context {
	if !c.SpanContext.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, c.SpanContext)
}

// EventCarrier returns the carrier of the span that recorded an event (a status transition) in trace
// traceIDHex, whose span id was derived from the event id with WithSpanID(ctx, SpanIDFor(eventID)):
// the parent for work done later on the event's behalf, such as delivering its alert. It is marked
// sampled: the spans that record events are always sampled (AlwaysSampledSpan). The zero Carrier if
// traceIDHex is not a trace id.
func EventCarrier(traceIDHex string, eventID [16]byte) Carrier {
	tid, err := trace.TraceIDFromHex(traceIDHex)
	if err != nil {
		return Carrier{}
	}
	return Carrier{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: SpanIDFor(eventID), TraceFlags: trace.FlagsSampled, Remote: true,
	})}
}

// EndSpan ends span, marking it failed with err's text if err is not nil.
func EndSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
