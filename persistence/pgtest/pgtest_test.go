package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/migrations"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

func TestClonesAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := pgtest.New(t), pgtest.New(t)
	if a.Name == b.Name {
		t.Fatalf("both databases are named %s", a.Name)
	}
	ctx := t.Context()
	poolA, poolB := a.AdminPool(t), b.AdminPool(t)
	id := uuid.New()
	if _, err := poolA.Exec(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ($1, 'only in a')`, id); err != nil {
		t.Fatalf("insert into a: %v", err)
	}
	for _, c := range []struct {
		db   *pgtest.DB
		want int
	}{{a, 1}, {b, 0}} {
		var n int
		if err := c.db.AdminPool(t).QueryRow(ctx, `SELECT count(*) FROM tenants WHERE tenant_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s has %d rows of the tenant, want %d", c.db.Name, n, c.want)
		}
	}
	if _, err := poolB.Exec(ctx, `SELECT 1`); err != nil {
		t.Error(err)
	}
}

func TestAppRole(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	app := db.AppPool(t)

	var user string
	var super, bypass bool
	err := app.QueryRow(ctx, `SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&user, &super, &bypass)
	if err != nil {
		t.Fatal(err)
	}
	if user != migrations.AppRole || super || bypass {
		t.Errorf("AppURL connects as %q (superuser %v, bypassrls %v), want %q with neither", user, super, bypass, migrations.AppRole)
	}

	// RLS applies to the runtime role: it sees only the tenant it names.
	tenantA, tenantB := uuid.New(), uuid.New()
	admin := db.AdminPool(t)
	for i, tenant := range []uuid.UUID{tenantA, tenantB} {
		if _, err := admin.Exec(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)`, tenant, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols)
			VALUES ($1, $2, 'mod', '1.0.0', '{2025-06-18}')`, uuid.New(), tenant); err != nil {
			t.Fatal(err)
		}
	}
	var visible []uuid.UUID
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('auth.tenant_id', $1, true)`, tenantA.String()); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT tenant_id FROM mcp_servers`)
		if err != nil {
			return err
		}
		visible, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(visible) != 1 || visible[0] != tenantA {
		t.Errorf("the app role sees servers of %v, want only %v", visible, tenantA)
	}
}

func TestMigratedTables(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pool := db.AdminPool(t)
	for _, table := range []string{"mcp_servers", "skill_registry", "audit_events", "alert_outbox", "tenants", "api_keys"} {
		var exists bool
		if err := pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, "public."+table).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			t.Errorf("table %s is missing", table)
		}
	}
}

func TestParallelClones(t *testing.T) {
	t.Parallel()
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			var got string
			if err := db.AdminPool(t).QueryRow(t.Context(), `SELECT current_database()`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != db.Name {
				t.Errorf("connected to %s, want %s", got, db.Name)
			}
		})
	}
}

func TestCloneDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("user", func(t *testing.T) {
		db := pgtest.New(t)
		name = db.Name
		db.AppPool(t) // an open pool must not stop the drop
	})
	if exists(t, pgtest.New(t).AdminURL, name) {
		t.Errorf("%s still exists after its test ended", name)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	now := time.Now()
	pid := os.Getpid()
	old := []string{
		fmt.Sprintf("mcpfleet_t_deadbeef_%d_%d_1", now.Add(-2*time.Hour).Unix(), pid),
		fmt.Sprintf("mcpfleet_tpl_deadbeef_%d_%d", now.Add(-3*time.Hour).Unix(), pid),
	}
	recent := fmt.Sprintf("mcpfleet_t_deadbeef_%d_%d_2", now.Add(-10*time.Minute).Unix(), pid)
	unrelated := fmt.Sprintf("mcpfleet_other_%d", pid)
	admin := db.AdminPool(t)
	for _, name := range append(old, recent, unrelated) {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		})
	}

	if err := pgtest.Sweep(ctx, db.AdminURL, now); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	for _, name := range old {
		if exists(t, db.AdminURL, name) {
			t.Errorf("stale %s survived the sweep", name)
		}
	}
	for _, name := range []string{recent, unrelated, db.Name} {
		if !exists(t, db.AdminURL, name) {
			t.Errorf("the sweep dropped %s", name)
		}
	}
}

func exists(tb testing.TB, adminURL, name string) bool {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), adminURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(tb.Context(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok); err != nil {
		tb.Fatal(err)
	}
	return ok
}
