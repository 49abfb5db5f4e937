package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// dash is a migrated database with the runtime store, an owner pool and one tenant.
type dash struct {
	t      testing.TB
	store  *persistence.Store
	app    *pgxpool.Pool
	owner  *pgxpool.Pool
	admin  *persistence.Admin
	tenant uuid.UUID
	db     *pgtest.DB
}

func newDash(t testing.TB) *dash {
	t.Helper()
	return newDashWith(t, persistence.Options{})
}

// newDashWith is newDash with the store opened with opt.
func newDashWith(t testing.TB, opt persistence.Options) *dash {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	store, err := persistence.Open(ctx, db.AppURL, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	d := &dash{t: t, store: store, app: db.AppPool(t), owner: db.AdminPool(t), admin: admin, db: db}
	d.tenant = d.newTenant("acme")
	return d
}

func (d *dash) newTenant(name string) uuid.UUID {
	d.t.Helper()
	id, err := d.admin.CreateTenant(context.Background(), name)
	if err != nil {
		d.t.Fatal(err)
	}
	return id
}

// exec runs statements as the runtime role in one transaction scoped to tenant.
func (d *dash) exec(tenant uuid.UUID, sql string, args ...any) {
	d.t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
		if err := persistence.SetTenant(ctx, tx, tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
	if err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

var t0 = time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)

// server inserts a server of tenant registered at t0+i seconds, with its registration audit event.
func (d *dash) server(tenant uuid.UUID, module string, status health.Status, i int) uuid.UUID {
	d.t.Helper()
	id := uuid.New()
	at := t0.Add(time.Duration(i) * time.Second)
	d.exec(tenant, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status,
		last_heartbeat_at, registered_at) VALUES ($1, $2, $3, '1.0.0', '{2025-11-25}', $4, $5, $5)`, id, tenant, module, string(status), at)
	d.audit(tenant, id, module, persistence.KindRegistered, "", health.Healthy, at)
	return id
}

func (d *dash) audit(tenant, server uuid.UUID, module string, kind persistence.AuditKind, from, to health.Status, at time.Time) {
	d.t.Helper()
	d.exec(tenant, `INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, from_status, occurred_at)
		VALUES ($1, $2, $3, $4, $5, '1.0.0', $6, nullif($7, ''), $8)`, uuid.New(), tenant, string(kind), server, module, string(to), string(from), at)
}

func TestListServersPagesEveryOrder(t *testing.T) {
	d := newDash(t)
	other := d.newTenant("other")
	var all []uuid.UUID
	for i := range 23 {
		st := health.Healthy
		if i%3 == 0 {
			st = health.Unhealthy
		}
		all = append(all, d.server(d.tenant, fmt.Sprintf("mod-%02d", (i*7)%23), st, i))
	}
	all = append(all, d.server(d.tenant, "zeta", health.Healthy, 30))
	d.server(other, "mod-99", health.Healthy, 31) // another tenant's: never listed
	ctx := context.Background()

	walk := func(f persistence.ServerFilter) []persistence.Server {
		t.Helper()
		var out []persistence.Server
		for page := 0; ; page++ {
			if page > 30 {
				t.Fatal("pagination does not end")
			}
			got, err := d.store.ListServers(ctx, d.tenant, f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got...)
			if len(got) < f.Limit {
				return out
			}
			last := got[len(got)-1]
			f.After, f.AfterModule, f.AfterRegistered = last.ServerID, last.ModuleName, last.RegisteredAt
		}
	}
	cases := []struct {
		name  string
		f     persistence.ServerFilter
		n     int
		order func(a, b persistence.Server) bool
	}{
		{"by id", persistence.ServerFilter{Limit: 4}, 24, func(a, b persistence.Server) bool { return a.ServerID.String() < b.ServerID.String() }},
		{"by module", persistence.ServerFilter{Sort: persistence.SortModule, Limit: 5}, 24, func(a, b persistence.Server) bool { return a.ModuleName < b.ModuleName }},
		{"newest first", persistence.ServerFilter{Sort: persistence.SortNewest, Limit: 3}, 24, func(a, b persistence.Server) bool { return a.RegisteredAt.After(b.RegisteredAt) }},
		{"prefix by module", persistence.ServerFilter{ModulePrefix: "mod-1", Sort: persistence.SortModule, Limit: 3}, 10, func(a, b persistence.Server) bool { return a.ModuleName < b.ModuleName }},
		{"status and prefix", persistence.ServerFilter{Status: health.Unhealthy, ModulePrefix: "mod-", Limit: 2}, 8, func(a, b persistence.Server) bool { return a.ServerID.String() < b.ServerID.String() }},
		{"no match", persistence.ServerFilter{ModulePrefix: "nope", Limit: 2}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := walk(c.f)
			if len(got) != c.n {
				t.Fatalf("%d servers, want %d", len(got), c.n)
			}
			seen := map[uuid.UUID]bool{}
			for i, s := range got {
				if seen[s.ServerID] {
					t.Fatalf("server %s listed twice", s.ModuleName)
				}
				seen[s.ServerID] = true
				if s.TenantID != d.tenant {
					t.Fatalf("another tenant's server %s listed", s.ModuleName)
				}
				if c.f.Status != "" && s.Status != c.f.Status {
					t.Fatalf("status %s listed under filter %s", s.Status, c.f.Status)
				}
				if !strings.HasPrefix(s.ModuleName, c.f.ModulePrefix) {
					t.Fatalf("module %s listed under prefix %q", s.ModuleName, c.f.ModulePrefix)
				}
				if i > 0 && !c.order(got[i-1], s) {
					t.Fatalf("out of order at %d: %s then %s", i, got[i-1].ModuleName, s.ModuleName)
				}
			}
		})
	}
	listed := map[uuid.UUID]bool{}
	for _, s := range walk(persistence.ServerFilter{Limit: 7}) {
		listed[s.ServerID] = true
	}
	for _, id := range all {
		if !listed[id] {
			t.Fatalf("server %s of the tenant never listed", id)
		}
	}
	if _, err := d.store.ListServers(ctx, d.tenant, persistence.ServerFilter{ModulePrefix: "a%", Limit: 5}); !errors.Is(err, persistence.ErrBadPrefix) {
		t.Fatalf("a LIKE pattern as prefix: %v, want ErrBadPrefix", err)
	}
}

// TestListServersUsesIndexes checks that each order is served by an index, so the thousandth page of a
// large fleet costs what the first does.
func TestListServersUsesIndexes(t *testing.T) {
	d := newDash(t)
	d.exec(d.tenant, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, registered_at)
		SELECT gen_random_uuid(), $1, 'm' || i, '1', '{}', now() - i * interval '1 second' FROM generate_series(1, 20000) i`, d.tenant)
	if _, err := d.owner.Exec(context.Background(), "ANALYZE mcp_servers"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		where, order, index string
	}{
		{`module_name COLLATE "C" >= 'm1' AND module_name COLLATE "C" < 'm2' AND (module_name COLLATE "C", server_id) > ('m1', '00000000-0000-0000-0000-000000000000')`, `module_name COLLATE "C", server_id`, "mcp_servers_tenant_module_c"},
		{`(registered_at, server_id) < (now(), 'ffffffff-ffff-ffff-ffff-ffffffffffff')`, `registered_at DESC, server_id DESC`, "mcp_servers_tenant_registered"},
	} {
		var plan []string
		ctx := context.Background()
		err := pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
			if err := persistence.SetTenant(ctx, tx, d.tenant); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `EXPLAIN SELECT server_id FROM mcp_servers WHERE `+c.where+` ORDER BY `+c.order+` LIMIT 51`)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(plan, "\n"), c.index) {
			t.Errorf("ORDER BY %s does not use %s:\n%s", c.order, c.index, strings.Join(plan, "\n"))
		}
	}
}

