package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// An error an owner answers keeps its identity across the cluster wire, so the API maps it to the same
// status as on one node (404, 409, 403, 503); an error without a code stays an error, never a success.
func TestWireErrorsKeepTheirIdentity(t *testing.T) {
	for _, c := range errorCodes {
		var rep wireReply
		encodeErr(&rep, fmt.Errorf("server actor: %w", c.err))
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var back wireReply
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := decodeErr(back, "127.0.0.1:7101")
		if !errors.Is(got, c.err) {
			t.Errorf("%s: decoded %v, not errors.Is %v", c.code, got, c.err)
		}
		for _, other := range errorCodes {
			if other.err != c.err && errors.Is(got, other.err) {
				t.Errorf("%s: decoded %v is also %v", c.code, got, other.err)
			}
		}
	}
	id := uuid.New()
	var rep wireReply
	encodeErr(&rep, fmt.Errorf("configure: %w", &actors.ExistsError{ServerID: id}))
	var ex *actors.ExistsError
	if got := decodeErr(rep, "n"); !errors.As(got, &ex) || ex.ServerID != id || !errors.Is(got, actors.ErrModuleExists) {
		t.Errorf("ExistsError decoded as %v", got)
	}
	rep = wireReply{}
	encodeErr(&rep, errors.New("disk on fire"))
	got := decodeErr(rep, "n")
	if got == nil || !strings.Contains(got.Error(), "disk on fire") || errors.Is(got, actors.ErrUnavailable) || errors.Is(got, persistence.ErrNotOwned) {
		t.Errorf("an uncoded error decoded as %v", got)
	}
	if decodeErr(wireReply{}, "n") != nil {
		t.Error("a reply without an error decoded as an error")
	}
}

// The trace context crosses the wire whole; an invalid one stays invalid.
func TestWireTraceRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	got := traceToWire(telemetry.Carrier{SpanContext: sc}).carrier().SpanContext
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("round trip: %v, want %v (remote)", got, sc)
	}
	if traceToWire(telemetry.Carrier{}).carrier().SpanContext.IsValid() {
		t.Error("an empty carrier came back valid")
	}
}
