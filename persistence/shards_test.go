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
	"github.com/mcpfleet/mcpfleet/shard"
)

// claim claims srv's shard for node and returns the fence.
func (d *dash) claim(srv uuid.UUID, node string) persistence.Fence {
	d.t.Helper()
	sh := shard.Of(srv)
	epoch, err := d.store.ClaimShard(context.Background(), sh, node)
	if err != nil {
		d.t.Fatal(err)
	}
	return persistence.Fence{Shard: sh, Epoch: epoch}
}

// count runs a count(*) query as the owner (no RLS).
func (d *dash) count(sql string, args ...any) int {
	d.t.Helper()
	var n int
	if err := d.owner.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (d *dash) unhealthyCmd(srv uuid.UUID) *persistence.TransitionCmd {
	return &persistence.TransitionCmd{EventID: uuid.New(), TenantID: d.tenant, ServerID: srv, ModuleName: "m", Version: "1.0.0",
		From: health.Healthy, To: health.Unhealthy, At: t0.Add(time.Hour), LastEvidence: t0, AlertKind: persistence.AlertUnhealthy}
}

func TestClaimShardBumpsTheEpoch(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	e1, err := d.store.ClaimShard(ctx, 3, "a")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := d.store.ClaimShard(ctx, 3, "b")
	if err != nil || e2 != e1+1 {
		t.Fatalf("second claim: epoch %d (first %d), %v", e2, e1, err)
	}
	owners, err := d.store.ShardOwners(ctx)
	if err != nil || len(owners) != shard.Count {
		t.Fatalf("owners: %d rows, %v", len(owners), err)
	}
	if o := owners[3]; o.Node != "b" || o.Epoch != e2 || o.ClaimedAt == nil {
		t.Fatalf("shard 3: %+v", o)
	}
	// A release under a stale epoch changes nothing; under the current one it frees the shard and ends the epoch.
	if ok, err := d.store.ReleaseShard(ctx, persistence.Fence{Shard: 3, Epoch: e1}); ok || err != nil {
		t.Fatalf("stale release: %v %v", ok, err)
	}
	if ok, err := d.store.ReleaseShard(ctx, persistence.Fence{Shard: 3, Epoch: e2}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	owners, _ = d.store.ShardOwners(ctx)
	if o := owners[3]; o.Node != "" || o.Epoch != e2+1 {
		t.Fatalf("released shard 3: %+v", o)
	}
	for _, bad := range []int{-1, shard.Count} {
		if _, err := d.store.ClaimShard(ctx, bad, "a"); err == nil {
			t.Fatalf("claimed shard %d", bad)
		}
	}
	if _, err := d.store.ClaimShard(ctx, 0, ""); err == nil {
		t.Fatal("claimed a shard for an empty node name")
	}
}

// A transition under a stale epoch fails with ErrFenced and writes no audit event, no status, no outbox
// row; the same transition under the current epoch lands.
func TestStaleTransitionIsFenced(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := d.server(d.tenant, "m", health.Healthy, 0)
	stale := d.claim(srv, "old")
	current := d.claim(srv, "new")
	audits := d.count(`SELECT count(*) FROM audit_events`)

	cmd := d.unhealthyCmd(srv)
	errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(cmd, stale)})
	if !errors.Is(errs[0], persistence.ErrFenced) || persistence.IsTransient(errs[0]) {
		t.Fatalf("stale transition: %v", errs[0])
	}
	if cmd.Applied {
		t.Fatal("a fenced command reported Applied")
	}
	if n := d.count(`SELECT count(*) FROM audit_events`); n != audits {
		t.Fatalf("%d audit events after a fenced transition, want %d", n, audits)
	}
	if n := d.count(`SELECT count(*) FROM alert_outbox`); n != 0 {
		t.Fatalf("%d outbox rows after a fenced transition", n)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE status = 'healthy'`); n != 1 {
		t.Fatal("a fenced transition changed the status")
	}

	errs = d.store.Commit(ctx, []persistence.Command{persistence.WithFence(cmd, current)})
	if errs[0] != nil || !cmd.Applied {
		t.Fatalf("current transition: %v applied=%v", errs[0], cmd.Applied)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE status = 'unhealthy'`); n != 1 {
		t.Fatal("the current epoch's transition did not land")
	}
	// The fenced attempt took no event number: the tenant's sequence has no gap.
	if n := d.count(`SELECT max(tenant_seq) - count(*) FROM audit_events WHERE tenant_id = $1`, d.tenant); n != 0 {
		t.Fatalf("tenant_seq has %d gaps", n)
	}
}

