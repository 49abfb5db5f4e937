package persistence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// TestCommitWithoutTenantFailsClosed: a command without a tenant fails alone with ErrNoTenant and
// writes nothing; the other commands of its group commit; InTenant and StampHeartbeats refuse a nil
// tenant before running anything.
func TestCommitWithoutTenantFailsClosed(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	good := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: d.tenant, ModuleName: "good",
		Version: "1.0.0", Protocols: []string{"mcp/2025-06-18"}, At: at}
	orphan := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), ModuleName: "orphan",
		Version: "1.0.0", Protocols: []string{"mcp/2025-06-18"}, At: at}
	errs := d.store.Commit(ctx, []persistence.Command{good, orphan})
	if errs[0] != nil {
		t.Errorf("the command with a tenant failed: %v", errs[0])
	}
	if !errors.Is(errs[1], persistence.ErrNoTenant) {
		t.Errorf("the command without a tenant: err = %v, want ErrNoTenant", errs[1])
	}
	var n int
	if err := d.owner.QueryRow(ctx, `SELECT count(*) FROM mcp_servers WHERE module_name = 'orphan'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the command without a tenant wrote %d rows (err %v)", n, err)
	}
	if err := d.owner.QueryRow(ctx, `SELECT count(*) FROM mcp_servers WHERE module_name = 'good'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the command with a tenant wrote %d rows (err %v)", n, err)
	}
	err := d.store.InTenant(ctx, uuid.Nil, func(pgx.Tx) error {
		t.Error("InTenant ran fn without a tenant")
		return nil
	})
	if !errors.Is(err, persistence.ErrNoTenant) {
		t.Errorf("InTenant(nil): err = %v, want ErrNoTenant", err)
	}
	err = d.store.StampHeartbeats(ctx, []persistence.Stamp{{TenantID: d.tenant, ServerID: good.ServerID, At: at.Add(time.Second)},
		{ServerID: good.ServerID, At: at.Add(time.Second)}})
	if !errors.Is(err, persistence.ErrNoTenant) {
		t.Errorf("StampHeartbeats with a stamp without a tenant: err = %v, want ErrNoTenant", err)
	}
}

// stmtTracer is a pgx tracer that records, for each statement of a batch, the span of the context
// pgx reported it in.
type stmtTracer struct {
	mu    sync.Mutex
	stmts []tracedStmt
}

type tracedStmt struct {
	sql  string
	span trace.SpanID
}

