package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/mcpclient"
)

// The kinds of MCP client operation (label kind of mcpfleet_mcp_client_operation_duration_seconds).
const (
	MCPHandshake = "handshake"  // test connection: server/discover or initialize
	MCPListTools = "list_tools" // catalogue import: paginated tools/list
	MCPCallTool  = "call_tool"  // handshake + tools/call
	// MCPOther stands, in the public series, for a kind or an outcome outside the closed sets.
	MCPOther = "other"
)

// The closed label sets of the public MCP operation series.
var (
	mcpKinds    = []string{MCPHandshake, MCPListTools, MCPCallTool, MCPOther}
	mcpOutcomes = []string{"ok", string(mcpclient.ClassTransport), string(mcpclient.ClassTimeout), string(mcpclient.ClassAuth),
		string(mcpclient.ClassProtocol), string(mcpclient.ClassInvalidResponse), "error", MCPOther}
)

// mcpMethods is the MCP method that names each kind's span (OpenTelemetry MCP semantic conventions:
// span name "{mcp.method.name} {target}", attribute mcp.method.name).
var mcpMethods = map[string]string{MCPHandshake: "initialize", MCPListTools: "tools/list", MCPCallTool: "tools/call"}

// MCPObserver traces and counts the MCP client operations of the service. Build one with the
// service's tracer and metrics and hand it to whatever calls mcpclient; a nil *MCPObserver, or one
// with a nil Tracer, still works (it records nothing it has no instrument for).
type MCPObserver struct {
	Tracer  trace.Tracer
	Metrics *Metrics
}

// MCPOperation is one operation in progress; End it exactly once.
type MCPOperation struct {
	o      *MCPObserver
	span   trace.Span
	kind   string
	tenant string
	server string
	start  time.Time
}

// Start begins an operation of kind (MCPHandshake, MCPListTools, MCPCallTool) against the configured
// server named server of tenant (its name and tenant label only the private, per-server series); tool is the tool's name for MCPCallTool, else "". Run the operation with the
// returned context, so the MCP client's work is a child of the span. The span follows the
// OpenTelemetry MCP semantic conventions (kind client; mcp.method.name, gen_ai.tool.name,
// error.type) and carries the server name as mcpfleet.mcp.server; never the tool's arguments, its
// result, or the server's credential.
func (o *MCPObserver) Start(ctx context.Context, kind string, tenant uuid.UUID, server, tool string) (context.Context, *MCPOperation) {
	op := &MCPOperation{o: o, kind: kind, tenant: tenant.String(), server: server, start: time.Now()}
	if o == nil || o.Tracer == nil {
		return ctx, op
	}
	method := mcpMethods[kind]
	if method == "" {
		method = kind
	}
	name := method
	if tool != "" {
		name += " " + tool
	}
	ctx, op.span = o.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if op.span.IsRecording() {
		op.span.SetAttributes(attribute.String("mcp.method.name", method), attribute.String("mcpfleet.mcp.operation", kind),
			attribute.String("mcpfleet.mcp.server", server), attribute.String("network.transport", "tcp"),
			attribute.String("network.protocol.name", "http"))
		if tool != "" {
			op.span.SetAttributes(attribute.String("gen_ai.tool.name", tool))
		}
	}
	return ctx, op
}

// End finishes the operation with its outcome: err nil is "ok", an *mcpclient.Error its Class, any
// other error "error".
func (op *MCPOperation) End(ctx context.Context, err error) {
	outcome := MCPOutcome(err)
	if op.span != nil {
		if err != nil {
			op.span.SetAttributes(attribute.String("error.type", outcome))
			op.span.SetStatus(codes.Error, outcome)
		}
		op.span.End()
	}
	if op.o != nil {
		op.o.Metrics.mcpOperation(ctx, op.kind, op.tenant, op.server, outcome, time.Since(op.start))
	}
}

// MCPOutcome is the outcome class of an MCP client operation's error: "ok" for nil, the class of an
// *mcpclient.Error (transport, timeout, auth, protocol, invalid_response), "error" otherwise.
func MCPOutcome(err error) string {
	if err == nil {
		return "ok"
	}
	var e *mcpclient.Error
	if errors.As(err, &e) {
		return string(e.Class)
	}
	return "error"
}
