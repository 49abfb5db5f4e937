package telemetry

import (
	"context"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer is the pgx tracer of the service (persistence.Options.Tracer): an OpenTelemetry span per
// SQL statement, batch, transaction and pool acquire, from otelpgx, made only inside a recording span
// (a statement with no traced operation behind it makes no root span). Spans carry the SQL text, never
// its parameters, and no connection details.
//
// It adds one thing: a pipelined batch sent with a context from WithBatchRoutes puts the statements of
// each command in the trace of the request that sent the command, under a writer.apply span linked
// to the batch, instead of all of them in the trace of the flush.
type PgxTracer struct {
	*otelpgx.Tracer
	tracer trace.Tracer
}

// NewPgxTracer builds the tracer on tp, with otelpgx's database metrics (db.client.operation.duration
// and friends) on mp.
func NewPgxTracer(tp trace.TracerProvider, mp metric.MeterProvider) *PgxTracer {
	return &PgxTracer{
		Tracer: otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(mp),
			otelpgx.WithDisableConnectionDetailsInAttributes()),
		tracer: tp.Tracer("github.com/mcpfleet/mcpfleet/telemetry"),
	}
}

// tenantMarker starts each command's statements in a group commit (persistence.Commit queues the
// set_config that scopes a command to its tenant before the command's own statements).
const tenantMarker = "SELECT set_config('auth.tenant_id'"

type routesKey struct{}

type batchRoutes struct{ parents []Carrier }

// WithBatchRoutes returns a context for a group commit of len(parents) commands whose k-th command
// was sent on behalf of parents[k]. The batch's statements are routed only if it has exactly that many
// commands (persistence.Commit's isolation retry of one command, for one, is traced under the flush).
func WithBatchRoutes(ctx context.Context, parents []Carrier) context.Context {
	return context.WithValue(ctx, routesKey{}, &batchRoutes{parents: parents})
}

type batchStateKey struct{}

// batchState follows one batch's statements; pgx reports them in order from one goroutine.
type batchState struct {
	parents []Carrier
	k       int // the command whose statements are being reported; -1 before the first
	link    trace.Link
	span    trace.Span // the current command's writer.apply span, if its request is sampled
	ctx     context.Context
}

func (st *batchState) endCommand() {
	if st.span != nil {
		st.span.End()
		st.span, st.ctx = nil, nil
	}
}

// TraceBatchStart implements pgx.BatchTracer.
func (t *PgxTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	r, _ := ctx.Value(routesKey{}).(*batchRoutes)
	ctx = t.Tracer.TraceBatchStart(ctx, conn, data)
	if r == nil || data.Batch == nil {
		return ctx
	}
	n := 0
	for _, q := range data.Batch.QueuedQueries {
		if strings.HasPrefix(q.SQL, tenantMarker) {
			n++
		}
	}
	if n != len(r.parents) {
		return ctx
	}
	return context.WithValue(ctx, batchStateKey{}, &batchState{parents: r.parents, k: -1,
		link: trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *PgxTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	st, _ := ctx.Value(batchStateKey{}).(*batchState)
	if st == nil {
		t.Tracer.TraceBatchQuery(ctx, conn, data)
		return
	}
	if strings.HasPrefix(data.SQL, tenantMarker) && st.k+1 < len(st.parents) {
		st.endCommand()
		st.k++
		if p := st.parents[st.k]; p.SpanContext.IsSampled() {
			st.ctx, st.span = t.tracer.Start(p.Into(ctx), "writer.apply", trace.WithLinks(st.link))
		}
	}
	if st.span == nil {
		t.Tracer.TraceBatchQuery(ctx, conn, data)
		return
	}
	if data.Err != nil {
		st.span.SetStatus(codes.Error, data.Err.Error())
	}
	t.Tracer.TraceBatchQuery(st.ctx, conn, data)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *PgxTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if st, _ := ctx.Value(batchStateKey{}).(*batchState); st != nil {
		st.endCommand()
	}
	t.Tracer.TraceBatchEnd(ctx, conn, data)
}

var (
	_ pgx.QueryTracer = (*PgxTracer)(nil)
	_ pgx.BatchTracer = (*PgxTracer)(nil)
)