// A registration of a new server under a stale epoch creates nothing: no server, no tools, no audit
// event, no endpoint, and the tenant's server count is unchanged.
func TestStaleRegistrationWritesNothing(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := uuid.New()
	stale := d.claim(srv, "old")
	d.claim(srv, "new")
	reg := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: srv, TenantID: d.tenant, ModuleName: "fresh", Version: "1",
		Protocols: []string{"2025-11-25"}, Tools: []persistence.Tool{{Name: "echo", InputSchema: []byte(`{"type":"object"}`)}},
		Endpoint: "https://fresh.example/mcp", At: t0}
	errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(reg, stale)})
	if !errors.Is(errs[0], persistence.ErrFenced) {
		t.Fatalf("stale registration: %v", errs[0])
	}
	for _, table := range []string{"mcp_servers", "skill_registry", "audit_events", "server_config", "tool_changes"} {
		if n := d.count(`SELECT count(*) FROM ` + table); n != 0 {
			t.Errorf("%s: %d rows after a fenced registration", table, n)
		}
	}
	if n := d.count(`SELECT coalesce(sum(servers), 0) FROM tenant_server_counts`); n != 0 {
		t.Errorf("tenant server count %d after a fenced registration", n)
	}
}

// A group commit mixing a fenced command with valid ones commits the valid ones, in the same
// transaction (the fence does not abort the group), and answers ErrFenced for the fenced one only.
func TestFencedCommandFailsAloneInAGroup(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	a := d.server(d.tenant, "a", health.Healthy, 0)
	b := d.server(d.tenant, "b", health.Healthy, 1)
	if shard.Of(a) == shard.Of(b) {
		// Different shards make the test mean more; ids are random, so retry the test if this ever trips.
		t.Skip("both servers landed in one shard")
	}
	fa := d.claim(a, "n1")
	staleB := d.claim(b, "n1")
	d.claim(b, "n2")
	// The new server's shard is neither a's nor b's: claiming it must not renew (and so stale) a's fence.
	newSrv := uuid.New()
	for shard.Of(newSrv) == shard.Of(a) || shard.Of(newSrv) == shard.Of(b) {
		newSrv = uuid.New()
	}
	reg := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: newSrv, TenantID: d.tenant, ModuleName: "c", Version: "1",
		Protocols: []string{"2025-11-25"}, At: t0}
	ca, cb := d.unhealthyCmd(a), d.unhealthyCmd(b)
	errs := d.store.Commit(ctx, []persistence.Command{
		persistence.WithFence(ca, fa), persistence.WithFence(cb, staleB), persistence.WithFence(reg, d.claim(newSrv, "n1")),
	})
	if errs[0] != nil || !errors.Is(errs[1], persistence.ErrFenced) || errs[2] != nil {
		t.Fatalf("errs = %v", errs)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE status = 'unhealthy'`); n != 1 {
		t.Fatalf("%d unhealthy servers, want 1 (a)", n)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = $1`, newSrv); n != 1 {
		t.Fatal("the registration after the fenced command did not land")
	}
	// One transaction: a's transition and the registration share an xmin.
	if n := d.count(`SELECT count(DISTINCT xmin::text) FROM audit_events WHERE event_id = ANY($1)`, []uuid.UUID{ca.EventID, reg.EventID}); n != 1 {
		t.Fatalf("the group was split into %d transactions", n)
	}
}

// A claim and a write under the old epoch serialise both ways: a claim waits for a write that passed the
// fence (which lands, before the claim), and a write that reaches the fence while a claim is in flight
// waits for it and is then fenced.
func TestClaimAndWriteSerialise(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := d.server(d.tenant, "m", health.Healthy, 0)
	f1 := d.claim(srv, "n1")

	// 1. A write in flight under f1 (held after its fence by a lock on the server's row) holds the claim back.
	hold, err := d.owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Rollback(ctx) }) // a failed test must not leave the write blocked
	if _, err := hold.Exec(ctx, `SELECT 1 FROM mcp_servers WHERE server_id = $1 FOR UPDATE`, srv); err != nil {
		t.Fatal(err)
	}
	cmd := d.unhealthyCmd(srv)
	written := make(chan error, 1)
	go func() { written <- d.store.Commit(ctx, []persistence.Command{persistence.WithFence(cmd, f1)})[0] }()
	d.waitForLockWait(`/* transition set */%`) // its UPDATE waits for the row
	claimed := make(chan int64, 1)
	go func() {
		e, err := d.store.ClaimShard(ctx, f1.Shard, "n2")
		if err != nil {
			t.Error(err)
		}
		claimed <- e
	}()
	d.waitForLockWait(`UPDATE shard_owners%`)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatalf("the write that passed the fence before the claim: %v", err)
	}
	f2 := persistence.Fence{Shard: f1.Shard, Epoch: <-claimed}

	// 2. A claim in flight holds back a write under the epoch it ends; the write is fenced once it commits.
	claim, err := d.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = claim.Rollback(ctx) })
	if _, err := claim.Exec(ctx, `UPDATE shard_owners SET node = 'n3', epoch = epoch + 1 WHERE shard = $1`, f2.Shard); err != nil {
		t.Fatal(err)
	}
	back := &persistence.TransitionCmd{EventID: uuid.New(), TenantID: d.tenant, ServerID: srv, ModuleName: "m", Version: "1.0.0",
		From: health.Unhealthy, To: health.Healthy, At: t0.Add(2 * time.Hour)}
	go func() { written <- d.store.Commit(ctx, []persistence.Command{persistence.WithFence(back, f2)})[0] }()
	d.waitForLockWait(`/* transition set */%`) // its fence check waits for the claim
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-written; !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("a write under the epoch a committed claim ended: %v", err)
	}
	if n := d.count(`SELECT count(*) FROM audit_events WHERE event_id = $1`, back.EventID); n != 0 {
		t.Fatal("the fenced write landed after the claim")
	}
}

