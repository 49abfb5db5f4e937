package telemetry

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP protobuf encoding of spans, written straight from a Provider's ended spans into the batch
// they are exported in (issue 14). The OTLP exporter of the OpenTelemetry SDK first copies every span
// into generated protobuf structs (a struct per span, three per attribute) and then marshals them by
// reflection; at 100 % sampling that was a third of what tracing cost the service. The bytes are the
// same message (opentelemetry/proto/collector/trace/v1 ExportTraceServiceRequest) with the same
// field values as the SDK's, which TestProviderAgreesWithTheSDK holds it to.

// Field numbers of the OTLP messages written here (opentelemetry-proto v1).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID           = 1
	fSpanSpanID            = 2
	fSpanTraceState        = 3
	fSpanParentSpanID      = 4
	fSpanName              = 5
	fSpanKind              = 6
	fSpanStart             = 7
	fSpanEnd               = 8
	fSpanAttributes        = 9
	fSpanDroppedAttributes = 10
	fSpanEvents            = 11
	fSpanDroppedEvents     = 12
	fSpanLinks             = 13
	fSpanDroppedLinks      = 14
	fSpanStatus            = 15
	fSpanFlags             = 16

	fEventTime              = 1
	fEventName              = 2
	fEventAttributes        = 3
	fEventDroppedAttributes = 4

	fLinkTraceID           = 1
	fLinkSpanID            = 2
	fLinkAttributes        = 4
	fLinkDroppedAttributes = 5
	fLinkFlags             = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKvlist = 6
	fAnyBytes  = 7

	fListValues = 1 // ArrayValue.values, KeyValueList.values

	// SpanFlags: the span's flags say whether its parent is remote, and that they say so.
	spanFlagsHasIsRemote = 0x100
	spanFlagsIsRemote    = 0x200

	statusCodeOK    = 1
	statusCodeError = 2
)

// appendRequest appends the ExportTraceServiceRequest of one batch to b: one ResourceSpans of the
// resource res (nil: none), with a ScopeSpans for each scope of scopes whose encoded spans (spans, by
// the same index: concatenated Span messages, as appendSpan writes them) are not empty.
func appendRequest(b []byte, res *resource.Resource, scopes []instrumentation.Scope, spans [][]byte) []byte {
	b, rs := openMessage(b, fRequestResourceSpans)
	if res != nil {
		var r int
		b, r = openMessage(b, fResourceSpansResource)
		iter := res.Iter()
		for iter.Next() {
			b = appendKeyValue(b, fResourceAttributes, iter.Attribute())
		}
		b = closeMessage(b, r)
	}
	for i, enc := range spans {
		if len(enc) == 0 || i >= len(scopes) {
			continue
		}
		scope := scopes[i]
		var ss int
		b, ss = openMessage(b, fResourceSpansScopeSpans)
		if scope != (instrumentation.Scope{}) {
			var sc int
			b, sc = openMessage(b, fScopeSpansScope)
			b = appendString(b, fScopeName, scope.Name)
			b = appendString(b, fScopeVersion, scope.Version)
			iter := scope.Attributes.Iter()
			for iter.Next() {
				b = appendKeyValue(b, fScopeAttributes, iter.Attribute())
			}
			b = closeMessage(b, sc)
		}
		b = append(b, enc...)
		b = appendString(b, fScopeSpansSchemaURL, scope.SchemaURL)
		b = closeMessage(b, ss)
	}
	b = appendString(b, fResourceSpansSchemaURL, res.SchemaURL())
	return closeMessage(b, rs)
}

// appendSpan appends the ended span s as a Span message (field fScopeSpansSpans of a ScopeSpans).
// Its fields are not changed after End, so they are read without its lock.
func appendSpan(b []byte, s *span) []byte {
	b, m := openMessage(b, fScopeSpansSpans)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	b = appendString(b, fSpanTraceState, s.sc.TraceState().String())
	if psid := s.parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, fSpanParentSpanID, psid[:])
	}
	b = appendString(b, fSpanName, s.name)
	b = appendVarint(b, fSpanKind, uint64(spanKind(s.kind)))
	b = appendFixed64(b, fSpanStart, unixNano(s.start.UnixNano()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.end.UnixNano()))
	for _, kv := range s.attrs {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	b = appendVarint(b, fSpanDroppedAttributes, uint64(clampCount(s.droppedAttrs)))
	for _, ev := range s.events {
		var e int
		b, e = openMessage(b, fSpanEvents)
		b = appendFixed64(b, fEventTime, unixNano(ev.time.UnixNano()))
		b = appendString(b, fEventName, ev.name)
		for _, kv := range ev.attrs {
			b = appendKeyValue(b, fEventAttributes, kv)
		}
		b = appendVarint(b, fEventDroppedAttributes, uint64(clampCount(ev.dropped)))
		b = closeMessage(b, e)
	}
	b = appendVarint(b, fSpanDroppedEvents, uint64(clampCount(s.droppedEvents)))
	for _, l := range s.links {
		var lm int
		b, lm = openMessage(b, fSpanLinks)
		ltid, lsid := l.sc.TraceID(), l.sc.SpanID()
		b = appendBytes(b, fLinkTraceID, ltid[:])
		b = appendBytes(b, fLinkSpanID, lsid[:])
		for _, kv := range l.attrs {
			b = appendKeyValue(b, fLinkAttributes, kv)
		}
		b = appendVarint(b, fLinkDroppedAttributes, uint64(clampCount(l.dropped)))
		b = appendFixed32(b, fLinkFlags, spanFlags(l.sc.TraceFlags(), l.sc))
		b = closeMessage(b, lm)
	}
	b = appendVarint(b, fSpanDroppedLinks, uint64(clampCount(s.droppedLinks)))
	var sm int
	b, sm = openMessage(b, fSpanStatus) // always present, as the SDK's exporter writes it
	if s.status.Code == codes.Error {
		b = appendString(b, fStatusMessage, s.status.Description)
	}
	switch s.status.Code {
	case codes.Ok:
		b = appendVarint(b, fStatusCode, statusCodeOK)
	case codes.Error:
		b = appendVarint(b, fStatusCode, statusCodeError)
	}
	b = closeMessage(b, sm)
	b = appendFixed32(b, fSpanFlags, spanFlags(s.sc.TraceFlags(), s.parent))
	return closeMessage(b, m)
}

