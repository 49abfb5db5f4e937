package persistence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// traceOf makes a 32-hex trace id that names its module.
func traceOf(module string) string {
	return fmt.Sprintf("%032x", []byte(module))[:32]
}

// One group commit of registrations, of two tenants, set-based: new servers, re-registrations (a changed
// enabled tool, a vanished tool, a moved endpoint), the same module twice, a stale fence, a module key
// on an administrator's server, an admin key on it, and a new server past the limit. Each command gets
// the outcome it gets alone, in one batch and one transaction; the refused ones write nothing; the audit
// events are numbered in command order without gaps and carry the commands' trace ids; the audit insert
// sees the fences that passed named in mcpfleet.fence.
func TestRegisterSetMixedGroup(t *testing.T) {
	var batches batchCounter
	d := newDashWith(t, persistence.Options{MaxServersPerTenant: 3, Tracer: &batches})
	ctx := context.Background()
	if _, err := d.owner.Exec(ctx, `
		CREATE TABLE fence_seen (event_id UUID, fence TEXT);
		CREATE FUNCTION fence_seen_record() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
			INSERT INTO fence_seen VALUES (NEW.event_id, coalesce(current_setting('mcpfleet.fence', true), ''));
			RETURN NULL;
		END $$;
		CREATE TRIGGER zz_fence_seen AFTER INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION fence_seen_record();`); err != nil {
		t.Fatal(err)
	}
	a, b := d.tenant, d.newTenant("other")
	fences, err := d.store.ClaimShards(ctx, shard.All(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	echo := func(desc string) []persistence.Tool {
		return []persistence.Tool{{Name: "echo", Description: desc, InputSchema: []byte(`{"type":"object"}`)}}
	}
	reg := func(tenant uuid.UUID, module string, tools []persistence.Tool, endpoint string) *persistence.RegisterCmd {
		return &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: tenant, ModuleName: module,
			Version: "1", Protocols: []string{"2025-11-25", "2025-06-18"}, Capabilities: []byte(`{"tools":{}}`), Tools: tools,
			Endpoint: endpoint, TraceID: traceOf(module), At: t0, ByKey: uuid.New()}
	}
	fenced := func(c *persistence.RegisterCmd) persistence.Command {
		return persistence.WithFence(c, fences[shard.Of(c.ServerID)])
	}
	commit := func(cmds ...persistence.Command) []error {
		t.Helper()
		before := batches.n.Load()
		errs := d.store.Commit(ctx, cmds)
		if n := batches.n.Load() - before; n != 1 {
			t.Errorf("the group took %d batches, want 1 (no per-command retries)", n)
		}
		return errs
	}
	kept := reg(a, "kept", append(echo("v1"), persistence.Tool{Name: "gone", InputSchema: []byte(`{}`)}), "")
	moved := reg(a, "moved", echo("v1"), "https://one.example/mcp")
	cfg := persistence.DefaultServerConfig(b, uuid.New())
	adminSrv := &persistence.ConfigureCmd{EventID: uuid.New(), ServerID: cfg.ServerID, TenantID: b, ModuleName: "b-admin", Version: "1", Config: cfg, At: t0}
	for i, err := range commit(fenced(kept), fenced(moved), adminSrv) {
		if err != nil {
			t.Fatalf("setup %d: %v", i, err)
		}
	}
	if _, err := d.owner.Exec(ctx, `UPDATE skill_registry SET enabled = true WHERE name = 'echo'`); err != nil {
		t.Fatal(err)
	}

	later := t0.Add(time.Minute)
	n1 := reg(a, "n1", echo("v1"), "")
	kept2 := reg(a, "kept", echo("v2"), "") // echo changed, gone vanished
	stale := reg(a, "f1", echo("v1"), "")
	staleFence := fences[shard.Of(stale.ServerID)]
	epoch, err := d.store.ClaimShard(ctx, staleFence.Shard, "n2")
	if err != nil {
		t.Fatal(err)
	}
	fences[staleFence.Shard] = persistence.Fence{Shard: staleFence.Shard, Epoch: epoch}
	notOwned := reg(b, "b-admin", echo("mine now"), "https://evil.example/mcp")
	b1 := reg(b, "b1", nil, "")
	n2 := reg(a, "n2", nil, "")
	moved2 := reg(a, "moved", echo("v1"), "https://two.example/mcp")
	kept3 := reg(a, "kept", echo("v2"), "") // the same module again: a set of its own, after kept2
	byAdmin := reg(b, "b-admin", echo("admin's"), "https://admin.example/mcp")
	byAdmin.ByAdmin = true
	cmds := []*persistence.RegisterCmd{n1, kept2, stale, notOwned, b1, n2, moved2, kept3, byAdmin}
	group := make([]persistence.Command, len(cmds))
	for i, c := range cmds {
		c.At = later.Add(time.Duration(i) * time.Millisecond)
		group[i] = fenced(c)
	}
	group[2] = persistence.WithFence(stale, staleFence)
	errs := commit(group...)
	want := []error{nil, nil, persistence.ErrFenced, persistence.ErrNotOwned, nil, persistence.ErrServerLimit, nil, nil, nil}
	for i, w := range want {
		if (w == nil) != (errs[i] == nil) || (w != nil && !errors.Is(errs[i], w)) {
			t.Errorf("command %d (%s): %v, want %v", i, cmds[i].ModuleName, errs[i], w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Results, as a command alone sets them.
	if !n1.Created || n1.Server.ServerID != n1.ServerID || n1.Server.Status != health.Healthy || n1.From != "" ||
		n1.Server.TraceID != traceOf("n1") || strings.Join(n1.Server.SupportedProtocols, ",") != "2025-11-25,2025-06-18" {
		t.Errorf("n1: created %v, %+v, from %q", n1.Created, n1.Server, n1.From)
	}
	if kept2.Created || kept2.Server.ServerID != kept.Server.ServerID || kept2.From != health.Healthy ||
		kept2.ChangedTools != 1 || kept2.DisabledTools != 1 {
		t.Errorf("kept again: created %v, id %s (want %s), from %q, changed %d disabled %d", kept2.Created, kept2.Server.ServerID,
			kept.Server.ServerID, kept2.From, kept2.ChangedTools, kept2.DisabledTools)
	}
	if kept3.Created || kept3.Server.ServerID != kept.Server.ServerID || kept3.ChangedTools != 0 {
		t.Errorf("kept a third time: created %v, changed %d", kept3.Created, kept3.ChangedTools)
	}
	if moved2.MovedTools != 1 || moved2.ChangedTools != 0 {
		t.Errorf("moved: %d tools disabled by the move, %d changed; want 1, 0", moved2.MovedTools, moved2.ChangedTools)
	}
	if !b1.Created || byAdmin.Created || byAdmin.Server.ServerID != cfg.ServerID {
		t.Errorf("b1 created %v; by admin: created %v, id %s", b1.Created, byAdmin.Created, byAdmin.Server.ServerID)
	}
	for _, c := range []*persistence.RegisterCmd{stale, notOwned, n2} {
		if c.Created || c.Server.ServerID != uuid.Nil {
			t.Errorf("refused %s has results: %+v", c.ModuleName, c.Server)
		}
	}

	// What the refused commands did not write.
	if n := d.count(`SELECT count(*) FROM mcp_servers WHERE module_name IN ('f1', 'n2')`); n != 0 {
		t.Errorf("%d servers of refused registrations", n)
	}
	if n := d.count(`SELECT count(*) FROM audit_events WHERE event_id = ANY($1)`, []uuid.UUID{stale.EventID, notOwned.EventID, n2.EventID}); n != 0 {
		t.Errorf("%d audit events of refused registrations", n)
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1`, cfg.ServerID); n != 0 {
		t.Errorf("the administrator's server has %d skills written by registrations", n)
	}
	if n := d.count(`SELECT count(*) FROM server_config WHERE server_id = $1 AND endpoint IS NOT NULL`, cfg.ServerID); n != 0 {
		t.Error("a registration wrote the administrator's endpoint")
	}
	for tenant, want := range map[uuid.UUID]int{a: 3, b: 2} {
		if n := d.count(`SELECT count(*) FROM mcp_servers WHERE tenant_id = $1`, tenant); n != want {
			t.Errorf("tenant %s: %d servers, want %d", tenant, n, want)
		}
		if n := d.count(`SELECT servers FROM tenant_server_counts WHERE tenant_id = $1`, tenant); n != want {
			t.Errorf("tenant %s: counted %d servers, want %d", tenant, n, want)
		}
	}

	// The rug-pull defence: the changed enabled tool is disabled and recorded; the vanished one orphaned;
	// the moved server's enabled tool disabled and the move recorded.
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1 AND name = 'echo' AND NOT enabled AND changed_at = $2
			AND previous_definition->>'description' = 'v1' AND description = 'v2'`, kept.Server.ServerID, kept2.At); n != 1 {
		t.Error("kept's changed tool was not disabled with its previous definition")
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1 AND name = 'gone' AND orphaned_at = $2 AND NOT available`,
		kept.Server.ServerID, kept2.At); n != 1 {
		t.Error("kept's vanished tool was not orphaned")
	}
	if n := d.count(`SELECT count(*) FROM tool_changes WHERE server_id = $1 AND cause = 'definition' AND was_enabled
			AND trace_id = $2 AND changed_by = $3`, kept.Server.ServerID, traceOf("kept"), kept2.ByKey); n != 1 {
		t.Errorf("kept's change: %d tool_changes rows, want 1", n)
	}
	if n := d.count(`SELECT count(*) FROM tool_changes WHERE server_id = $1 AND cause = 'endpoint' AND was_enabled
			AND old_endpoint = 'https://one.example/mcp' AND new_endpoint = 'https://two.example/mcp'`, moved.Server.ServerID); n != 1 {
		t.Errorf("the move: %d tool_changes rows, want 1", n)
	}
	if n := d.count(`SELECT count(*) FROM skill_registry WHERE server_id = $1 AND enabled`, moved.Server.ServerID); n != 0 {
		t.Error("the moved server's tool is still enabled")
	}

	// The audit events: in one transaction, numbered in command order with no gap, with their trace ids
	// and the fences that passed.
	applied := []*persistence.RegisterCmd{n1, kept2, b1, moved2, kept3, byAdmin}
	ids := make([]uuid.UUID, len(applied))
	for i, c := range applied {
		ids[i] = c.EventID
	}
	if n := d.count(`SELECT count(DISTINCT xmin::text) FROM audit_events WHERE event_id = ANY($1)`, ids); n != 1 {
		t.Errorf("the group was split into %d transactions", n)
	}
	rows, err := d.owner.Query(ctx, `SELECT e.event_id, e.tenant_id, e.tenant_seq, coalesce(e.trace_id, ''), e.from_status, f.fence
		FROM audit_events e JOIN fence_seen f USING (event_id) WHERE e.event_id = ANY($1) ORDER BY e.seq`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var order []uuid.UUID
	last := map[uuid.UUID]int64{} // each tenant's last number before the group
	for _, tenant := range []uuid.UUID{a, b} {
		last[tenant] = int64(d.count(`SELECT coalesce(max(tenant_seq), 0) FROM audit_events WHERE tenant_id = $1 AND NOT (event_id = ANY($2))`, tenant, ids))
	}
	byEvent := map[uuid.UUID]*persistence.RegisterCmd{}
	for _, c := range applied {
		byEvent[c.EventID] = c
	}
	for rows.Next() {
		var id, tenant uuid.UUID
		var seq int64
		var traceID, fence string
		var from *string
		if err := rows.Scan(&id, &tenant, &seq, &traceID, &from, &fence); err != nil {
			t.Fatal(err)
		}
		c := byEvent[id]
		order = append(order, id)
		if seq != last[tenant]+1 {
			t.Errorf("%s: tenant_seq %d, want %d", c.ModuleName, seq, last[tenant]+1)
		}
		last[tenant] = seq
		if traceID != c.TraceID {
			t.Errorf("%s: audit trace id %q, want %q", c.ModuleName, traceID, c.TraceID)
		}
		f := fences[shard.Of(c.ServerID)] // the fence the command carried
		if !strings.Contains(" "+fence+" ", fmt.Sprintf(" %d:%d ", f.Shard, f.Epoch)) ||
			strings.Contains(" "+fence+" ", fmt.Sprintf(" %d:%d ", staleFence.Shard, staleFence.Epoch)) {
			t.Errorf("%s: mcpfleet.fence %q, want it to name %d:%d and not the stale %d:%d", c.ModuleName, fence, f.Shard, f.Epoch,
				staleFence.Shard, staleFence.Epoch)
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// Tenant A's sets (n1, kept2, moved2; then kept3) and B's (b1, notOwned refused; then byAdmin, the
	// same module as notOwned): each set numbers its events in command order, each tenant's sets in
	// command order, the tenants in id order (the group commit's lock order).
	aOrder := []uuid.UUID{n1.EventID, kept2.EventID, moved2.EventID, kept3.EventID}
	bOrder := []uuid.UUID{b1.EventID, byAdmin.EventID}
	wantOrder := append(slices.Clone(aOrder), bOrder...)
	if bytes.Compare(b[:], a[:]) < 0 {
		wantOrder = append(slices.Clone(bOrder), aOrder...)
	}
	if fmt.Sprint(order) != fmt.Sprint(wantOrder) {
		t.Errorf("audit events in order %v, want %v", order, wantOrder)
	}
}

// A set applied twice (a retry after a COMMIT whose outcome was unknown) changes nothing the second
// time: no second audit event, no tool change, no count.
func TestRegisterSetIsIdempotent(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	var cmds []persistence.Command
	for i := range 5 {
		cmds = append(cmds, &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: d.tenant,
			ModuleName: fmt.Sprintf("m%d", i), Version: "1", Protocols: []string{"2025-11-25"},
			Tools: []persistence.Tool{{Name: "echo", InputSchema: []byte(`{}`)}}, At: t0})
	}
	for round := range 2 {
		for i, err := range d.store.Commit(ctx, cmds) {
			if err != nil {
				t.Fatalf("round %d, command %d: %v", round, i, err)
			}
		}
	}
	if n := d.count(`SELECT count(*) FROM audit_events`); n != 5 {
		t.Errorf("%d audit events, want 5", n)
	}
	if n := d.count(`SELECT count(*) FROM tool_changes`); n != 0 {
		t.Errorf("%d tool changes, want 0", n)
	}
	if n := d.count(`SELECT servers FROM tenant_server_counts`); n != 5 {
		t.Errorf("counted %d servers, want 5", n)
	}
}

// loadFleet registers n servers of d.tenant named m0, m1, … (and, between every two, one of other,
// when other is not nil, so that the tenants' rows share blocks) and returns their ids. It fails the
// test unless the table then spans at least 8 blocks, twice the parts a load reads at once, so that
// every part has rows to read.
func (d *dash) loadFleet(n int, other uuid.UUID) []uuid.UUID {
	d.t.Helper()
	ids := d.loadFleetOf(d.tenant, n, other)
	if blocks := d.blocks(); blocks < 8 {
		d.t.Fatalf("mcp_servers spans %d blocks, want at least 8", blocks)
	}
	return ids
}

// loadFleetOf is loadFleet for tenant, without its check of the table's size.
func (d *dash) loadFleetOf(tenant uuid.UUID, n int, other uuid.UUID) []uuid.UUID {
	d.t.Helper()
	var ids []uuid.UUID
	var cmds []persistence.Command
	for i := range n {
		id := uuid.New()
		ids = append(ids, id)
		cmds = append(cmds, &persistence.RegisterCmd{EventID: uuid.New(), ServerID: id, TenantID: tenant,
			ModuleName: fmt.Sprintf("m%d", i), Version: "1", Protocols: []string{"2025-11-25"}, Capabilities: []byte(`{"tools":{}}`), At: t0})
		if other != uuid.Nil && i%2 == 1 {
			cmds = append(cmds, &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: other,
				ModuleName: fmt.Sprintf("x%d", i), Version: "1", Protocols: []string{"2025-11-25"}, At: t0})
		}
	}
	for i, err := range d.store.Commit(context.Background(), cmds) {
		if err != nil {
			d.t.Fatalf("command %d: %v", i, err)
		}
	}
	return ids
}

// blocks is how many blocks mcp_servers spans.
func (d *dash) blocks() int {
	d.t.Helper()
	return d.count(`SELECT (pg_relation_size('mcp_servers') / current_setting('block_size')::bigint)::int`)
}

// loaded loads d.tenant with LoadServers and returns how many times each server was handed over,
// failing the test unless the load read in parts parts.
func (d *dash) loaded(ctx context.Context, parts int, check func(persistence.Server)) map[uuid.UUID]int {
	d.t.Helper()
	got := 0
	defer persistence.SetLoadBegun(func(n int) { got = n })()
	seen := map[uuid.UUID]int{}
	err := d.store.LoadServers(ctx, d.tenant, func(s persistence.Server) error {
		seen[s.ServerID]++
		check(s)
		return nil
	})
	if err != nil {
		d.t.Fatal(err)
	}
	if got != parts {
		d.t.Errorf("the load read in %d parts, want %d", got, parts)
	}
	return seen
}

// lockWaiters is how many requests for table's lock in mode wait in the test's database.
func (d *dash) lockWaiters(table, mode string) int {
	return d.count(`SELECT count(*)::int FROM pg_locks WHERE relation = $1::regclass
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND mode = $2 AND NOT granted`, table, mode)
}

// onceEach fails the test unless seen holds each of ids exactly once and nothing else.
func onceEach(t *testing.T, what string, seen map[uuid.UUID]int, ids []uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s: server %s loaded %d times, want once", what, id, seen[id])
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("%s: loaded %d servers, want %d", what, len(seen), len(ids))
	}
}

func anyServer(persistence.Server) {}

// LoadServers reads the whole tenant in parallel parts of the table handed over in pages — every
// server exactly once, also when a part's last page is full — and only that tenant's, without the
// capability advertisement; a tenant smaller than loadSmall in one part.
func TestLoadServersInPages(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	other := d.newTenant("other")
	ids := d.loadFleet(300, other)
	onceEach(t, "a small tenant", d.loaded(ctx, 1, anyServer), ids)
	defer persistence.SetLoadSmall(0)()
	for _, page := range []int{1, 2, 3, 4, 9, 10, 1000} {
		restore := persistence.SetLoadPage(page)
		seen := d.loaded(ctx, 4, func(s persistence.Server) {
			if s.TenantID != d.tenant || s.CapabilityAdvertisement != nil || s.ModuleName == "" || len(s.SupportedProtocols) != 1 {
				t.Errorf("page %d: loaded %+v", page, s)
			}
		})
		restore()
		onceEach(t, fmt.Sprintf("pages of %d", page), seen, ids)
	}
	// What the load is sized by: each tenant's own servers, none for a tenant without any.
	for tenant, want := range map[uuid.UUID]int{d.tenant: len(ids), other: len(ids) / 2, d.newTenant("empty"): 0} {
		if got, err := d.store.ServerTotals(ctx, []uuid.UUID{tenant}); err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("ServerTotals = %v, %v; want [%d]", got, err, want)
		}
	}
}

// Every part of a load reads the first part's snapshot: servers whose rows an update moves to another
// part of the table after the first part began, and before the others did, are each read once, as they
// were when the load began. (Parts on snapshots of their own read a moved server twice — the old row in
// the first part, the new one in the last — and the others renamed.)
func TestLoadServersReadsOneSnapshot(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	ids := d.loadFleet(300, uuid.Nil)
	defer persistence.SetLoadSmall(0)()
	blocks := d.blocks()
	defer persistence.SetLoadBetween(func() {
		// The new rows are 400 bytes longer: a block's free space (the table's fill factor leaves half
		// of each for heap-only updates) takes few of them, the others go past the table's end.
		// (An error, not a fatal one: the load holds its first connection until the hook returns.)
		err := pgx.BeginFunc(ctx, d.owner, func(tx pgx.Tx) error { // the runtime role may not rename
			if err := persistence.SetTenant(ctx, tx, d.tenant); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE mcp_servers SET module_name = module_name || '-renamed-' || repeat('x', 400)`)
			return err
		})
		if err != nil {
			t.Errorf("rename: %v", err)
		}
	})()
	seen := d.loaded(ctx, 4, func(s persistence.Server) {
		if strings.Contains(s.ModuleName, "-renamed-") {
			t.Errorf("loaded %s as renamed after the load began", s.ServerID)
		}
	})
	onceEach(t, "during the update", seen, ids)
	// The update did move rows from part to part: a third of them at least past the blocks the table
	// had, into its last part.
	if moved := d.count(`SELECT count(*)::int FROM mcp_servers WHERE (ctid::text::point)[0] >= $1`, blocks); moved < len(ids)/3 {
		t.Fatalf("%d of %d renamed rows lie past the table's first %d blocks, want a third at least", moved, len(ids), blocks)
	}
	restore := persistence.SetLoadBetween(nil)
	defer restore()
	seen = d.loaded(ctx, 4, func(s persistence.Server) {
		if !strings.Contains(s.ModuleName, "-renamed-") {
			t.Errorf("loaded %s as not renamed after the update", s.ServerID)
		}
	})
	onceEach(t, "after the update", seen, ids)
}