func TestFleetSnapshotAndEvents(t *testing.T) {
	d := newDash(t)
	other := d.newTenant("other")
	ctx := context.Background()
	a := d.server(d.tenant, "alpha", health.Healthy, 0)
	d.server(d.tenant, "beta", health.Healthy, 1)
	d.server(other, "gamma", health.Healthy, 2)

	snap, err := d.store.FleetSnapshot(ctx, d.tenant, persistence.ServerFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Counts[health.Healthy] != 2 || len(snap.Servers) != 2 {
		t.Fatalf("snapshot: counts %v, %d servers", snap.Counts, len(snap.Servers))
	}
	latest, err := d.store.LatestEventCursor(ctx, d.tenant)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cursor != latest || latest.Import != 0 || latest.Audit == 0 {
		t.Fatalf("snapshot cursor %v, latest %v", snap.Cursor, latest)
	}

	// A transition after the snapshot is exactly what follows its cursor.
	d.exec(d.tenant, `UPDATE mcp_servers SET status = 'degraded' WHERE server_id = $1`, a)
	d.audit(d.tenant, a, "alpha", persistence.KindDegraded, health.Healthy, health.Degraded, t0.Add(20*time.Second))
	// An import: the server_config trigger records it, with the previous import status.
	d.exec(d.tenant, `INSERT INTO server_config (server_id, tenant_id) VALUES ($1, $2)`, a, d.tenant)
	d.exec(d.tenant, `UPDATE server_config SET import_status = 'succeeded', last_imported = $2, tool_count = 3 WHERE server_id = $1`, a, t0.Add(25*time.Second))
	d.exec(d.tenant, `UPDATE server_config SET import_status = 'failed', import_error = 'x', last_imported = $2 WHERE server_id = $1`, a, t0.Add(26*time.Second))
	// Neither an edit nor a contact is an import.
	d.exec(d.tenant, `UPDATE server_config SET enabled = false, last_contact = now(), last_latency_ms = 3 WHERE server_id = $1`, a)
	// Another tenant's events are not this tenant's.
	d.exec(other, `INSERT INTO server_config (server_id, tenant_id) SELECT server_id, tenant_id FROM mcp_servers`)
	d.exec(other, `UPDATE server_config SET import_status = 'succeeded', last_imported = now()`)

	evs, err := d.store.FleetEvents(ctx, d.tenant, snap.Cursor, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.ServerID != a || e.ModuleName != "alpha" {
			t.Fatalf("event of another server: %+v", e)
		}
		got = append(got, e.Kind+" "+e.From+"→"+e.Status)
	}
	want := []string{"mcp.server.degraded healthy→degraded", "mcp.server.imported never_imported→succeeded", "mcp.server.imported succeeded→failed"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("events after the snapshot:\n got %v\nwant %v", got, want)
	}
	if !evs[1].Import || !evs[2].At.Equal(t0.Add(26*time.Second)) {
		t.Fatalf("import events: %+v", evs[1:])
	}
	after := persistence.EventCursor{Audit: evs[0].Seq, Import: evs[2].Seq}
	if evs, err := d.store.FleetEvents(ctx, d.tenant, after, 100); err != nil || len(evs) != 0 {
		t.Fatalf("after the last event: %v %v", evs, err)
	}
	// The cursor round-trips through its text form.
	if c, err := persistence.ParseEventCursor(after.String()); err != nil || c != after {
		t.Fatalf("cursor %q parsed as %v, %v", after.String(), c, err)
	}
	three := persistence.EventCursor{Audit: 1, Import: 2, Tool: 3}
	if c, err := persistence.ParseEventCursor(three.String()); err != nil || c != three || three.String() != "t1-2-3" {
		t.Fatalf("cursor %q parsed as %v, %v", three.String(), c, err)
	}
	if c, err := persistence.ParseEventCursor("t1-2"); err != nil || c != (persistence.EventCursor{Audit: 1, Import: 2}) {
		t.Fatalf("a two-part id parsed as %v, %v", c, err)
	}
	for _, bad := range []string{"", "1", "t1", "a-b", "ta-b", "-1-2", "t-1-2", "1-2-3", "t1-2-3-4-5", "t1-2--3", "1--2", "tt1-2"} {
		if _, err := persistence.ParseEventCursor(bad); err == nil || errors.Is(err, persistence.ErrOldEventCursor) {
			t.Errorf("cursor %q: %v, want refused", bad, err)
		}
	}
	if _, err := persistence.ParseEventCursor("12-3"); !errors.Is(err, persistence.ErrOldEventCursor) {
		t.Errorf("an id of the shared numbering: %v, want ErrOldEventCursor", err)
	}
	// The runtime role cannot rewrite history.
	err = pgx.BeginFunc(ctx, d.app, func(tx pgx.Tx) error {
		if err := persistence.SetTenant(ctx, tx, d.tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM import_events`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("deleting import events: %v, want permission denied", err)
	}

	h, err := d.store.ServerHistory(ctx, d.tenant, a, 10, t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 2 || h.Events[0].Kind != persistence.KindDegraded || h.Transitions != 1 {
		t.Fatalf("history: %d events (newest %s), %d transitions", len(h.Events), h.Events[0].Kind, h.Transitions)
	}
}

func TestSessions(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	key, err := d.admin.CreateAPIKey(ctx, d.tenant, persistence.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.store.LookupKey(ctx, persistence.HashAPIKey(key.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	hash := func(b byte) []byte { return []byte(strings.Repeat(string(rune('a'+b)), 32)) }
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := d.store.CreateSession(ctx, p, hash(0), now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, exp, err := d.store.LookupSession(ctx, hash(0), now)
	if err != nil || got != p || !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("lookup: %v %v %v, want %v", got, exp, err, p)
	}
	if _, _, err := d.store.LookupSession(ctx, hash(0), now.Add(time.Hour)); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("an expired session: %v", err)
	}
	if _, _, err := d.store.LookupSession(ctx, hash(1), now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("an unknown session: %v", err)
	}
	// Sign-out revokes it; revoking twice is fine.
	if err := d.store.RevokeSession(ctx, p.TenantID, hash(0), now); err != nil {
		t.Fatal(err)
	}
	if err := d.store.RevokeSession(ctx, p.TenantID, hash(0), now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.store.LookupSession(ctx, hash(0), now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("a revoked session: %v", err)
	}
	// Another tenant cannot revoke it.
	if err := d.store.CreateSession(ctx, p, hash(2), now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := d.store.RevokeSession(ctx, d.newTenant("other"), hash(2), now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.store.LookupSession(ctx, hash(2), now); err != nil {
		t.Fatalf("another tenant revoked the session: %v", err)
	}
	// Revoking the key ends its sessions.
	if _, err := d.owner.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE key_id = $1`, p.KeyID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.store.LookupSession(ctx, hash(2), now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("the session of a revoked key: %v", err)
	}
}

// A page asked for without advertisements does not read them; every other column is the same.
func TestListServersWithoutAdvertisement(t *testing.T) {
	d := newDash(t)
	id := d.server(d.tenant, "alpha", health.Healthy, 0)
	d.exec(d.tenant, `UPDATE mcp_servers SET capability_advertisement = '{"tools":[{"name":"x"}]}' WHERE server_id = $1`, id)
	ctx := context.Background()
	full, err := d.store.ListServers(ctx, d.tenant, persistence.ServerFilter{Limit: 10})
	if err != nil || len(full) != 1 || len(full[0].CapabilityAdvertisement) == 0 {
		t.Fatalf("with advertisements: %+v %v", full, err)
	}
	slim, err := d.store.ListServers(ctx, d.tenant, persistence.ServerFilter{Limit: 10, WithoutAdvertisement: true})
	if err != nil || len(slim) != 1 || slim[0].CapabilityAdvertisement != nil {
		t.Fatalf("without advertisements: %+v %v", slim, err)
	}
	full[0].CapabilityAdvertisement = nil
	if fmt.Sprint(full[0]) != fmt.Sprint(slim[0]) {
		t.Errorf("the pages differ beyond the advertisement:\n%+v\n%+v", full[0], slim[0])
	}
}
