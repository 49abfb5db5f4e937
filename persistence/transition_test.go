package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// One group commit of fenced transitions, set-based: many servers' transitions, two of one server
// (degraded, then unhealthy: applied in order, the second from the first's status), one to the status the
// row already has, one already applied (its event id again), one under a stale fence, a command between a
// server's two transitions and a registration reviving a server before its transition. Each gets the
// outcome it gets alone; the group is one batch; the audit chain of every server holds; an unhealthy
// transition's alert names the row's status as "from".
func TestTransitionSetMixedGroup(t *testing.T) {
	var batches batchCounter
	d := newDashWith(t, persistence.Options{Tracer: &batches})
	ctx := context.Background()
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	fenced := func(c persistence.Command, srv uuid.UUID) persistence.Command {
		return persistence.WithFence(c, fences[shard.Of(srv)])
	}
	tr := func(srv uuid.UUID, module string, from, to health.Status, min int) *persistence.TransitionCmd {
		c := &persistence.TransitionCmd{EventID: uuid.New(), TenantID: d.tenant, ServerID: srv, ModuleName: module, Version: "1.0.0",
			From: from, To: to, At: t0.Add(time.Duration(min) * time.Minute), LastEvidence: t0}
		if to == health.Unhealthy {
			c.AlertKind = persistence.AlertUnhealthy
		}
		return c
	}
	var many []uuid.UUID
	for i := range 20 {
		many = append(many, d.server(d.tenant, fmt.Sprintf("many-%02d", i), health.Healthy, i))
	}
	twice := d.server(d.tenant, "twice", health.Healthy, 30)
	same := d.server(d.tenant, "same", health.Degraded, 31)
	again := d.server(d.tenant, "again", health.Healthy, 32)
	stale := d.server(d.tenant, "stale", health.Healthy, 33)
	revived := d.server(d.tenant, "revived", health.Deregistered, 34)

	done := tr(again, "again", health.Healthy, health.Degraded, 1)
	if errs := d.store.Commit(ctx, []persistence.Command{fenced(done, again)}); errs[0] != nil || !done.Applied {
		t.Fatalf("first application: %v, applied %v", errs[0], done.Applied)
	}
	// The stale fence: the shard claimed again after the fence was taken.
	staleFence := fences[shard.Of(stale)]
	epoch, err := d.store.ClaimShard(ctx, staleFence.Shard, "n2")
	if err != nil {
		t.Fatal(err)
	}
	fences[staleFence.Shard] = persistence.Fence{Shard: staleFence.Shard, Epoch: epoch} // the others of that shard write under the new owner

	status := func(srv uuid.UUID) string {
		var s string
		if err := d.owner.QueryRow(ctx, `SELECT status FROM mcp_servers WHERE server_id = $1`, srv).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var cmds []persistence.Command
	var manyCmds []*persistence.TransitionCmd
	for i, srv := range many {
		c := tr(srv, fmt.Sprintf("many-%02d", i), health.Healthy, health.Unhealthy, 2)
		manyCmds = append(manyCmds, c)
		cmds = append(cmds, fenced(c, srv))
	}
	first, second := tr(twice, "twice", health.Healthy, health.Degraded, 2), tr(twice, "twice", health.Degraded, health.Unhealthy, 3)
	noop := tr(same, "same", health.Healthy, health.Degraded, 2)
	repeat := *done
	repeat.Applied = false
	staleCmd := tr(stale, "stale", health.Healthy, health.Degraded, 2)
	reg := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: revived, TenantID: d.tenant, ModuleName: "revived", Version: "1.0.0",
		Protocols: []string{"2025-11-25"}, At: t0.Add(4 * time.Minute)}
	afterReg := tr(revived, "revived", health.Healthy, health.Degraded, 5)
	between := tr(twice, "twice", health.Healthy, health.Degraded, 2) // unfenced: applied alone, a no-op after first
	cmds = append(cmds, fenced(first, twice), between, fenced(second, twice), fenced(noop, same),
		fenced(&repeat, again), persistence.WithFence(staleCmd, staleFence), fenced(reg, revived), fenced(afterReg, revived))
	mark := d.count(`SELECT coalesce(max(tenant_seq), 0) FROM audit_events WHERE tenant_id = $1`, d.tenant)
	last := map[uuid.UUID]string{}
	for _, srv := range append(many, twice, same, again, stale, revived) {
		last[srv] = status(srv)
	}
	before := batches.n.Load()
	errs := d.store.Commit(ctx, cmds)
	if n := batches.n.Load() - before; n != 1 {
		t.Errorf("the group took %d batches, want 1 (no command applied alone)", n)
	}
	for i, err := range errs {
		if i == len(cmds)-3 {
			if !errors.Is(err, persistence.ErrFenced) {
				t.Errorf("the stale fence's transition: %v, want ErrFenced", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("command %d: %v", i, err)
		}
	}
	for _, c := range manyCmds {
		if !c.Applied {
			t.Errorf("%s not applied", c.ModuleName)
		}
	}
	if !first.Applied || !second.Applied || noop.Applied || repeat.Applied || staleCmd.Applied || !afterReg.Applied {
		t.Errorf("applied: first %v second %v (want both), noop %v repeat %v stale %v (want none), after registration %v (want it)",
			first.Applied, second.Applied, noop.Applied, repeat.Applied, staleCmd.Applied, afterReg.Applied)
	}
	for srv, want := range map[uuid.UUID]health.Status{many[0]: health.Unhealthy, twice: health.Unhealthy, same: health.Degraded,
		again: health.Degraded, stale: health.Healthy, revived: health.Degraded} {
		if got := status(srv); got != string(want) {
			t.Errorf("server %s is %s, want %s", srv, got, want)
		}
	}
	// Every server's chain: each event's from_status is the status before it.
	rows, err := d.owner.Query(ctx, `SELECT server_id, coalesce(from_status, ''), status FROM audit_events
		WHERE tenant_id = $1 AND tenant_seq > $2 ORDER BY tenant_seq`, d.tenant, mark)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var srv uuid.UUID
		var from, to string
		if err := rows.Scan(&srv, &from, &to); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[srv]; ok && from != prev {
			t.Errorf("server %s: event from %q after status %q", srv, from, prev)
		}
		last[srv] = to
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var alertFrom string
	if err := d.owner.QueryRow(ctx, `SELECT payload->>'from' FROM alert_outbox WHERE event_id = $1`, second.EventID).Scan(&alertFrom); err != nil {
		t.Fatal(err)
	}
	if alertFrom != string(health.Degraded) {
		t.Errorf("the second transition's alert is from %q, want degraded", alertFrom)
	}
	if n := d.count(`SELECT count(*) FROM alert_outbox WHERE tenant_id = $1`, d.tenant); n != len(many)+1 {
		t.Errorf("%d alerts, want %d", n, len(many)+1)
	}
}

// A transition set's event for a server the tenant has no row for fails the statement; Commit then applies
// the group's commands one by one, and only that command fails (ErrNotFound), as it does alone.
func TestTransitionSetMissingServerFailsAlone(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	known := d.server(d.tenant, "known", health.Healthy, 0)
	ghost := uuid.New()
	cmds := []persistence.Command{
		persistence.WithFence(d.unhealthyCmd(known), fences[shard.Of(known)]),
		persistence.WithFence(d.unhealthyCmd(ghost), fences[shard.Of(ghost)]),
	}
	errs := d.store.Commit(ctx, cmds)
	if errs[0] != nil {
		t.Errorf("the known server's transition: %v", errs[0])
	}
	if !errors.Is(errs[1], persistence.ErrNotFound) {
		t.Errorf("the missing server's transition: %v, want ErrNotFound", errs[1])
	}
}

// A committed deregistration returns the server's capability advertisement, alone and in a set, so
// its answer needs no read of the row; another transition, or a deregistration already applied, none.
func TestDeregistrationReturnsTheAdvertisement(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	alone, inSet, sick := d.server(d.tenant, "a", health.Healthy, 0), d.server(d.tenant, "b", health.Healthy, 1), d.server(d.tenant, "c", health.Healthy, 2)
	const caps = `{"tools": [{"name": "ping"}]}` // as jsonb prints it
	if _, err := d.owner.Exec(ctx, `UPDATE mcp_servers SET capability_advertisement = $1::jsonb`, caps); err != nil {
		t.Fatal(err)
	}
	deregistration := func(srv uuid.UUID) *persistence.TransitionCmd {
		c := d.unhealthyCmd(srv)
		c.To, c.AlertKind = health.Deregistered, ""
		return c
	}
	a, b, c := deregistration(alone), deregistration(inSet), d.unhealthyCmd(sick)
	if errs := d.store.Commit(ctx, []persistence.Command{a}); errs[0] != nil { // unfenced: applied alone
		t.Fatal(errs[0])
	}
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	set := []persistence.Command{persistence.WithFence(b, fences[shard.Of(inSet)]), persistence.WithFence(c, fences[shard.Of(sick)])}
	for i, err := range d.store.Commit(ctx, set) {
		if err != nil {
			t.Fatalf("set command %d: %v", i, err)
		}
	}
	if string(a.Advertisement) != caps || string(b.Advertisement) != caps {
		t.Fatalf("deregistrations returned %q (alone) and %q (in a set), want %q", a.Advertisement, b.Advertisement, caps)
	}
	if c.Advertisement != nil || !c.Applied {
		t.Fatalf("a transition to unhealthy: applied %v, advertisement %q", c.Applied, c.Advertisement)
	}
	again := *a
	again.Advertisement = nil
	if errs := d.store.Commit(ctx, []persistence.Command{&again}); errs[0] != nil || again.Applied || again.Advertisement != nil {
		t.Fatalf("a replayed deregistration: %v, applied %v, advertisement %q", errs[0], again.Applied, again.Advertisement)
	}
}

// A transition's Skills cascade is written by its own statement, alone and in a set: an applied
// transition sets its server's skills (never an orphaned one available), nil Skills writes none, and a
// transition that is not applied (the row has its status already) writes none either.
func TestTransitionCascadesSkills(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	alone, inSet, other, untouched := d.server(d.tenant, "alone", health.Healthy, 0), d.server(d.tenant, "in-set", health.Healthy, 1),
		d.server(d.tenant, "other", health.Healthy, 2), d.server(d.tenant, "untouched", health.Healthy, 3)
	servers := []uuid.UUID{alone, inSet, other, untouched}
	for _, srv := range servers {
		d.exec(d.tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available, orphaned_at)
			VALUES ($1, $2, $3, 'live', '{}', true, true, NULL), ($4, $2, $3, 'gone', '{}', true, false, $5)`,
			uuid.New(), d.tenant, srv, uuid.New(), t0)
	}
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	available := func(srv uuid.UUID) string {
		var s string
		if err := d.owner.QueryRow(ctx, `SELECT string_agg(name || '=' || available::text, ',' ORDER BY name)
			FROM skill_registry WHERE server_id = $1`, srv).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	commit := func(cmds ...persistence.Command) {
		t.Helper()
		for i, err := range d.store.Commit(ctx, cmds) {
			if err != nil {
				t.Fatalf("command %d: %v", i, err)
			}
		}
	}
	move := func(srv uuid.UUID, from, to health.Status, skills *bool) *persistence.TransitionCmd {
		c := d.unhealthyCmd(srv)
		c.From, c.To, c.Skills, c.AlertKind = from, to, skills, ""
		return c
	}
	off, on := false, true
	commit(move(alone, health.Healthy, health.Unhealthy, &off), // unfenced: alone
		persistence.WithFence(move(inSet, health.Healthy, health.Unhealthy, &off), fences[shard.Of(inSet)]),
		persistence.WithFence(move(other, health.Healthy, health.Unhealthy, &off), fences[shard.Of(other)]),
		move(untouched, health.Healthy, health.Degraded, nil))
	for srv, want := range map[uuid.UUID]string{alone: "gone=false,live=false", inSet: "gone=false,live=false",
		other: "gone=false,live=false", untouched: "gone=false,live=true"} {
		if got := available(srv); got != want {
			t.Errorf("after unhealthy: skills of %s are %s, want %s", srv, got, want)
		}
	}
	// other is unhealthy already: its "recovery" to unhealthy is no transition and cascades nothing.
	commit(move(alone, health.Unhealthy, health.Healthy, &on),
		persistence.WithFence(move(inSet, health.Unhealthy, health.Healthy, &on), fences[shard.Of(inSet)]),
		persistence.WithFence(move(other, health.Unhealthy, health.Unhealthy, &on), fences[shard.Of(other)]))
	for srv, want := range map[uuid.UUID]string{alone: "gone=false,live=true", inSet: "gone=false,live=true",
		other: "gone=false,live=false"} {
		if got := available(srv); got != want {
			t.Errorf("after recovery: skills of %s are %s, want %s", srv, got, want)
		}
	}
}

// A group commit of two tenants' transitions cascades each to its own tenant's skills, and a transition
// naming another tenant's server (its own tenant id, the other's server id) is not found and cascades
// nothing: the cascade runs under the tenant of its transition, like the rest of the statement.
func TestTransitionCascadeStaysInItsTenant(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	other := d.newTenant("other")
	mine, theirs := d.server(d.tenant, "m", health.Healthy, 0), d.server(other, "m", health.Healthy, 1)
	for tenant, srv := range map[uuid.UUID]uuid.UUID{d.tenant: mine, other: theirs} {
		d.exec(tenant, `INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available)
			VALUES ($1, $2, $3, 'tool', '{}', true, true)`, uuid.New(), tenant, srv)
	}
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	off, on := false, true
	move := func(tenant, srv uuid.UUID, to health.Status, skills *bool) persistence.Command {
		c := d.unhealthyCmd(srv)
		c.TenantID, c.To, c.Skills, c.AlertKind = tenant, to, skills, ""
		return persistence.WithFence(c, fences[shard.Of(srv)])
	}
	available := func(srv uuid.UUID) bool {
		var v bool
		if err := d.owner.QueryRow(ctx, `SELECT available FROM skill_registry WHERE server_id = $1`, srv).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i, err := range d.store.Commit(ctx, []persistence.Command{move(d.tenant, mine, health.Unhealthy, &off), move(other, theirs, health.Unhealthy, &off)}) {
		if err != nil {
			t.Fatalf("tenant %d's transition: %v", i, err)
		}
	}
	if available(mine) || available(theirs) {
		t.Fatalf("after both tenants' transitions: skills available %v (mine), %v (theirs), want false, false", available(mine), available(theirs))
	}
	errs := d.store.Commit(ctx, []persistence.Command{move(d.tenant, theirs, health.Healthy, &on)})
	if !errors.Is(errs[0], persistence.ErrNotFound) {
		t.Fatalf("a transition of another tenant's server: %v, want ErrNotFound", errs[0])
	}
	if available(theirs) {
		t.Fatal("a transition of another tenant's server made its skills available")
	}
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE server_id = $1 AND status = 'unhealthy'`, theirs); n != 1 {
		t.Fatal("a transition of another tenant's server changed its status")
	}
}
