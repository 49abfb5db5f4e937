package persistence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

func TestMayAct(t *testing.T) {
	admin := persistence.Principal{Role: persistence.RoleAdmin}
	op := persistence.Principal{Role: persistence.RoleOperator}
	unbound := persistence.Principal{Role: persistence.RoleModule}
	bound := persistence.Principal{Role: persistence.RoleModule, Modules: persistence.NewModuleNames([]string{"cal", "mail"})}
	const (
		reg, hb, dereg = persistence.ActRegister, persistence.ActHeartbeat, persistence.ActDeregister
		mod, adm       = persistence.OriginModule, persistence.OriginAdmin
	)
	for _, tc := range []struct {
		name   string
		p      persistence.Principal
		a      persistence.Action
		module string
		o      persistence.Origin
		want   bool
	}{
		{"admin re-registers an admin's server", admin, reg, "cal", adm, true},
		{"admin deregisters a module's server", admin, dereg, "x", mod, true},
		{"operator registers", op, reg, "cal", mod, false},
		{"operator heartbeats", op, hb, "cal", mod, false},
		{"unbound registers any module", unbound, reg, "anything", mod, true},
		{"unbound deregisters a module's server", unbound, dereg, "x", mod, true},
		{"unbound re-registers an admin's server", unbound, reg, "cal", adm, false},
		{"unbound heartbeats an admin's server", unbound, hb, "cal", adm, false},
		{"unbound deregisters an admin's server", unbound, dereg, "cal", adm, false},
		{"bound registers its module", bound, reg, "mail", mod, true},
		{"bound registers another module", bound, reg, "other", mod, false},
		{"bound heartbeats another module", bound, hb, "other", mod, false},
		{"bound deregisters another module", bound, dereg, "other", mod, false},
		{"bound heartbeats its admin's server", bound, hb, "cal", adm, true},
		{"bound heartbeats another admin's server", bound, hb, "other", adm, false},
		{"bound re-registers its admin's server", bound, reg, "cal", adm, false},
		{"bound deregisters its admin's server", bound, dereg, "cal", adm, false},
		{"a name that is a prefix of a binding", bound, reg, "ca", mod, false},
	} {
		if got := tc.p.MayAct(tc.a, tc.module, tc.o); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A re-import that changes an enabled tool disables it and records the change; an import of a
// self-registered server writes nothing.
func TestReimportChangedToolIsDisabled(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := uuid.New()
	cfg := persistence.DefaultServerConfig(d.tenant, srv)
	cfg.DataClass = "public"
	cmd := &persistence.ConfigureCmd{EventID: uuid.New(), ServerID: srv, TenantID: d.tenant, ModuleName: "remote", Version: "1", Config: cfg, At: t0}
	if errs := d.store.Commit(ctx, []persistence.Command{cmd}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	tool := persistence.Tool{Name: "echo", Description: "echoes", InputSchema: json.RawMessage(`{"type":"object"}`)}
	by := uuid.New()
	if _, err := d.store.ApplyImport(ctx, d.tenant, srv, []persistence.Tool{tool}, 0, t0, by, ""); err != nil {
		t.Fatal(err)
	}
	skills, _ := d.store.ListSkills(ctx, d.tenant, srv)
	if _, _, err := d.store.SetSkillEnabled(ctx, d.tenant, skills[0].SkillID, true, t0); err != nil {
		t.Fatal(err)
	}
	// The same definition again (other key order) changes nothing.
	tool.InputSchema = json.RawMessage(`{ "type" : "object" }`)
	if ch, err := d.store.ApplyImport(ctx, d.tenant, srv, []persistence.Tool{tool}, 0, t0, by, ""); err != nil || ch.Changed != 0 {
		t.Fatalf("unchanged re-import: %+v %v", ch, err)
	}
	tool.InputSchema = json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`)
	ch, err := d.store.ApplyImport(ctx, d.tenant, srv, []persistence.Tool{tool}, 0, t0.Add(time.Minute), by, "0123456789abcdef0123456789abcdef")
	if err != nil || ch.Changed != 1 || ch.Disabled != 1 {
		t.Fatalf("changed re-import: %+v %v", ch, err)
	}
	skills, _ = d.store.ListSkills(ctx, d.tenant, srv)
	if k := skills[0]; k.Enabled || k.ChangedAt == nil || !strings.Contains(string(k.PreviousDefinition), `"input_schema": {"type": "object"}`) {
		t.Fatalf("changed skill: %+v %s", k, k.PreviousDefinition)
	}
	var n int
	if err := d.owner.QueryRow(ctx, `SELECT count(*) FROM tool_changes WHERE skill_id = $1 AND changed_by = $2 AND source = 'import'
		AND trace_id = '0123456789abcdef0123456789abcdef' AND was_enabled`, skills[0].SkillID, by).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tool_changes: %d %v", n, err)
	}
	// The app role cannot rewrite history.
	err = pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
		if err := persistence.SetTenant(ctx, tx, d.tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE tool_changes SET new_definition = '{}'`)
		return err
	})
	if err == nil {
		t.Fatal("the app role updated tool_changes")
	}
	// A self-registered server's catalogue is its advertisement.
	reg := d.server(d.tenant, "selfreg", health.Healthy, 1)
	if _, err := d.store.ApplyImport(ctx, d.tenant, reg, []persistence.Tool{tool}, 0, t0, by, ""); !errors.Is(err, persistence.ErrCatalogueSource) {
		t.Fatalf("import of a self-registered server: %v", err)
	}
}
