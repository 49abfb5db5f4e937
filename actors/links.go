package actors

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// link is a span a monitor transition links its trace to (the server's registration, its last
// heartbeat), kept in every server's record for the life of the server: a span context's ids and
// flags without its trace state — 26 bytes instead of a trace.SpanContext's 56 and more.
type link struct {
	traceID trace.TraceID
	spanID  trace.SpanID
	flags   trace.TraceFlags
	remote  bool
}

// linkOf keeps the span c carries as a link target.
func linkOf(c telemetry.Carrier) link {
	sc := c.SpanContext
	return link{traceID: sc.TraceID(), spanID: sc.SpanID(), flags: sc.TraceFlags(), remote: sc.IsRemote()}
}

// spanContext is the link target again (no trace state).
func (l link) spanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: l.traceID, SpanID: l.spanID, TraceFlags: l.flags, Remote: l.remote})
}

// linkToTrace rebuilds a link target from a stored trace id (its span id is unknown: the link names
// the trace); none for the zero id (no trace stored, or one that did not parse).
func linkToTrace(tid trace.TraceID) link {
	if !tid.IsValid() {
		return link{}
	}
	return link{traceID: tid, spanID: trace.SpanID{1}, remote: true}
}
