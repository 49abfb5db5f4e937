package actors

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/shard"
)

// pgFleet is a fleet over a real PostgreSQL database that owns every shard under claimed epochs, as a
// single node does (every durable write fenced, holding its shard's shard_owners row FOR SHARE).
type pgFleet struct {
	t      *testing.T
	db     *pgtest.DB
	store  *persistence.Store
	fleet  *Fleet
	tenant uuid.UUID
}

func newPGFleet(t *testing.T, writeTimeout time.Duration) *pgFleet {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	admin, err := persistence.OpenAdmin(ctx, db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	tenant, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open(ctx, db.AppURL, persistence.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	all := make([]int, shard.Count)
	for i := range all {
		all[i] = i
	}
	fences, err := store.ClaimShards(ctx, all, "n1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{HeartbeatInterval: testH, MonitorInterval: testH / 2, ManualMonitor: true, WriteTimeout: writeTimeout}
	f, err := Start(ctx, cfg, store, Deps{Log: slog.New(slog.DiscardHandler), Fences: fences})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop(context.Background()) }) //nolint:errcheck // best effort at the end
	return &pgFleet{t: t, db: db, store: store, fleet: f, tenant: tenant}
}

func (p *pgFleet) register(module string) (RegisterResult, error) {
	return p.fleet.Register(context.Background(), RegisterRequest{TenantID: p.tenant, ModuleName: module, Version: "1.0.0",
		Protocols: []string{"2025-11-25"}})
}

// runsExactlyTheDatabase checks the invariant: the fleet runs an actor for every server of the tenant
// PostgreSQL holds (a heartbeat for it is answered), and counts no other (OwnedServers).
func (p *pgFleet) runsExactlyTheDatabase() {
	p.t.Helper()
	ctx := context.Background()
	rows, err := p.store.ListServers(ctx, p.tenant, persistence.ServerFilter{WithoutAdvertisement: true, Limit: 1000})
	if err != nil {
		p.t.Fatal(err)
	}
	for _, s := range rows {
		if _, err := p.fleet.Heartbeat(ctx, p.tenant, s.ServerID, carrier{}); err != nil {
			p.t.Errorf("server %s of module %s is in the database, but its heartbeat: %v", s.ServerID, s.ModuleName, err)
		}
	}
	// A barrier: a server actor tells the fleet its registration committed before it answers anything
	// after it, so once the fleet answers this, it has counted every server the heartbeats reached.
	if _, err := p.fleet.ask(ctx, p.fleet.fleet, &lookupMsg{}); err != nil {
		p.t.Fatal(err)
	}
	if n := p.fleet.OwnedServers(); n != len(rows) {
		p.t.Errorf("the fleet counts %d servers, the database holds %d", n, len(rows))
	}
}

// TestRegistrationCommittedLateIsRun: a module whose server PostgreSQL holds but the fleet does not run
// — its first registration committed after the fleet had given up on it (the commit's answer came too
// late, or was lost), so the fleet forgot the id it drew — is run again by its next registration: the
// registration commits on the existing server (UNIQUE tenant, module) and the fleet takes that server in
// and answers with it. Before, every later registration of the module drew a new id, committed on the
// old server and was answered 503 "registered under another id", for ever, while the server sat in the
// database monitored by nobody. Real PostgreSQL.
func TestRegistrationCommittedLateIsRun(t *testing.T) {
	p := newPGFleet(t, 5*time.Second)
	ctx := context.Background()
	if _, err := p.register("steady"); err != nil {
		t.Fatal(err)
	}
	key := moduleKey{tenantID: p.tenant, moduleName: "late"}
	late := &persistence.RegisterCmd{EventID: uuid.New(), ServerID: newServerID(key), TenantID: p.tenant, ModuleName: "late",
		Version: "1.0.0", Protocols: []string{"2025-11-25"}, At: time.Now().UTC()}
	if err := errors.Join(p.store.Commit(ctx, []persistence.Command{late})...); err != nil {
		t.Fatal(err)
	}
	res, err := p.register("late")
	if err != nil {
		t.Fatalf("registration of a module the database holds and the fleet does not run: %v", err)
	}
	if res.Server.ServerID != late.ServerID || res.Created || res.Server.Status != health.Healthy {
		t.Fatalf("registered %s (created %v, %s), want the existing server %s", res.Server.ServerID, res.Created, res.Server.Status, late.ServerID)
	}
	p.runsExactlyTheDatabase()
	again, err := p.register("late")
	if err != nil || again.Server.ServerID != late.ServerID {
		t.Fatalf("registration again: %s, %v", again.Server.ServerID, err)
	}
}

// TestRegistrationBehindAFailedOneIsRun: two registrations of a new module meet at its server actor;
// the first times out in PostgreSQL (its shard's row is locked) and fails, the second, stashed behind
// it, then commits. The fleet must run the server the second committed. Before, the failed first one
// made the fleet forget the server and stop its actor while the second went on to commit it: a server
// in the database that no actor ran (and whose registration was answered 503), and the nodes' count of
// servers owned included actors of registrations that never committed. Real PostgreSQL.
func TestRegistrationBehindAFailedOneIsRun(t *testing.T) {
	const writeTimeout = 2 * time.Second
	p := newPGFleet(t, writeTimeout)
	ctx := context.Background()
	admin := p.db.AdminPool(t)
	lock, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below; this is for a failure before
	if _, err := lock.Exec(ctx, `SELECT 1 FROM shard_owners WHERE shard = $1 FOR UPDATE`, ModuleShard(p.tenant, "m")); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res RegisterResult
		err error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { r, err := p.register("m"); first <- answer{r, err} }()
	waiting := func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	}
	wait.For(t, "the first registration blocked on the shard's row", 10*time.Second, waiting)
	go func() {
		// A later deadline than the first's, so it is still alive when the first fails.
		msg := &registerMsg{req: RegisterRequest{TenantID: p.tenant, ModuleName: "m", Version: "1.0.0",
			Protocols: []string{"2025-11-25"}}, deadline: time.Now().Add(4 * writeTimeout)}
		res, err := p.fleet.system.Root.RequestFuture(p.fleet.fleet, msg, 6*writeTimeout).Result()
		if err != nil {
			second <- answer{err: err}
			return
		}
		r := res.(*registerReply)
		second <- answer{r.res, r.err}
	}()
	// The second reached the server's actor (the fleet forwards it in order, the actor stashes it).
	wait.For(t, "the second registration at the server actor", 5*time.Second, func() bool {
		_, err := p.fleet.ask(ctx, p.fleet.fleet, &lookupMsg{})
		return err == nil
	})
	ids := serverActors(p.fleet)
	if len(ids) != 1 {
		t.Fatalf("%d server actors running, want the new module's one", len(ids))
	}
	id := ids[0]
	// A message behind the second registration in the actor's mailbox: once answered, it is stashed.
	if _, err := p.fleet.Heartbeat(ctx, uuid.New(), id, carrier{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("barrier: %v", err)
	}
	a1 := <-first
	if a1.err == nil {
		t.Fatalf("the first registration committed through a locked shard row: %+v", a1.res)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a2 := <-second
	t.Logf("first: %v; second: %v (server %s)", a1.err, a2.err, a2.res.Server.ServerID)
	// Whatever the second was answered, the fleet must run what the database holds, and only that.
	wait.For(t, "the writes settled", 10*time.Second, func() bool {
		_, err := p.fleet.ask(ctx, p.fleet.writer, &drainMsg{})
		return err == nil
	})
	p.runsExactlyTheDatabase()
	res, err := p.register("m")
	if err != nil {
		t.Fatalf("registration after the race: %v", err)
	}
	if a2.err == nil && res.Server.ServerID != a2.res.Server.ServerID {
		t.Fatalf("the module's server moved from %s to %s", a2.res.Server.ServerID, res.Server.ServerID)
	}
	p.runsExactlyTheDatabase()
}

// serverActors lists the ids of the server actors running in f's actor system (PIDs fleet/<id>).
func serverActors(f *Fleet) []uuid.UUID {
	var out []uuid.UUID
	prefix := f.fleet.Id + "/"
	for _, bucket := range f.system.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, k := range bucket.Keys() {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				if id, err := uuid.Parse(rest); err == nil {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// A deregistration answers with the row's capability advertisement, which its commit returns (the
// actor's own copy of the row is slim): the API answers it without reading the row again.
func TestDeregistrationAnswersTheAdvertisement(t *testing.T) {
	p := newPGFleet(t, 5*time.Second)
	ctx := context.Background()
	caps := []byte(`{"tools": [{"name": "ping"}]}`)
	res, err := p.fleet.Register(ctx, RegisterRequest{TenantID: p.tenant, ModuleName: "m", Version: "1.0.0",
		Protocols: []string{"2025-11-25"}, Capabilities: caps})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := p.fleet.Deregister(ctx, p.tenant, res.Server.ServerID, carrier{})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Status != health.Deregistered || string(srv.CapabilityAdvertisement) != string(caps) {
		t.Fatalf("deregistration answered status %s, advertisement %q; want %q", srv.Status, srv.CapabilityAdvertisement, caps)
	}
}