// waitForLockWait waits until a session of the database is waiting for a lock while running a
// statement like pattern.
func (d *dash) waitForLockWait(pattern string) {
	d.t.Helper()
	wait.For(d.t, "a session waiting for a lock in "+pattern, 10*time.Second, func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE $1`, pattern) > 0
	})
}

// Heartbeat stamps and skill cascades under a stale fence are dropped; those under the current one land.
func TestStaleStampsAndCascadesAreDropped(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	a := d.server(d.tenant, "a", health.Healthy, 0)
	b := d.server(d.tenant, "b", health.Healthy, 1)
	fa := d.claim(a, "n1")
	staleB := d.claim(b, "n1")
	if shard.Of(a) == shard.Of(b) {
		fa = d.claim(a, "n2") // one shard: a's current epoch is the one after b's stale one
	} else {
		d.claim(b, "n2")
	}
	at := t0.Add(time.Hour)
	stale, err := d.store.StampHeartbeatsFenced(ctx, []persistence.Stamp{
		{TenantID: d.tenant, ServerID: a, At: at, Fence: fa},
		{TenantID: d.tenant, ServerID: b, At: at, Fence: staleB},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 || stale[0] != staleB {
		t.Fatalf("stale fences %v, want [%v]", stale, staleB)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE last_heartbeat_at = $1`, at); n != 1 {
		t.Fatalf("%d stamps landed, want 1", n)
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = $1 AND last_heartbeat_at = $2`, a, at); n != 1 {
		t.Fatal("the current epoch's stamp did not land")
	}

	for i, srv := range []uuid.UUID{a, b} {
		d.exec(d.tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available)
			VALUES ($1, $2, $3, $4, '{}', true, true)`, uuid.New(), d.tenant, srv, []string{"x", "y"}[i])
	}
	// A transition's cascade is part of its statement: under a stale fence neither lands.
	unavailable := false
	ca, cb := d.unhealthyCmd(a), d.unhealthyCmd(b)
	ca.Skills, cb.Skills = &unavailable, &unavailable
	errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(ca, fa), persistence.WithFence(cb, staleB)})
	if errs[0] != nil || !errors.Is(errs[1], persistence.ErrFenced) {
		t.Fatalf("transitions: %v", errs)
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1 AND NOT available`, a); n != 1 {
		t.Fatal("the current epoch's cascade did not land")
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1 AND available`, b); n != 1 {
		t.Fatal("the stale epoch's cascade landed")
	}
}

// Every table of the schema has the a_fence trigger, so a fenced command writes nothing wherever it
// writes; a table added later without it fails here.
func TestFenceTriggerOnEveryTable(t *testing.T) {
	d := newDash(t)
	rows, err := d.owner.Query(context.Background(), `SELECT c.relname::text FROM pg_class c
		WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'mcp_servers'::regclass)
		  AND c.relkind IN ('r', 'p') AND c.relname NOT IN ('shard_owners', 'cluster_nodes', 'goose_db_version')
		  AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'a_fence')`)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("tables without the a_fence trigger (see migration 0016): %v", missing)
	}
}