// A part past the first waits for its connection only briefly, then the load goes on in the parts it
// has: every part holds its connection until its read ends, so a load waiting for one that another
// holder keeps until the load ends would wait for ever (here: a pool of two, one held).
func TestLoadServersOnTheConnectionsItGets(t *testing.T) {
	d := newDashWith(t, persistence.Options{MaxConns: 2})
	ids := d.loadFleet(300, uuid.Nil)
	defer persistence.SetLoadSmall(0)()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := d.store.HoldConn(ctx) // until the load has ended
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	onceEach(t, "one connection of two free", d.loaded(ctx, 1, anyServer), ids)
}

// A schema change that queues for the table behind the first part's lock (which the first part takes
// before its snapshot, so that no rewrite commits between the two) does not stall the load: the other
// parts, which would queue behind the change while the first part waits for them, are not begun, and
// the change goes in once the load has ended.
func TestLoadServersBesideASchemaChange(t *testing.T) {
	d := newDash(t)
	ids := d.loadFleet(300, uuid.Nil)
	defer persistence.SetLoadSmall(0)()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changed := make(chan error, 1)
	defer persistence.SetLoadBetween(func() {
		go func() {
			changed <- pgx.BeginFunc(ctx, d.owner, func(tx pgx.Tx) error { // the lock an ALTER TABLE takes
				_, err := tx.Exec(ctx, `LOCK TABLE mcp_servers IN ACCESS EXCLUSIVE MODE`)
				return err
			})
		}()
		// Until the change waits for the table: the first part holds it.
		for {
			if d.lockWaiters("mcp_servers", "AccessExclusiveLock") == 1 {
				return
			}
			select {
			case err := <-changed:
				t.Errorf("the schema change went in while the load's first part had begun (%v)", err)
				changed <- err
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})()
	onceEach(t, "beside a schema change", d.loaded(ctx, 1, anyServer), ids)
	if err := <-changed; err != nil {
		t.Fatalf("the schema change after the load: %v", err)
	}
}

// A table of fewer blocks than the parts a load reads at once — none, one — is read by as many parts as
// it has blocks (one at least), each server once.
func TestLoadServersOfATableOfOneBlock(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	defer persistence.SetLoadSmall(0)()
	onceEach(t, "an empty table", d.loaded(ctx, 1, anyServer), nil)
	var ids []uuid.UUID
	for i := range 3 {
		ids = append(ids, d.server(d.tenant, fmt.Sprintf("m%d", i), health.Healthy, i))
	}
	if blocks := d.blocks(); blocks != 1 {
		t.Fatalf("mcp_servers spans %d blocks, want 1", blocks)
	}
	onceEach(t, "a table of one block", d.loaded(ctx, 1, anyServer), ids)
}

// When fn fails, LoadServers stops calling it and returns its error after the parts still being read are
// cancelled and every part has ended (its connection back in the pool); a cancelled context fails the
// load.
func TestLoadServersStopsOnError(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	d.loadFleet(300, uuid.Nil)
	defer persistence.SetLoadSmall(0)()
	defer persistence.SetLoadPage(2)()
	parts := 0
	defer persistence.SetLoadBegun(func(n int) { parts = n })()
	stop := errors.New("enough")
	calls := 0
	err := d.store.LoadServers(ctx, d.tenant, func(persistence.Server) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 || parts != 4 {
		t.Errorf("LoadServers in %d parts = %v after %d calls, want %v after 3 in 4 parts", parts, err, calls, stop)
	}
	// A connection whose read was cancelled goes back by being closed, which the pool finishes on a
	// goroutine of its own and leaves counted as taken until the close ends — which pgxpool bounds at 15 s
	// (a CI run under -race saw one still taken after 10 s): wait past that.
	for deadline := time.Now().Add(20 * time.Second); d.store.AcquiredConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still taken 20 s after the load", d.store.AcquiredConns())
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.store.LoadServers(cancelled, d.tenant, func(persistence.Server) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("LoadServers with a cancelled context = %v, want context.Canceled", err)
	}
}

// A set's cost does not grow with the fleet: registering 64 new modules and re-registering 64 others in a
// tenant of 4,000 servers, without statistics (a fresh database, autovacuum off: the fleet is inserted
// directly, so the store's own analysis does not run), reads a bounded number of rows per command from
// mcp_servers, skill_registry and the audit log — index probes per input row — never the tenant's whole
// fleet (the statements' module look-ups once read all of it, per input row).
func TestRegisterSetReadsDoNotGrowWithTheFleet(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	const fleet = 4000
	if _, err := d.owner.Exec(ctx, `
		WITH s AS (INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status, last_heartbeat_at, registered_at)
			SELECT gen_random_uuid(), $1, 'fleet-' || lpad(g::text, 5, '0'), '1', '{2025-11-25}', 'healthy', $2, $2 FROM generate_series(0, $3 - 1) g
			RETURNING server_id, module_name),
		k AS (INSERT INTO skill_registry (skill_id, tenant_id, server_id, name, input_schema, enabled, available, created_at, updated_at)
			SELECT gen_random_uuid(), $1, s.server_id, 'ping', '{"type":"object"}', false, true, $2, $2 FROM s)
		INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, occurred_at)
			SELECT gen_random_uuid(), $1, 'mcp.server.registered', s.server_id, s.module_name, '1', 'healthy', $2 FROM s`,
		d.tenant, t0, fleet); err != nil {
		t.Fatal(err)
	}
	cmd := func(module string) *persistence.RegisterCmd {
		return &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: d.tenant, ModuleName: module,
			Version: "1", Protocols: []string{"2025-11-25"}, At: t0.Add(time.Second),
			Tools: []persistence.Tool{{Name: "ping", InputSchema: []byte(`{"type":"object"}`)}}}
	}
	var cmds []*persistence.RegisterCmd
	for j := range 64 {
		cmds = append(cmds, cmd(fmt.Sprintf("new-%03d", j)), cmd(fmt.Sprintf("fleet-%05d", j*50)))
	}
	reads, err := persistence.RegisterSetReads(ctx, d.app, d.tenant, cmds)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"mcp_servers", "audit_events", "skill_registry"} {
		if limit := int64(8 * len(cmds)); reads[table] > limit {
			t.Errorf("registering %d modules in a fleet of %d read %d rows of %s, want at most %d", len(cmds), fleet, reads[table], table, limit)
		}
	}
	t.Logf("rows read: mcp_servers %d, skill_registry %d, audit_events %d", reads["mcp_servers"], reads["skill_registry"], reads["audit_events"])
}

// The store analyzes the fleet's tables once the servers it created reach 1,000, then when they double:
// after 1,000 new servers committed through it, mcp_servers has statistics (PostgreSQL's own autovacuum
// is off on this machine, so nothing else gives it any), and re-registering them analyzes nothing more.
func TestStoreAnalyzesTheFleetAsItGrows(t *testing.T) {
	d := newDash(t)
	ctx := context.Background()
	analyzed := func() bool {
		var n int
		if err := d.owner.QueryRow(ctx, `SELECT count(*) FROM pg_stats WHERE tablename = 'mcp_servers' AND attname = 'tenant_id'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	if analyzed() {
		t.Skip("mcp_servers has statistics before the test (autovacuum is on): nothing to prove")
	}
	register := func(from, n int) {
		cmds := make([]persistence.Command, n)
		for j := range cmds {
			cmds[j] = &persistence.RegisterCmd{EventID: uuid.New(), ServerID: uuid.New(), TenantID: d.tenant,
				ModuleName: fmt.Sprintf("m-%05d", from+j), Version: "1", Protocols: []string{"2025-11-25"}, At: t0}
		}
		for _, err := range d.store.Commit(ctx, cmds) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	register(0, 999)
	if got := d.store.AnalyzeStats(); got.Runs != 0 || analyzed() {
		t.Fatalf("after 999 servers: %+v, analyzed %v; want no analysis yet", got, analyzed())
	}
	register(999, 1)
	deadline := time.Now().Add(30 * time.Second)
	for d.store.AnalyzeStats().Runs == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no analysis 30 s after the 1,000th server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := d.store.AnalyzeStats(); st.LastErr != nil || !analyzed() {
		t.Fatalf("analysis: %+v, mcp_servers analyzed %v", st, analyzed())
	}
	register(0, 1000) // re-registrations: nothing created
	if got := d.store.AnalyzeStats().Runs; got != 1 {
		t.Errorf("re-registering analyzed again: %d runs", got)
	}
}
