package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// fleetOf registers n servers of tenant named m0, m1, … and returns their ids.
func (d *dash) fleetOf(tenant uuid.UUID, n int) []uuid.UUID {
	d.t.Helper()
	if n == 0 {
		return nil
	}
	return d.loadFleetOf(tenant, n, uuid.Nil)
}

// LoadFleet reads every server of each tenant asked for exactly once, under its own tenant, and nothing of
// a tenant not asked for: a large tenant in parts (LoadServers), the small ones in groups — bounded by
// tenants and by servers — each tenant's statement scoped to it. ServerTotals counts each tenant's servers,
// in the order asked, across groups.
func TestLoadFleetReadsEveryTenantInGroups(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	sizes := []int{12, 3, 1, 0, 5, 2}
	tenants := []uuid.UUID{d.tenant}
	for i := 1; i < len(sizes); i++ {
		tenants = append(tenants, d.newTenant(fmt.Sprintf("t%d", i)))
	}
	owner := map[uuid.UUID]uuid.UUID{}
	for i, tenant := range tenants {
		for _, id := range d.fleetOf(tenant, sizes[i]) {
			owner[id] = tenant
		}
	}
	d.fleetOf(d.newTenant("not asked"), 4)
	defer persistence.SetLoadSmall(10)() // the first tenant is read in parts
	// The small tenants, in order, have 3, 1, 0, 5 and 2 servers.
	for _, bound := range []struct {
		tenants, servers int
		groups           []int
	}{
		{500, 50000, []int{5}}, {2, 50000, []int{2, 2, 1}}, {1, 50000, []int{1, 1, 1, 1, 1}},
		{500, 4, []int{2, 2, 1}}, {3, 1, []int{1, 1, 2, 1}},
	} {
		var groups []int
		restore := persistence.SetLoadGroup(bound.tenants, bound.servers, func(n int) { groups = append(groups, n) })
		what := fmt.Sprintf("groups of %d tenants, %d servers", bound.tenants, bound.servers)
		totals, err := d.store.ServerTotals(ctx, tenants)
		if err != nil || !slices.Equal(totals, sizes) {
			t.Errorf("%s: ServerTotals = %v, %v; want %v", what, totals, err, sizes)
		}
		seen := map[uuid.UUID]int{}
		err = d.store.LoadFleet(ctx, tenants, totals, func(s persistence.Server) error {
			seen[s.ServerID]++
			if want, ok := owner[s.ServerID]; !ok || s.TenantID != want || s.CapabilityAdvertisement != nil || s.ModuleName == "" {
				t.Errorf("%s: loaded %+v (tenant %s)", what, s, want)
			}
			return nil
		})
		restore()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(groups, bound.groups) {
			t.Errorf("%s: read in groups of %v tenants, want %v", what, groups, bound.groups)
		}
		onceEach(t, what, seen, slices.Collect(func(yield func(uuid.UUID) bool) {
			for id := range owner {
				if !yield(id) {
					return
				}
			}
		}))
	}
	if err := d.store.LoadFleet(ctx, []uuid.UUID{d.tenant, uuid.Nil}, []int{12, 0}, func(persistence.Server) error { return nil }); !errors.Is(err, persistence.ErrNoTenant) {
		t.Errorf("LoadFleet with a nil tenant = %v, want ErrNoTenant", err)
	}
	if err := d.store.LoadFleet(ctx, tenants, sizes[1:], func(persistence.Server) error { return nil }); err == nil {
		t.Error("LoadFleet with a total missing: no error")
	}
}

