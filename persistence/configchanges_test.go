package persistence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// Configuration changes: a held change is pending and writes nothing of itself, asked twice it is one
// request, the requester cannot confirm it, a confirmation applies it; requests and decisions are numbered
// in one gapless per-tenant sequence; the app role can change a row only from pending to a decision, once,
// and never its fields.
func TestConfigChangeRecords(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := uuid.New()
	first, second := uuid.New(), uuid.New()
	cmd := &persistence.ConfigureCmd{EventID: uuid.New(), ServerID: srv, TenantID: d.tenant, ModuleName: "remote", Version: "1",
		Config: persistence.DefaultServerConfig(d.tenant, srv), At: t0, ChangeID: uuid.New(), By: persistence.ByKey(first)}
	if errs := d.store.Commit(ctx, []persistence.Command{cmd, cmd}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	holdOff := func(before persistence.ServerConfig, after *persistence.ServerConfig) []persistence.ConfigChange {
		if before.RequiresApproval && !after.RequiresApproval {
			after.RequiresApproval = true
			return []persistence.ConfigChange{{Field: "requires_approval", Old: true, New: false}}
		}
		return nil
	}
	off := persistence.ConfigEdit{By: persistence.ByKey(first), Hold: holdOff, Edit: func(c *persistence.ServerConfig) error {
		c.RequiresApproval, c.DataClass = false, "internal"
		return nil
	}}
	up, err := d.store.UpdateServerConfig(ctx, d.tenant, srv, t0.Add(time.Second), off)
	if err != nil || up.Pending == nil || up.Applied == nil || !up.Config.RequiresApproval || up.Config.DataClass != "internal" {
		t.Fatalf("update: %+v %v", up, err)
	}
	again, err := d.store.UpdateServerConfig(ctx, d.tenant, srv, t0.Add(2*time.Second), off)
	if err != nil || again.Applied != nil || again.Pending == nil || again.Pending.ChangeID != up.Pending.ChangeID {
		t.Fatalf("asked again: %+v %v", again, err)
	}
	if _, err := d.store.DecideConfigChange(ctx, d.tenant, srv, up.Pending.ChangeID, persistence.ByKey(first), true, t0); !errors.Is(err, persistence.ErrSelfConfirmation) {
		t.Fatalf("confirmed by its requester: %v", err)
	}
	other := d.newTenant("globex")
	if _, err := d.store.DecideConfigChange(ctx, other, srv, up.Pending.ChangeID, persistence.ByKey(second), true, t0); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("confirmed from another tenant: %v", err)
	}
	dec, err := d.store.DecideConfigChange(ctx, d.tenant, srv, up.Pending.ChangeID, persistence.ByKey(second), true, t0.Add(3*time.Second))
	if err != nil || dec.Change.State != persistence.ChangeConfirmed || dec.Config.RequiresApproval || dec.Change.DecidedSeq == nil {
		t.Fatalf("confirmed: %+v %v", dec, err)
	}
	if _, err := d.store.DecideConfigChange(ctx, d.tenant, srv, up.Pending.ChangeID, persistence.ByKey(second), false, t0); !errors.Is(err, persistence.ErrChangeNotPending) {
		t.Fatalf("decided twice: %v", err)
	}
	log, err := d.store.ConfigChangeLog(ctx, d.tenant, srv, 0, 100)
	if err != nil || len(log) != 3 || log[0].State != persistence.ChangeApplied || log[0].RequestedBy != persistence.ByKey(first) {
		t.Fatalf("log: %+v %v", log, err)
	}
	// Creation 1, data class 2, pending request 3, its confirmation 4.
	if log[0].Seq != 1 || log[1].Seq != 2 || log[2].Seq != 3 || *log[2].DecidedSeq != 4 {
		t.Fatalf("numbers %d %d %d %d", log[0].Seq, log[1].Seq, log[2].Seq, *log[2].DecidedSeq)
	}
	if c, err := d.store.LatestEventCursor(ctx, d.tenant); err != nil || c.Config != 4 {
		t.Fatalf("latest cursor %+v %v", c, err)
	}
	evs, err := d.store.FleetEvents(ctx, d.tenant, persistence.EventCursor{Audit: 100, Config: 2}, 100)
	if err != nil || len(evs) != 2 || evs[0].Status != "pending" || evs[1].From != "pending" || evs[1].Status != "confirmed" ||
		evs[1].By != persistence.ByKey(second) || evs[0].By != persistence.ByKey(first) {
		t.Fatalf("events after 2: %+v %v", evs, err)
	}
	for _, sql := range []string{
		`UPDATE server_config_changes SET state = 'cancelled', decided_via = 'api', decided_at = now()`, // decided already
		`UPDATE server_config_changes SET changes = '[]'`,
		`DELETE FROM server_config_changes`,
	} {
		err := pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
			if err := persistence.SetTenant(ctx, tx, d.tenant); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		})
		if err == nil {
			t.Errorf("the app role ran %s", sql)
		}
	}
}
