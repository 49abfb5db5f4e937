package persistence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// Heartbeat stamps and transition sets both write many rows of mcp_servers in one statement. A load run
// with a deregistering fleet still heartbeating deadlocked them ten times in two minutes: each locked
// the rows in its own order. Both now lock in server_id order. Each test holds the higher id's row in
// another transaction and gives the write [higher, lower]: locking in id order, the write holds the
// lower row while it waits for the higher one; in its input order it would wait with the lower row free.

// lockedPair returns two new healthy servers of d.tenant, lower id first, and a transaction of the
// owner that holds the higher one's row (rolled back at cleanup). The table holds 2,000 more servers,
// so that the plans are a fleet's (on a table of two rows a scan may visit them in any order).
func (d *dash) lockedPair() (lo, hi uuid.UUID, hold pgx.Tx) {
	d.t.Helper()
	ctx := context.Background()
	d.exec(d.tenant, `INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status,
		last_heartbeat_at, registered_at) SELECT gen_random_uuid(), $1, 'filler-' || i, '1.0.0', '{2025-11-25}', 'healthy', $2, $2 FROM generate_series(1, 2000) i`, d.tenant, t0)
	lo, hi = d.server(d.tenant, "a", health.Healthy, 0), d.server(d.tenant, "b", health.Healthy, 1)
	if bytes.Compare(lo[:], hi[:]) > 0 {
		lo, hi = hi, lo
	}
	hold, err := d.owner.Begin(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = hold.Rollback(ctx) })
	if _, err := hold.Exec(ctx, `SELECT 1 FROM mcp_servers WHERE server_id = $1 FOR UPDATE`, hi); err != nil {
		d.t.Fatal(err)
	}
	return lo, hi, hold
}

