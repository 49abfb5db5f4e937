package actors

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// link is a span a monitor transition links its trace to (the server's registration, its last
// heartbeat), kept in every server's record for the life of the server: a span context's ids and
// flags without its trace state — 25 bytes instead of a trace.SpanContext's 56 and more.
type link struct {
	traceID trace.TraceID
	spanID  trace.SpanID
	// flags are the W3C trace flags but for the top bit, which says whether the span is remote: W3C
	// defines the low two (sampled, random), OpenTelemetry's propagator keeps only those, and the SDK
	// sets no other; a flag in the top bit would be lost here, in the link target only.
	flags byte
}

// linkRemote is the bit of link.flags that says the span is remote.
const linkRemote = 0x80

// linkOf keeps the span c carries as a link target.
func linkOf(c telemetry.Carrier) link {
	sc := c.SpanContext
	flags := byte(sc.TraceFlags()) &^ linkRemote
	if sc.IsRemote() {
		flags |= linkRemote
	}
	return link{traceID: sc.TraceID(), spanID: sc.SpanID(), flags: flags}
}

// spanContext is the link target again (no trace state).
func (l link) spanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: l.traceID, SpanID: l.spanID,
		TraceFlags: trace.TraceFlags(l.flags &^ linkRemote), Remote: l.flags&linkRemote != 0})
}

// linkToTrace rebuilds a link target from a stored trace id (its span id is unknown: the link names
// the trace); none for the zero id (no trace stored, or one that did not parse).
func linkToTrace(tid trace.TraceID) link {
	if !tid.IsValid() {
		return link{}
	}
	return link{traceID: tid, spanID: trace.SpanID{1}, flags: linkRemote}
}