func (*stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*stmtTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (*stmtTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *stmtTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stmts = append(s.stmts, tracedStmt{sql: data.SQL, span: trace.SpanContextFromContext(ctx).SpanID()})
}
func (*stmtTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestCommitTracesEachCommandUnderItsParent: with WithParents, Commit starts a writer.apply span per
// command with a sampled parent — a child of that parent, linked to the flush — and the pgx tracer
// sees each statement of the command (its set_config first) in that span's context; a command with an
// unsampled parent gets no span and its statements stay under the flush. Two registrations of one
// tenant share their set-based statements: each statement is reported once under each one's span.
func TestCommitTracesEachCommandUnderItsParent(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pgxTracer := &stmtTracer{}
	d := newDashWith(t, persistence.Options{Tracer: pgxTracer, Spans: tp.Tracer("test")})
	store, tenantA, tenantB, tenantC := d.store, d.tenant, d.newTenant("globex"), d.newTenant("initech")
	register := func(tenant uuid.UUID, module string) *persistence.RegisterCmd {
		return &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: tenant, ModuleName: module,
			Version: "1.0.0", Protocols: []string{"mcp/2025-06-18"}, At: time.Now()}
	}
	parent := func(sampled bool) trace.SpanContext {
		id := uuid.New()
		cfg := trace.SpanContextConfig{TraceID: trace.TraceID(uuid.New()), SpanID: trace.SpanID(id[:8])}
		if sampled {
			cfg.TraceFlags = trace.FlagsSampled
		}
		return trace.NewSpanContext(cfg)
	}
	pa, pb, pc, pd := parent(true), parent(true), parent(false), parent(true)
	flushCtx, flush := tp.Tracer("test").Start(ctx, "writer.flush")
	cmds := []persistence.Command{register(tenantA, "a"), register(tenantB, "b"), register(tenantC, "c"), register(tenantA, "d")}
	errs := store.Commit(persistence.WithParents(flushCtx, []trace.SpanContext{pa, pb, pc, pd}), cmds)
	flush.End()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	applies := map[trace.TraceID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == "writer.apply" {
			applies[s.Parent().TraceID()] = s
		}
	}
	if len(applies) != 3 {
		t.Fatalf("%d writer.apply spans, want 3 (the unsampled parent gets none)", len(applies))
	}
	under := map[trace.SpanID][]string{} // the statements reported under each span, in order
	for _, st := range pgxTracer.stmts {
		under[st.span] = append(under[st.span], st.sql)
	}
	spanOf := map[string]trace.SpanID{"flush": flush.SpanContext().SpanID()}
	for name, p := range map[string]trace.SpanContext{"a": pa, "b": pb, "d": pd} {
		s, ok := applies[p.TraceID()]
		if !ok || s.Parent().SpanID() != p.SpanID() {
			t.Fatalf("no writer.apply child of %s", p.SpanID())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != flush.SpanContext().SpanID() {
			t.Errorf("writer.apply of %s links %v, want the flush", p.SpanID(), s.Links())
		}
		spanOf[name] = s.SpanContext().SpanID()
	}
	if len(under) != len(spanOf) {
		t.Errorf("statements reported under %d spans, want %d (a and d, b, the flush for c)", len(under), len(spanOf))
	}
	for name, id := range spanOf {
		stmts := under[id]
		var set, audit bool
		for _, sql := range stmts {
			set = set || strings.HasPrefix(sql, "SELECT set_config")
			audit = audit || strings.Contains(sql, "INSERT INTO audit_events")
		}
		if !set || !audit {
			t.Errorf("command %s: its span saw %d statements, without its set_config (%v) or its audit insert (%v)", name, len(stmts), set, audit)
		}
	}
	if a, d := strings.Join(under[spanOf["a"]], ";"), strings.Join(under[spanOf["d"]], ";"); a != d {
		t.Errorf("a and d, registered together, saw different statements:\n%s\n%s", a, d)
	}
}

// A multi-tenant transaction commits only what its reads accepted, and its connection goes back to the
// pool idle, outside any transaction, whatever refused it: a read after the statements ran or a statement
// that failed in the batch. On a pool of one connection, the connection that served the refused
// transactions is the one that serves the next — the pool would have destroyed it, and opened another,
// had it been released in a transaction.
func TestTenantBatchRollsBackWhatWasRefused(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(d.db.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("the pool did not close: a transaction's connection was never released")
		}
	})
	servers := func(module string) int {
		t.Helper()
		var n int
		if err := d.owner.QueryRow(ctx, `SELECT count(*) FROM mcp_servers WHERE module_name = $1`, module).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := persistence.BatchInsertServer(ctx, pool, d.tenant, "first", "", nil); err != nil {
		t.Fatal(err)
	}
	if servers("first") != 1 {
		t.Fatal("the accepted transaction did not commit")
	}
	refusal := errors.New("refused by its read")
	for _, tc := range []struct {
		module, extra string
		want          func(error) bool
	}{
		{"read-refused", "", func(err error) bool { return errors.Is(err, refusal) }},
		{"statement-failed", "SELECT 1/0", func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "22012"
		}},
	} {
		err := persistence.BatchInsertServer(ctx, pool, d.tenant, tc.module, tc.extra, refusal)
		if !tc.want(err) {
			t.Errorf("%s: err = %v", tc.module, err)
		}
		if n := servers(tc.module); n != 0 {
			t.Errorf("%s: the refused transaction left %d servers", tc.module, n)
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := pool.Acquire(actx)
		cancel()
		if err != nil {
			t.Fatalf("%s: the pool's one connection did not come back: %v", tc.module, err)
		}
		if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
			t.Errorf("%s: the connection came back with transaction status %q, want idle", tc.module, s)
		}
		conn.Release()
		if n := pool.Stat().NewConnsCount(); n != 1 {
			t.Errorf("%s: the pool opened %d connections, want 1 (the refused transaction's was destroyed)", tc.module, n)
		}
	}
	if err := persistence.BatchInsertServer(ctx, pool, d.tenant, "last", "", nil); err != nil || servers("last") != 1 {
		t.Errorf("the transaction after the refused ones: err = %v, servers %d", err, servers("last"))
	}
}