// heldByAnother reports whether the row of srv is locked by another transaction, asked from hold
// (which is aborted by the answer yes, and rolled back).
func heldByAnother(t testing.TB, hold pgx.Tx, srv uuid.UUID) bool {
	t.Helper()
	_, err := hold.Exec(context.Background(), `SELECT 1 FROM mcp_servers WHERE server_id = $1 FOR UPDATE NOWAIT`, srv)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

func TestStampsLockServersInIDOrder(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	lo, hi, hold := d.lockedPair()
	at := t0.Add(time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := d.store.StampHeartbeatsFenced(ctx, []persistence.Stamp{
			{TenantID: d.tenant, ServerID: hi, At: at}, {TenantID: d.tenant, ServerID: lo, At: at}})
		done <- err
	}()
	d.waitForLockWait(`WITH v AS (SELECT * FROM unnest($1::uuid[], $2::timestamptz[]%`)
	if !heldByAnother(t, hold, lo) {
		t.Fatal("the stamp waits for the higher id's row without holding the lower one: it locks out of id order")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE last_heartbeat_at = $1`, at); n != 2 {
		t.Fatalf("%d of 2 stamps landed", n)
	}
}

func TestTransitionSetLocksServersInIDOrder(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	lo, hi, hold := d.lockedPair()
	done := make(chan []error, 1)
	// Fenced, as the service writes them: unfenced transitions are applied one by one.
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	fenced := []persistence.Command{persistence.WithFence(d.unhealthyCmd(hi), fences[shard.Of(hi)]),
		persistence.WithFence(d.unhealthyCmd(lo), fences[shard.Of(lo)])}
	go func() { done <- d.store.Commit(ctx, fenced) }()
	d.waitForLockWait(`/* transition set */%`)
	if !heldByAnother(t, hold, lo) {
		t.Fatal("the transition set waits for the higher id's row without holding the lower one: it locks out of id order")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = ANY($1) AND status = 'unhealthy'`, []uuid.UUID{lo, hi}); n != 2 {
		t.Fatalf("%d of 2 servers unhealthy", n)
	}
}

// The reconciliation skips a skill row another transaction holds instead of waiting for it (it cannot
// then deadlock with the cascade it repairs, as it did in a load run), and repairs the row on its next run.
func TestReconcileSkipsHeldSkills(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	skills := make([]uuid.UUID, 2)
	for i, module := range []string{"a", "b"} {
		srv := d.server(d.tenant, module, health.Unhealthy, i)
		skills[i] = uuid.New()
		d.exec(d.tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available)
			VALUES ($1, $2, $3, 'x', '{}', true, true)`, skills[i], d.tenant, srv) // available on an unhealthy server: to repair
	}
	hold, err := d.owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Rollback(ctx) })
	if _, err := hold.Exec(ctx, `SELECT 1 FROM skill_registry WHERE skill_id = $1 FOR UPDATE`, skills[0]); err != nil {
		t.Fatal(err)
	}
	repaired := make(chan int64, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		n, err := d.store.ReconcileSkills(c, d.tenant)
		if err != nil {
			t.Error(err) // a reconciliation that waits for the held row times out here
		}
		repaired <- n
	}()
	if n := <-repaired; n != 1 {
		t.Fatalf("repaired %d skills beside a held one, want 1", n)
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE skill_id = $1 AND NOT available`, skills[1]); n != 1 {
		t.Fatal("the free skill was not repaired")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := d.store.ReconcileSkills(ctx, d.tenant); err != nil || n != 1 {
		t.Fatalf("the next reconciliation repaired %d, %v; want the skipped skill", n, err)
	}
}

// The same holds across tenants: a stamp and a group commit write the servers of several tenants
// tenant by tenant, in tenant id order (a stamp's tenants came out of a map, a commit's in command
// order, and one of each could wait for the other's rows). Each test holds the row of the highest
// tenant's server and gives the write its tenants in another order: the write must hold the lower
// tenants' rows while it waits.

// tenantServers returns n tenants (d.tenant among them) in id order and a healthy server of each,
// with a transaction of the owner that holds the last one's row.
func (d *dash) tenantServers(n int) (tenants, servers []uuid.UUID, hold pgx.Tx) {
	d.t.Helper()
	ctx := context.Background()
	tenants = []uuid.UUID{d.tenant}
	for len(tenants) < n {
		tenants = append(tenants, d.newTenant(fmt.Sprintf("t%d", len(tenants))))
	}
	slices.SortFunc(tenants, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for i, tn := range tenants {
		servers = append(servers, d.server(tn, "m", health.Healthy, i))
	}
	hold, err := d.owner.Begin(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = hold.Rollback(ctx) })
	if _, err := hold.Exec(ctx, `SELECT 1 FROM mcp_servers WHERE server_id = $1 FOR UPDATE`, servers[n-1]); err != nil {
		d.t.Fatal(err)
	}
	return tenants, servers, hold
}

// lockedElsewhere reports whether srv's row is locked by a transaction, asked from a new one.
func (d *dash) lockedElsewhere(srv uuid.UUID) bool {
	d.t.Helper()
	ctx := context.Background()
	probe, err := d.owner.Begin(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = probe.Rollback(ctx) }()
	return heldByAnother(d.t, probe, srv)
}

func TestStampsLockTenantsInIDOrder(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	const n = 8 // a stamp in a random tenant order locks the highest last 1 time in 8
	tenants, servers, hold := d.tenantServers(n)
	at := t0.Add(time.Hour)
	var stamps []persistence.Stamp
	for i := n - 1; i >= 0; i-- {
		stamps = append(stamps, persistence.Stamp{TenantID: tenants[i], ServerID: servers[i], At: at})
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.store.StampHeartbeatsFenced(ctx, stamps)
		done <- err
	}()
	d.waitForLockWait(`WITH v AS (SELECT * FROM unnest($1::uuid[], $2::timestamptz[]%`)
	for i := range n - 1 {
		if !d.lockedElsewhere(servers[i]) {
			t.Fatalf("the stamp waits for the highest tenant's server without holding tenant %d of %d's: it locks tenants out of id order", i+1, n)
		}
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := d.count(`SELECT count(*) FROM mcp_servers WHERE last_heartbeat_at = $1`, at); c != n {
		t.Fatalf("%d of %d stamps landed", c, n)
	}
}

func TestGroupCommitLocksTenantsInIDOrder(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	tenants, servers, hold := d.tenantServers(2)
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(i int) persistence.Command {
		c := d.unhealthyCmd(servers[i])
		c.TenantID = tenants[i]
		return persistence.WithFence(c, fences[shard.Of(servers[i])])
	}
	done := make(chan []error, 1)
	go func() { done <- d.store.Commit(ctx, []persistence.Command{cmd(1), cmd(0)}) }() // the higher tenant's first
	d.waitForLockWait(`/* transition set */%`)
	if !d.lockedElsewhere(servers[0]) {
		t.Fatal("the commit waits for the higher tenant's server without holding the lower one's: it locks tenants in command order")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if c := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = ANY($1) AND status = 'unhealthy'`, servers); c != 2 {
		t.Fatalf("%d of 2 servers unhealthy", c)
	}
}

// TestStampsOfInterleavedTenantsEachLand: stamps of three tenants, interleaved and several per tenant,
// each land on its own server at its own time (each tenant's run of the sorted stamps is written under
// that tenant: a stamp grouped under another tenant would miss its row, which RLS hides), and a stamp
// never moves a server's time backwards.
func TestStampsOfInterleavedTenantsEachLand(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	tenants := []uuid.UUID{d.tenant, d.newTenant("b"), d.newTenant("c")}
	var stamps []persistence.Stamp
	want := map[uuid.UUID]time.Time{}
	for i := range 4 {
		for j, tn := range tenants {
			srv := d.server(tn, fmt.Sprintf("m%d", i), health.Healthy, 0)
			at := t0.Add(time.Duration(1+i*len(tenants)+j) * time.Minute)
			stamps = append(stamps, persistence.Stamp{TenantID: tn, ServerID: srv, At: at})
			want[srv] = at
		}
	}
	older := stamps[0]
	older.At = t0.Add(-time.Hour)
	if _, err := d.store.StampHeartbeatsFenced(ctx, append(stamps, older)); err != nil {
		t.Fatal(err)
	}
	for srv, at := range want {
		if c := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = $1 AND last_heartbeat_at = $2`, srv, at); c != 1 {
			t.Errorf("server %s: its stamp at %s did not land", srv, at.Format(time.TimeOnly))
		}
	}
}
