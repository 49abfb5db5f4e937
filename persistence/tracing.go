package persistence

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// Tracing of the group commit. The writer commits many requests' commands in one transaction, traced
// under its own flush span; each command's statements belong in the trace of the request that sent it.
// Commit starts a writer.apply span per command, a child of the parent the caller gave (WithParents)
// linked to the flush, and inTenantBatch reports each statement of the batch to the pgx tracer in the
// context of its command's span — a statement that serves several commands (a registerSet's) once in
// the context of each of their spans. The statements are told apart by their position in the batch, which
// this package built — never by their SQL text.

type parentsKey struct{}

// WithParents returns a context for Commit of len(parents) commands whose k-th command was sent on
// behalf of the span parents[k]: Commit traces each command whose parent is sampled under a writer.apply
// span, a child of that parent linked to ctx's span, with the command's statements under it. Commit
// ignores parents of another length.
func WithParents(ctx context.Context, parents []trace.SpanContext) context.Context {
	return context.WithValue(ctx, parentsKey{}, parents)
}

// startApply starts the writer.apply span of each of cmds (the commands of ctx's Commit from index
// first on) that has a sampled parent; spans[i] is nil for the others.
func (s *Store) startApply(ctx context.Context, first int, cmds []Command) []trace.Span {
	parents, _ := ctx.Value(parentsKey{}).([]trace.SpanContext)
	if s.spans == nil || parents == nil || first+len(cmds) > len(parents) {
		return nil
	}
	link := trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)})
	spans := make([]trace.Span, len(cmds))
	for i := range cmds {
		if p := parents[first+i]; p.IsSampled() {
			_, spans[i] = s.spans.Start(trace.ContextWithRemoteSpanContext(ctx, p), "writer.apply", link)
		}
	}
	return spans
}

type statementsKey struct{}

// statementSpans follows one batch's statements; pgx reports them in order from one goroutine.
type statementSpans struct {
	spans [][]trace.Span // spans[i] are the spans of the batch's i-th statement, none for the batch's own
	next  int
}

// withStatementSpans returns a context for a SendBatch whose i-th statement is traced under each span of
// spans[i] (under the batch's span where there is none).
func withStatementSpans(ctx context.Context, spans [][]trace.Span) context.Context {
	return context.WithValue(ctx, statementsKey{}, &statementSpans{spans: spans})
}

// routeBatches wraps the pgx tracer t so that a batch sent with a context from withStatementSpans
// reports each statement in the context of its span. Everything else goes to t unchanged.
func routeBatches(t pgx.QueryTracer) pgx.QueryTracer { return &router{QueryTracer: t} }

type router struct{ pgx.QueryTracer }

// TraceBatchStart implements pgx.BatchTracer.
func (r *router) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if bt, ok := r.QueryTracer.(pgx.BatchTracer); ok {
		return bt.TraceBatchStart(ctx, conn, data)
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (r *router) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	bt, ok := r.QueryTracer.(pgx.BatchTracer)
	if !ok {
		return
	}
	if st, _ := ctx.Value(statementsKey{}).(*statementSpans); st != nil {
		var spans []trace.Span
		if st.next < len(st.spans) {
			spans = st.spans[st.next]
		}
		st.next++
		for _, span := range spans {
			bt.TraceBatchQuery(trace.ContextWithSpan(ctx, span), conn, data)
		}
		if len(spans) > 0 {
			return
		}
	}
	bt.TraceBatchQuery(ctx, conn, data)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (r *router) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if bt, ok := r.QueryTracer.(pgx.BatchTracer); ok {
		bt.TraceBatchEnd(ctx, conn, data)
	}
}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (r *router) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t, ok := r.QueryTracer.(pgx.CopyFromTracer); ok {
		return t.TraceCopyFromStart(ctx, conn, data)
	}
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (r *router) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if t, ok := r.QueryTracer.(pgx.CopyFromTracer); ok {
		t.TraceCopyFromEnd(ctx, conn, data)
	}
}

// TracePrepareStart implements pgx.PrepareTracer.
func (r *router) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if t, ok := r.QueryTracer.(pgx.PrepareTracer); ok {
		return t.TracePrepareStart(ctx, conn, data)
	}
	return ctx
}

// TracePrepareEnd implements pgx.PrepareTracer.
func (r *router) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	if t, ok := r.QueryTracer.(pgx.PrepareTracer); ok {
		t.TracePrepareEnd(ctx, conn, data)
	}
}

// TraceConnectStart implements pgx.ConnectTracer.
func (r *router) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if t, ok := r.QueryTracer.(pgx.ConnectTracer); ok {
		return t.TraceConnectStart(ctx, data)
	}
	return ctx
}

// TraceConnectEnd implements pgx.ConnectTracer.
func (r *router) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	if t, ok := r.QueryTracer.(pgx.ConnectTracer); ok {
		t.TraceConnectEnd(ctx, data)
	}
}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (r *router) TraceAcquireStart(ctx context.Context, pool *pgxpool.Pool, data pgxpool.TraceAcquireStartData) context.Context {
	if t, ok := r.QueryTracer.(pgxpool.AcquireTracer); ok {
		return t.TraceAcquireStart(ctx, pool, data)
	}
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (r *router) TraceAcquireEnd(ctx context.Context, pool *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if t, ok := r.QueryTracer.(pgxpool.AcquireTracer); ok {
		t.TraceAcquireEnd(ctx, pool, data)
	}
}

// TraceRelease implements pgxpool.ReleaseTracer.
func (r *router) TraceRelease(pool *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if t, ok := r.QueryTracer.(pgxpool.ReleaseTracer); ok {
		t.TraceRelease(pool, data)
	}
}

var (
	_ pgx.BatchTracer       = (*router)(nil)
	_ pgx.CopyFromTracer    = (*router)(nil)
	_ pgx.PrepareTracer     = (*router)(nil)
	_ pgx.ConnectTracer     = (*router)(nil)
	_ pgxpool.AcquireTracer = (*router)(nil)
	_ pgxpool.ReleaseTracer = (*router)(nil)
)
