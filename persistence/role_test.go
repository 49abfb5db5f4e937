package persistence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// roleLab is a migrated database where a test creates roles (cluster-wide, so uniquely named and
// dropped when the test ends) and connects as them.
type roleLab struct {
	t     *testing.T
	db    *pgtest.DB
	owner *pgxpool.Pool
	tag   string
}

func newRoleLab(t *testing.T) *roleLab {
	t.Helper()
	db := pgtest.New(t)
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &roleLab{t: t, db: db, owner: db.AdminPool(t), tag: hex.EncodeToString(b)}
}

// sql runs statements as the superuser in the test's database.
func (l *roleLab) sql(stmts ...string) {
	l.t.Helper()
	for _, s := range stmts {
		if _, err := l.owner.Exec(context.Background(), s); err != nil {
			l.t.Fatalf("%s: %v", s, err)
		}
	}
}

// role creates a role named after base with attrs; its objects are handed back to the superuser and the
// role dropped when the test ends (before the database is).
func (l *roleLab) role(base, attrs string) string {
	l.t.Helper()
	name := "mcpfleet_rt_" + base + "_" + l.tag
	l.sql("CREATE ROLE " + name + " " + attrs)
	l.t.Cleanup(func() {
		ctx := context.Background()
		for _, s := range []string{"REASSIGN OWNED BY " + name + " TO CURRENT_USER", "DROP OWNED BY " + name, "DROP ROLE " + name} {
			if _, err := l.owner.Exec(ctx, s); err != nil {
				l.t.Errorf("%s: %v", s, err)
			}
		}
	})
	return name
}

// check opens a store as role (trust authentication, like the app role) and runs CheckRuntimeRole.
func (l *roleLab) check(role string) (persistence.RoleCheck, error) {
	l.t.Helper()
	u, err := url.Parse(l.db.AppURL)
	if err != nil {
		l.t.Fatal(err)
	}
	u.User = url.User(role)
	store, err := persistence.Open(context.Background(), u.String(), persistence.Options{MaxConns: 1})
	if err != nil {
		l.t.Fatal(err)
	}
	defer store.Close()
	return store.CheckRuntimeRole(context.Background())
}

func wantRefused(t *testing.T, err error, says ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the role was accepted; want it refused (%s)", strings.Join(says, ", "))
	}
	t.Logf("refused: %v", err)
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %q", err, s)
		}
	}
}

// The app role the migrations create passes; the superuser does not.
func TestCheckRuntimeRoleAppRole(t *testing.T) {
	l := newRoleLab(t)
	rc, err := l.check("cyberos_app")
	if err != nil || len(rc.Owned) != 0 || len(rc.PrivilegedRoles) != 0 || rc.Schema == "" {
		t.Fatalf("cyberos_app: %+v, %v; want accepted", rc, err)
	}
	u, _ := url.Parse(l.db.AdminURL)
	_, err = l.check(u.User.Username())
	wantRefused(t, err, "superuser")
}

// A member of the role that owns the tables — the migration owner's members — is refused, though it owns
// nothing itself, and so is a member that does not inherit (it can still SET ROLE). First proved as the
// attacker would: the member switches row-level security off.
func TestCheckRuntimeRoleRefusesMemberOfOwner(t *testing.T) {
	l := newRoleLab(t)
	owner := l.role("owner", "NOLOGIN")
	member := l.role("member", "LOGIN")
	noinherit := l.role("noinherit", "LOGIN NOINHERIT")
	l.sql("ALTER TABLE server_config OWNER TO "+owner, "ALTER TABLE mcp_calls OWNER TO "+owner,
		"GRANT "+owner+" TO "+member, "GRANT "+owner+" TO "+noinherit, "GRANT USAGE ON SCHEMA public TO "+member+", "+noinherit)

	// What the old check missed: the member can switch RLS off on a table it does not own.
	u, _ := url.Parse(l.db.AppURL)
	u.User = url.User(noinherit)
	conn, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "SET LOCAL ROLE "+owner+"; ALTER TABLE server_config NO FORCE ROW LEVEL SECURITY"); err != nil {
		t.Fatalf("the member could not switch RLS off (the premise of this test): %v", err)
	}
	_ = tx.Rollback(context.Background())
	_ = conn.Close(context.Background())

	rc, err := l.check(member)
	wantRefused(t, err, member, "member of role \""+owner+"\"", "inherits its privileges", "table mcp_calls", "table server_config", "cyberos_app")
	if len(rc.Owned) != 2 || rc.Owned[0].Owner != owner || !rc.Owned[0].Inherited {
		t.Errorf("owned = %+v, want the two tables of %s, inherited", rc.Owned, owner)
	}
	_, err = l.check(noinherit)
	wantRefused(t, err, "member of role \""+owner+"\"", "can SET ROLE to it", "table server_config")
}

// Every object of the schema counts, read from the catalogue: a table outside the six the old check
// listed, a sequence, a function, the schema itself.
func TestCheckRuntimeRoleCoversTheWholeSchema(t *testing.T) {
	l := newRoleLab(t)
	var schemaOwner string
	if err := l.owner.QueryRow(context.Background(), "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'").Scan(&schemaOwner); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, grant, undo, says string }{
		{"tbl", "ALTER TABLE server_config OWNER TO %[1]s", "", "it owns table server_config"},
		{"latertbl", "CREATE TABLE later_%[1]s (x int); ALTER TABLE later_%[1]s OWNER TO %[1]s", "DROP TABLE later_%[1]s", "table later_"},
		{"seq", "CREATE SEQUENCE seq_%[1]s; ALTER SEQUENCE seq_%[1]s OWNER TO %[1]s", "DROP SEQUENCE seq_%[1]s", "sequence seq_"},
		{"fn", "ALTER FUNCTION server_config_tenant_check() OWNER TO %[1]s", "", "function server_config_tenant_check"},
		{"schema", "ALTER SCHEMA public OWNER TO %[1]s", "ALTER SCHEMA public OWNER TO %[2]s", "it owns schema public"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &roleLab{t: t, db: l.db, owner: l.owner, tag: l.tag}
			r := l.role(tt.name, "LOGIN")
			l.sql(fmt.Sprintf(tt.grant, r))
			_, err := l.check(r)
			wantRefused(t, err, tt.says)
			if tt.undo != "" {
				l.sql(fmt.Sprintf(tt.undo, r, schemaOwner))
			}
		})
	}
}

// A member of a role with BYPASSRLS (or SUPERUSER) can SET ROLE to it: refused.
func TestCheckRuntimeRoleRefusesMemberOfPrivilegedRole(t *testing.T) {
	l := newRoleLab(t)
	bypass := l.role("bypass", "NOLOGIN BYPASSRLS")
	member := l.role("bpmember", "LOGIN")
	l.sql("GRANT " + bypass + " TO " + member)
	rc, err := l.check(member)
	wantRefused(t, err, "member of \""+bypass+"\"", "BYPASSRLS")
	if len(rc.PrivilegedRoles) != 1 || rc.PrivilegedRoles[0] != bypass {
		t.Errorf("privileged roles = %v", rc.PrivilegedRoles)
	}
}