// A group's read locks the table before its snapshot, as a large tenant's first part does: a rewrite of
// the table (an ALTER TABLE that fills a new column) holding it when the load begins commits before the
// group's snapshot is taken, and the group reads every server (on a snapshot older than the rewrite, it
// would read the rewritten table as empty). The store's one connection has the group's statements
// prepared already, so that preparing them does not wait for the table in its stead.
func TestLoadFleetBesideARewrite(t *testing.T) {
	d := newDashWith(t, persistence.Options{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := d.fleetOf(d.tenant, 5)
	if err := d.store.LoadFleet(ctx, []uuid.UUID{d.tenant}, []int{len(ids)}, func(persistence.Server) error { return nil }); err != nil {
		t.Fatal(err)
	}
	seen := map[uuid.UUID]int{}
	var err error
	d.duringRewrite(ctx, "mcp_servers", func() {
		err = d.store.LoadFleet(ctx, []uuid.UUID{d.tenant}, []int{len(ids)}, func(s persistence.Server) error {
			seen[s.ServerID]++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	onceEach(t, "beside a rewrite", seen, ids)
}

// A load whose fn fails stops with that error, in a group as in parts, and every connection it took goes
// back to the pool.
func TestLoadFleetStopsOnError(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	small := d.newTenant("small")
	d.fleetOf(d.tenant, 12)
	d.fleetOf(small, 6)
	defer persistence.SetLoadSmall(10)()
	stop := errors.New("enough")
	for _, tenants := range [][]uuid.UUID{{small}, {d.tenant}} { // in a group; in parts
		calls := 0
		totals, err := d.store.ServerTotals(ctx, tenants)
		if err != nil {
			t.Fatal(err)
		}
		err = d.store.LoadFleet(ctx, tenants, totals, func(persistence.Server) error {
			if calls++; calls == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 3 {
			t.Errorf("LoadFleet = %v after %d calls, want %v after 3", err, calls, stop)
		}
	}
	// See TestLoadServersStopsOnError: a cancelled part's connection is closed on the pool's goroutine.
	for deadline := time.Now().Add(20 * time.Second); d.store.AcquiredConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still taken 20 s after the load", d.store.AcquiredConns())
		}
	}
}

// A statement that fails inside a group fails the read with PostgreSQL's error, after the tenants before it
// were handed over and before any after it: PostgreSQL runs nothing after the failed statement, and the
// connection, left in the failed transaction, is not handed out again — on a pool of one connection the
// reads after it succeed.
func TestReadTenantsStatementFailsInAGroup(t *testing.T) {
	d := newDashWith(t, persistence.Options{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, c := d.tenant, d.newTenant("b"), d.newTenant("c")
	failOnB := fmt.Sprintf(`SELECT 1 / CASE WHEN $1 = '%s'::uuid THEN 0 ELSE 1 END`, b)
	got, err := d.store.ReadTenants(ctx, []uuid.UUID{a, b, c}, failOnB)
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("read failing on b: %v, want division by zero (22012)", err)
	}
	if _, ok := got[c]; ok || !slices.Equal(got[a], []int64{1}) {
		t.Errorf("read failing on b handed over %v, want a's row and nothing of c", got)
	}
	for i := range 3 {
		got, err := d.store.ReadTenants(ctx, []uuid.UUID{a, b, c}, `SELECT 2 WHERE $1::uuid IS NOT NULL`)
		if err != nil || len(got) != 3 {
			t.Fatalf("read %d after the failed one: %v, %v", i, got, err)
		}
	}
	if n := d.store.AcquiredConns(); n != 0 {
		t.Errorf("%d connections taken after the reads", n)
	}
}

// ReconcileTenants repairs the skill cascade of every tenant asked for, in groups, and no other tenant's.
func TestReconcileTenantsInGroups(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	var broken []uuid.UUID // tenants with one skill available on an unhealthy server
	for i := range 5 {
		tenant := d.newTenant(fmt.Sprintf("r%d", i))
		id := d.fleetOf(tenant, 1)[0]
		d.exec(tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available, created_at, updated_at)
			VALUES (gen_random_uuid(), $1, $2, 'ping', '{"type":"object"}', false, true, $3, $3)`, tenant, id, t0)
		if _, err := d.owner.Exec(ctx, `UPDATE mcp_servers SET status = 'unhealthy' WHERE server_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		broken = append(broken, tenant)
	}
	available := func(tenant uuid.UUID) int {
		return d.count(`SELECT count(*)::int FROM skill_registry WHERE tenant_id = $1 AND available`, tenant)
	}
	for _, tenant := range broken {
		if available(tenant) != 1 {
			t.Fatalf("tenant %s: the cascade is not broken before the repair", tenant)
		}
	}
	defer persistence.SetLoadGroup(2, 50000, nil)()
	n, err := d.store.ReconcileTenants(ctx, broken[:3]) // in two groups
	if err != nil || n != 3 {
		t.Fatalf("ReconcileTenants = %d, %v; want 3 skills repaired", n, err)
	}
	for i, want := range []int{0, 0, 0, 1, 1} { // the last two tenants were not asked for
		if got := available(broken[i]); got != want {
			t.Errorf("tenant %d: %d skills available after the repair, want %d", i, got, want)
		}
	}
	// A group that fails (here: a tenant without an id) leaves the groups before it repaired.
	n, err = d.store.ReconcileTenants(ctx, []uuid.UUID{broken[3], broken[4], uuid.Nil})
	if !errors.Is(err, persistence.ErrNoTenant) || n != 2 || available(broken[3])+available(broken[4]) != 0 {
		t.Errorf("ReconcileTenants with a failing second group = %d, %v; want the first group's 2 repaired and ErrNoTenant", n, err)
	}
}

// The drift check locks the tables it reads before its snapshot: a rewrite of skill_registry holding it
// when the check begins commits first, and the check sees the drift (on a snapshot older than the
// rewrite it would read the table as empty and repair nothing). See TestLoadFleetBesideARewrite.
func TestReconcileTenantsBesideARewrite(t *testing.T) {
	d := newDashWith(t, persistence.Options{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := d.fleetOf(d.tenant, 1)[0]
	if _, err := d.store.ReconcileTenants(ctx, []uuid.UUID{d.tenant}); err != nil { // its statements prepared
		t.Fatal(err)
	}
	d.exec(d.tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available, created_at, updated_at)
		VALUES (gen_random_uuid(), $1, $2, 'ping', '{"type":"object"}', false, false, $3, $3)`, d.tenant, id, t0) // healthy server
	var n int64
	var err error
	d.duringRewrite(ctx, "skill_registry", func() { n, err = d.store.ReconcileTenants(ctx, []uuid.UUID{d.tenant}) })
	if err != nil || n != 1 {
		t.Errorf("ReconcileTenants beside a rewrite = %d, %v; want 1 skill repaired", n, err)
	}
}

// duringRewrite runs op while a transaction of the owner rewrites table (an ALTER TABLE that fills a new
// column, holding the table ACCESS EXCLUSIVE), and commits the rewrite once op waits for the table. It
// fails the test if op ends before it waits.
func (d *dash) duringRewrite(ctx context.Context, table string, op func()) {
	d.t.Helper()
	tx, err := d.owner.Begin(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `ALTER TABLE `+table+` ADD COLUMN rewritten float8 DEFAULT random()`); err != nil {
		d.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		op()
	}()
	for d.lockWaiters(table, "AccessShareLock") == 0 {
		select {
		case <-done:
			d.t.Fatalf("the operation ended while the rewrite held %s", table)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		d.t.Fatal(err)
	}
	<-done
}
