package telemetry

import (
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer is the pgx tracer of the service (persistence.Options.Tracer): an OpenTelemetry span per
// SQL statement, batch, transaction and pool acquire, from otelpgx, made only inside a recording span
// (a statement with no traced operation behind it makes no root span). Spans carry the SQL text, never
// its parameters, and no connection details. Which span a statement of a group commit belongs to is the
// store's business (persistence.WithParents): this tracer reads no SQL.
type PgxTracer struct {
	*otelpgx.Tracer
}

// NewPgxTracer builds the tracer on tp, with otelpgx's database metrics (db.client.operation.duration
// and friends) on mp.
func NewPgxTracer(tp trace.TracerProvider, mp metric.MeterProvider) *PgxTracer {
	return &PgxTracer{
		Tracer: otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(mp),
			otelpgx.WithDisableConnectionDetailsInAttributes()),
	}
}

var (
	_ pgx.QueryTracer = (*PgxTracer)(nil)
	_ pgx.BatchTracer = (*PgxTracer)(nil)
)
