package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// auditSeqs returns the tenant_seq of tenant's audit events, by tenant_seq, as the stream reads them.
func (d *dash) auditSeqs(tenant uuid.UUID) []int64 {
	d.t.Helper()
	evs, err := d.store.FleetEvents(context.Background(), tenant, persistence.EventCursor{}, 1000)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []int64
	for _, e := range evs {
		if !e.Import {
			out = append(out, e.Seq)
		}
	}
	return out
}

// wantPrefix fails unless seqs is 1..n.
func wantPrefix(t *testing.T, what string, seqs []int64, n int) {
	t.Helper()
	ok := len(seqs) == n
	for i, s := range seqs {
		ok = ok && s == int64(i+1)
	}
	if !ok {
		t.Fatalf("%s: tenant sequence %v, want 1..%d", what, seqs, n)
	}
}

// insertAudit queues one audit event of tenant in tx (its tenant already set) with event id id.
func insertAudit(ctx context.Context, tx pgx.Tx, tenant, server, id uuid.UUID) error {
	_, err := tx.Exec(ctx, `INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, occurred_at)
		VALUES ($1, $2, 'mcp.server.degraded', $3, 'm', '1.0.0', 'degraded', now()) ON CONFLICT (event_id) DO NOTHING`, id, tenant, server)
	return err
}

// TestTenantEventSequence: each tenant's events are numbered 1, 2, 3 … whatever other tenants write in
// between; a rolled-back insert and a retried one (ON CONFLICT DO NOTHING) leave no gap; and a writer
// still committing holds back only its own tenant's next writer, never another tenant's — so a reader
// always sees a gapless prefix and never needs to wait for a number.
func TestTenantEventSequence(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	a, b := d.tenant, d.newTenant("b")
	sa, sb := d.server(a, "a", health.Healthy, 0), d.server(b, "b", health.Healthy, 1) // event 1 of each
	for i := range 3 {
		d.audit(a, sa, "a", persistence.KindDegraded, health.Healthy, health.Degraded, t0.Add(time.Duration(i)*time.Second))
		d.audit(b, sb, "b", persistence.KindDegraded, health.Healthy, health.Degraded, t0.Add(time.Duration(i)*time.Second))
	}
	wantPrefix(t, "interleaved tenants, a", d.auditSeqs(a), 4)
	wantPrefix(t, "interleaved tenants, b", d.auditSeqs(b), 4)

	// Rolled back: no number taken. Retried: the duplicate numbers nothing. Numbers given by the INSERT
	// are replaced.
	errRollback := errors.New("roll back")
	if err := pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
		if err := persistence.SetTenant(ctx, tx, a); err != nil {
			return err
		}
		if err := insertAudit(ctx, tx, a, sa, uuid.New()); err != nil {
			return err
		}
		return errRollback
	}); !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	dup := uuid.New()
	for range 2 {
		d.exec(a, `INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, occurred_at, tenant_seq)
			VALUES ($1, $2, 'mcp.server.degraded', $3, 'm', '1.0.0', 'degraded', now(), 99) ON CONFLICT (event_id) DO NOTHING`, dup, a, sa)
	}
	d.audit(a, sa, "a", persistence.KindRecovered, health.Degraded, health.Healthy, t0.Add(time.Minute))
	wantPrefix(t, "after a rollback and a retry", d.auditSeqs(a), 6)

	// Writer 1 of tenant a numbers its event and does not commit yet. Writer 2 of a waits for it (its
	// number depends on whether 1 commits); tenant b's writer does not wait for either.
	w1, err := d.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Rollback(ctx) //nolint:errcheck
	if err := persistence.SetTenant(ctx, w1, a); err != nil {
		t.Fatal(err)
	}
	if err := insertAudit(ctx, w1, a, sa, uuid.New()); err != nil {
		t.Fatal(err)
	}
	w2done := make(chan error, 1)
	go func() {
		w2done <- pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
			if err := persistence.SetTenant(ctx, tx, a); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('application_name', 'eventseq-w2', true)`); err != nil {
				return err
			}
			return insertAudit(ctx, tx, a, sa, uuid.New())
		})
	}()
	wait.For(t, "writer 2 of the same tenant to wait on the event lock", 10*time.Second, func() bool {
		var n int
		err := d.owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'eventseq-w2' AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
		return err == nil && n == 1
	})
	bDone := make(chan error, 1)
	go func() {
		bDone <- pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
			if err := persistence.SetTenant(ctx, tx, b); err != nil {
				return err
			}
			return insertAudit(ctx, tx, b, sb, uuid.New())
		})
	}()
	select {
	case err := <-bDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tenant b's writer waits on tenant a's")
	}
	wantPrefix(t, "b, while a's writers are open", d.auditSeqs(b), 5)
	wantPrefix(t, "a, while its writers are open", d.auditSeqs(a), 6)
	if err := w1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-w2done; err != nil {
		t.Fatal(err)
	}
	wantPrefix(t, "a, after both committed", d.auditSeqs(a), 8)

	// The same holds for import events (numbered by their own trigger, in the import's transaction).
	for _, tn := range []uuid.UUID{a, b} {
		d.exec(tn, `INSERT INTO server_config (server_id, tenant_id) SELECT server_id, tenant_id FROM mcp_servers`)
	}
	for i := range 3 {
		for _, tn := range []uuid.UUID{a, b} {
			d.exec(tn, `UPDATE server_config SET import_status = 'succeeded', last_imported = $1`, t0.Add(time.Duration(i)*time.Hour))
		}
	}
	for _, tn := range []uuid.UUID{a, b} {
		evs, err := d.store.FleetEvents(ctx, tn, persistence.EventCursor{Audit: 1000}, 100)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		wantPrefix(t, fmt.Sprintf("imports of %s", tn), seqs, 3)
	}
	if latest, err := d.store.LatestEventCursor(ctx, b); err != nil || latest != (persistence.EventCursor{Audit: 5, Import: 3}) {
		t.Fatalf("latest cursor of b: %v %v", latest, err)
	}
}
