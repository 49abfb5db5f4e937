package actors

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// A link keeps the flags and whether the span is remote in one byte: every combination of the flags
// OpenTelemetry carries (sampled, random) and remote comes back as it went in.
func TestLinkGivesBackItsSpanContext(t *testing.T) {
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled, trace.FlagsRandom, trace.FlagsSampled | trace.FlagsRandom} {
		for _, remote := range []bool{false, true} {
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2}, SpanID: trace.SpanID{3},
				TraceFlags: flags, Remote: remote})
			if got := linkOf(telemetry.Carrier{SpanContext: sc}).spanContext(); !got.Equal(sc) {
				t.Errorf("flags %02x remote %v: gives back %+v, want %+v", byte(flags), remote, got, sc)
			}
		}
	}
	if got := linkToTrace(trace.TraceID{9}).spanContext(); !got.IsRemote() || got.IsSampled() || got.TraceID() != (trace.TraceID{9}) {
		t.Errorf("link to a stored trace: %+v, want a remote, unsampled span of trace 09…", got)
	}
}