// A fenced command's statements see its fence named in mcpfleet.fence ("shard:epoch"), and the next
// step of the same group commit sees it cleared: a trigger (the chaos suite's owner check) can record
// which fence each row was written under.
func TestFencedWritesNameTheirFence(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	if _, err := d.owner.Exec(ctx, `
		CREATE TABLE fence_seen (server_id UUID, kind TEXT, fence TEXT);
		CREATE FUNCTION fence_seen_record() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
			INSERT INTO fence_seen VALUES (NEW.server_id, NEW.kind, coalesce(current_setting('mcpfleet.fence', true), ''));
			RETURN NULL;
		END $$;
		CREATE TRIGGER zz_fence_seen AFTER INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION fence_seen_record();`); err != nil {
		t.Fatal(err)
	}
	fenced := d.server(d.tenant, "m1", health.Healthy, 0)
	plain := d.server(d.tenant, "m2", health.Healthy, 0)
	f := d.claim(fenced, "n1")
	errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(d.unhealthyCmd(fenced), f), d.unhealthyCmd(plain)})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	want := map[uuid.UUID]string{fenced: fmt.Sprintf("%d:%d", f.Shard, f.Epoch), plain: ""}
	rows, err := d.owner.Query(ctx, `SELECT server_id, fence FROM fence_seen WHERE kind = 'mcp.server.unhealthy'`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var id uuid.UUID
		var fence string
		if err := rows.Scan(&id, &fence); err != nil {
			t.Fatal(err)
		}
		seen++
		if w, ok := want[id]; !ok || fence != w {
			t.Errorf("server %s written under fence %q, want %q", id, fence, w)
		}
	}
	if rows.Err() != nil || seen != 2 {
		t.Fatalf("%d rows recorded (%v), want 2", seen, rows.Err())
	}
}

// The audit chain follows the row: a transition decided from a status that is no longer the row's (a
// commit whose answer was lost to a killed actor) is recorded from the row's status, alert included;
// a transition to the status the row already has writes nothing and is not Applied.
func TestTransitionFromIsTheRowsStatus(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	srv := d.server(d.tenant, "m", health.Degraded, 0) // the degraded commit landed; its decider did not hear
	fence := d.claim(srv, "n")
	cmd := d.unhealthyCmd(srv) // decided as healthy → unhealthy
	if errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(cmd, fence)}); errs[0] != nil || !cmd.Applied {
		t.Fatalf("transition: %v applied=%v", errs[0], cmd.Applied)
	}
	var from, alertFrom string
	if err := d.owner.QueryRow(ctx, `SELECT from_status FROM audit_events WHERE event_id = $1`, cmd.EventID).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if err := d.owner.QueryRow(ctx, `SELECT payload->>'from' FROM alert_outbox WHERE event_id = $1`, cmd.EventID).Scan(&alertFrom); err != nil {
		t.Fatal(err)
	}
	if from != "degraded" || alertFrom != "degraded" {
		t.Fatalf("recorded from %q, alert from %q; want the row's status degraded", from, alertFrom)
	}
	audits := d.count(`SELECT count(*) FROM audit_events`)
	again := d.unhealthyCmd(srv) // a new decision to the status the row has
	if errs := d.store.Commit(ctx, []persistence.Command{persistence.WithFence(again, fence)}); errs[0] != nil || again.Applied {
		t.Fatalf("transition to the row's own status: %v applied=%v", errs[0], again.Applied)
	}
	if n := d.count(`SELECT count(*) FROM audit_events`); n != audits {
		t.Fatalf("%d audit events after a transition to the row's own status, want %d", n, audits)
	}
	if n := d.count(`SELECT count(*) FROM alert_outbox WHERE event_id = $1`, again.EventID); n != 0 {
		t.Fatal("an outbox row for a transition that did not happen")
	}
}

// ServerOwners lists every server of the tenant it is asked for, with its module and origin, and none of
// another tenant's (row-level security).
func TestServerOwnersListsTheTenantsOwn(t *testing.T) {
	d := newDash(t)
	other := d.newTenant("other")
	mine := map[uuid.UUID]bool{d.server(d.tenant, "a", health.Healthy, 0): true, d.server(d.tenant, "b", health.Degraded, 1): true}
	theirs := d.server(other, "c", health.Healthy, 2)
	got := map[uuid.UUID]string{}
	err := d.store.ServerOwners(context.Background(), d.tenant, func(id uuid.UUID, module string, origin persistence.Origin) {
		got[id] = module + "/" + string(origin)
	})
	if err != nil || len(got) != len(mine) {
		t.Fatalf("owners %v, %v; want the tenant's %d servers", got, err, len(mine))
	}
	for id := range mine {
		if got[id] == "" || got[id][2:] != string(persistence.OriginModule) {
			t.Fatalf("server %s: %q", id, got[id])
		}
	}
	if _, ok := got[theirs]; ok {
		t.Fatal("another tenant's server listed")
	}
}