// spanKind is kind's OTLP SpanKind: the SDK's values are OTLP's, anything else is unspecified (0).
func spanKind(kind trace.SpanKind) trace.SpanKind {
	if kind < trace.SpanKindInternal || kind > trace.SpanKindConsumer {
		return trace.SpanKindUnspecified
	}
	return kind
}

// spanFlags is the OTLP flags word: the W3C trace flags, and whether parent is remote.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | spanFlagsHasIsRemote
	if parent.IsRemote() {
		f |= spanFlagsIsRemote
	}
	return f
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampCount(n int) uint32 {
	if n < 0 {
		return 0
	}
	if int64(n) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// appendKeyValue appends kv as a KeyValue in field.
func appendKeyValue(b []byte, field protowire.Number, kv attribute.KeyValue) []byte {
	if n, ok := scalarSize(kv.Value); ok {
		// Nearly every attribute: the KeyValue's length is known before it is written, so nothing is
		// moved to put it in front (closeMessage).
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeString(fKeyValueKey, string(kv.Key))+protowire.SizeTag(fKeyValueValue)+protowire.SizeBytes(n)))
		b = appendString(b, fKeyValueKey, string(kv.Key))
		return appendScalar(b, fKeyValueValue, n, kv.Value)
	}
	b, m := openMessage(b, field)
	b = appendString(b, fKeyValueKey, string(kv.Key))
	b = appendAnyValue(b, fKeyValueValue, kv.Value)
	return closeMessage(b, m)
}

// appendAnyValue appends v as an AnyValue in field; an empty value is an AnyValue with no value, a
// type this encoder does not know the string "INVALID", as the SDK's exporter writes them.
func appendAnyValue(b []byte, field protowire.Number, v attribute.Value) []byte {
	if n, ok := scalarSize(v); ok {
		return appendScalar(b, field, n, v)
	}
	b, m := openMessage(b, field)
	switch v.Type() {
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = appendArray(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		var l int
		b, l = openMessage(b, fAnyKvlist)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fListValues, kv)
		}
		b = closeMessage(b, l)
	default:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		b = protowire.AppendString(b, "INVALID")
	}
	return closeMessage(b, m)
}

// scalarSize is the length of the AnyValue of v — a bool, an int64, a float64, a string, bytes or empty — and
// true; false for the other types (lists and maps), whose length is known once they are written.
func scalarSize(v attribute.Value) (int, bool) {
	switch v.Type() {
	case attribute.BOOL:
		return protowire.SizeTag(fAnyBool) + protowire.SizeVarint(protowire.EncodeBool(v.AsBool())), true
	case attribute.INT64:
		return protowire.SizeTag(fAnyInt) + protowire.SizeVarint(uint64(v.AsInt64())), true
	case attribute.FLOAT64:
		return protowire.SizeTag(fAnyDouble) + protowire.SizeFixed64(), true
	case attribute.STRING:
		return protowire.SizeTag(fAnyString) + protowire.SizeBytes(len(v.AsString())), true
	case attribute.BYTESLICE:
		return protowire.SizeTag(fAnyBytes) + protowire.SizeBytes(len(v.AsByteSlice())), true
	case attribute.EMPTY:
		return 0, true
	}
	return 0, false
}

// appendScalar appends v, whose AnyValue is n bytes long (scalarSize), as an AnyValue in field. The
// one-of's value is written even when it is zero (false, 0, ""), as proto3 writes a one-of.
func appendScalar(b []byte, field protowire.Number, n int, v attribute.Value) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	}
	return b
}

// appendArray appends an ArrayValue (AnyValue's array_value) of vals.
func appendArray[T any](b []byte, vals []T, value func(T) attribute.Value) []byte {
	b, l := openMessage(b, fAnyArray)
	for _, v := range vals {
		b = appendAnyValue(b, fListValues, value(v))
	}
	return closeMessage(b, l)
}

// openMessage appends field's tag for an embedded message and returns where its content starts;
// closeMessage(b, start) then puts the content's length in front of it.
func openMessage(b []byte, field protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return b, len(b)
}

// closeMessage prefixes the content written since openMessage returned start with its length.
func closeMessage(b []byte, start int) []byte {
	n := len(b) - start
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w)...)
	copy(b[start+w:], b[start:start+n])
	protowire.AppendVarint(b[:start], uint64(n))
	return b
}

// The scalar fields below are omitted when zero (empty), as proto3 writes them.

// sizeString is the length appendString(b, field, s) appends.
func sizeString(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFixed32(b []byte, field protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}
