package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// run performs the whole benchmark and returns what it measured (partial when it stopped early, with the
// reason as the error).
func (b *bench) run(ctx context.Context) (*results, error) {
	c := b.c
	b.res = &results{started: time.Now().UTC(), n: c.n, nodes: c.nodes, interval: c.interval, duration: c.duration,
		workers: c.workers, goVersion: runtime.Version(), cpus: runtime.NumCPU(), load: [2]string{loadAverage()}}
	res := b.res
	defer func() { res.load[1] = loadAverage() }()
	etcdURL, stopEtcd, err := startEtcd(ctx, c.etcd, c.dir)
	if err != nil {
		return nil, err
	}
	defer stopEtcd()
	b.logf("etcd on %s; starting %d nodes", etcdURL, c.nodes)
	nodes, err := b.startCluster(ctx, etcdURL)
	defer func() {
		for _, n := range nodes {
			n.kill9()
		}
	}()
	if err != nil {
		return res, err
	}

	// The heartbeat driver runs from the first registration to the end.
	dctx, stopDriver := context.WithCancel(ctx)
	driverDone := make(chan struct{})
	warm := newPhase("registration")
	b.d.cur.Store(warm)
	b.d.setRotation(nodes, nil)
	go func() { defer close(driverDone); b.d.run(dctx, c.workers) }()
	defer func() { stopDriver(); <-driverDone }()

	b.logf("registering %d modules through %d nodes, %d at a time", c.n, len(nodes), c.regWorkers)
	res.reg = b.register(ctx, nodes, c.regWorkers, c.regLimit)
	warm.finish()
	res.regHeartbeats = summarize(warm, 0)
	registered := res.reg.registered
	b.logf("registered %d of %d in %s (%.0f/s), %d refused attempts %v", registered, c.n, res.reg.elapsed.Round(time.Millisecond),
		float64(registered)/res.reg.elapsed.Seconds(), sum(res.reg.errs), res.reg.errs)
	if registered == 0 {
		return res, fmt.Errorf("no module registered: %v", res.reg.errs)
	}
	if registered < c.n {
		b.note("%d of %d modules registered (errors %v); the run goes on with %d", registered, c.n, res.reg.errs, registered)
	}
	// Every acknowledged server must be owned. A registration refused with 503 may still have created
	// its server (the owner committed after the forward gave up), which a node may or may not run.
	owned, err := b.waitSettled(ctx, nodes, registered, 5*time.Minute)
	if err != nil {
		return res, fmt.Errorf("after registration: %w", err)
	}
	res.ownedAfterReg = ownedTotal(owned)
	res.inDatabase = b.serversInDatabase(ctx, registered)
	if res.inDatabase != registered || res.ownedAfterReg != res.inDatabase {
		b.note("after registration: %d registrations answered 2xx, %d servers in the database, %d run by the nodes", registered, res.inDatabase, res.ownedAfterReg)
	}
	b.d.setRotation(nodes, owned)

	// Let the heartbeats queued behind registration clear, then the steady phase.
	b.phase(ctx, "settle", min(c.interval, 10*time.Second))
	res.steady, res.steadyCPU = b.measured(ctx, "steady", nodes, c.duration, float64(registered)/c.interval.Seconds())
	res.nodeFigs = b.nodeFigures(nodes)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}

	if c.kill {
		res.kill = b.killAndRestart(ctx, nodes, etcdURL, registered)
		// Long enough for any false transition to show: 3H + one monitor period + 2 s.
		ph := b.phase(ctx, "after the restart", 3*c.interval+c.monitorInterval+2*time.Second)
		res.kill.after = summarize(ph, float64(registered)/c.interval.Seconds())
	}
	b.finalSweep(ctx)
	res.auditCluster, res.auditMeasured = b.auditTransitions(ctx)
	if c.baseline && ctx.Err() == nil {
		if err := b.runBaseline(ctx, nodes, registered); err != nil {
			b.note("baseline: %v", err)
		}
	}
	return res, ctx.Err()
}

// idleWindow is how long the empty cluster's idle CPU is measured.
const idleWindow = 5 * time.Second

// startCluster starts c.nodes cluster nodes, waits until they agree and own all shards, and measures their
// RSS and idle CPU while empty.
func (b *bench) startCluster(ctx context.Context, etcdURL string) ([]*node, error) {
	var nodes []*node
	start := time.Now()
	for i := range b.c.nodes {
		n, err := b.newNode(fmt.Sprintf("n%d", i+1), true)
		if err == nil {
			err = n.start(b.c.binary, b.nodeEnv(n, etcdURL))
		}
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, n)
		b.logf("%s: pid %d, HTTP %s, cluster %s, log %s", n.name, n.pid(), n.url, n.clusterAddr, n.logPath)
		// One after another, each serving before the next starts (as cluster_test.go does).
		if err := waitFor(ctx, time.Minute, func() bool { return !n.alive() || n.readyz().Status != "" }); err != nil || !n.alive() {
			return nodes, fmt.Errorf("%s did not answer /readyz (see %s): %v", n.name, n.logPath, err)
		}
	}
	if _, err := b.waitSettled(ctx, nodes, 0, 2*time.Minute); err != nil {
		return nodes, err
	}
	b.res.clusterReady = time.Since(start)
	for _, n := range nodes {
		b.res.rssStart = append(b.res.rssStart, rssKiB(n.pid()))
	}
	// The floor every node costs with nothing to do: membership, etcd lease, timers.
	before := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		before[i], _ = cpuTime(n.pid())
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return nodes, ctx.Err()
	case <-time.After(idleWindow):
	}
	for i, n := range nodes {
		t, _ := cpuTime(n.pid())
		b.res.idlePercent = append(b.res.idlePercent, 100*(t-before[i]).Seconds()/time.Since(t0).Seconds())
	}
	return nodes, nil
}

// waitSettled waits until settled(nodes, servers) holds and returns what each node owns.
func (b *bench) waitSettled(ctx context.Context, nodes []*node, servers int, limit time.Duration) ([]readyz, error) {
	var owned []readyz
	var why string
	err := waitFor(ctx, limit, func() bool {
		for _, n := range nodes {
			if !n.alive() {
				why = n.name + " exited; see " + n.logPath
				return false
			}
		}
		var ok bool
		owned, ok, why = settled(nodes, servers)
		return ok
	})
	if err != nil {
		return owned, fmt.Errorf("the nodes did not settle (%s): %w", why, err)
	}
	return owned, nil
}

// phase runs a phase of the heartbeat load for d and returns it.
func (b *bench) phase(ctx context.Context, name string, d time.Duration) *phase {
	ph := newPhase(name)
	b.d.cur.Store(ph)
	stop := b.progress(func() string { return phaseProgress(ph) })
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	stop()
	ph.finish()
	return ph
}

// measured runs a phase for d and measures the CPU the nodes, their PostgreSQL backends and this
// program spent meanwhile.
func (b *bench) measured(ctx context.Context, name string, nodes []*node, d time.Duration, expected float64) (phaseFigures, cpuFigures) {
	var cf cpuFigures
	before := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		before[i], _ = cpuTime(n.pid())
	}
	self0, _ := cpuTime(os.Getpid())
	var db0 backendCPU
	var dbErr error
	if b.pg != nil {
		db0, dbErr = readBackendCPU(ctx, b.pg, b.c.dbName)
	}
	b.logf("%s: %s, %.0f heartbeats/s expected", name, d, expected)
	ph := b.phase(ctx, name, d)
	cf.measured = true
	for i, n := range nodes {
		t, err := cpuTime(n.pid())
		if err != nil {
			cf.measured = false
		}
		cf.nodeSeconds = append(cf.nodeSeconds, (t - before[i]).Seconds())
	}
	self1, _ := cpuTime(os.Getpid())
	cf.clientSeconds = (self1 - self0).Seconds()
	if b.pg != nil && dbErr == nil {
		db1, err := readBackendCPU(ctx, b.pg, b.c.dbName)
		if err == nil {
			cpu, exited := db1.since(db0)
			cf.pgMeasured, cf.pgSeconds, cf.pgBackends, cf.pgExited = true, cpu.Seconds(), len(db1), exited
		} else {
			dbErr = err
		}
	}
	if dbErr != nil {
		b.note("PostgreSQL CPU of the %s phase not measured: %v", name, dbErr)
	}
	pf := summarize(ph, expected)
	cf.heartbeats = pf.ok
	b.logf("%s: %.0f heartbeats/s, p50 %s, p99 %s, %d errors, %d non-healthy on time", name, pf.rate, pf.p50, pf.p99, pf.errors(), pf.nonHealthyOnTime)
	return pf, cf
}

// nodeFigures reads each node's RSS and what it owns.
func (b *bench) nodeFigures(nodes []*node) []nodeFigures {
	var out []nodeFigures
	for i, n := range nodes {
		r := n.readyz()
		f := nodeFigures{name: n.name, pid: n.pid(), rss: rssKiB(n.pid()), shards: len(r.Cluster.Shards), owned: r.Cluster.ServersOwned}
		if i < len(b.res.rssStart) {
			f.rssStart = b.res.rssStart[i]
		}
		out = append(out, f)
	}
	return out
}

// killAndRestart kills the node owning the most servers (of at least servers) with SIGKILL (out of the balancer's rotation at
// the same moment), measures the time until the survivors own every server, then restarts it on the same
// addresses and measures the time until it is ready with its share.
func (b *bench) killAndRestart(ctx context.Context, nodes []*node, etcdURL string, servers int) killFigures {
	var kf killFigures
	owned, _, _ := settled(nodes, servers)
	servers = max(servers, ownedTotal(owned)) // what the nodes ran before the kill must be run again
	vi := 0
	for i := range owned {
		if owned[i].Cluster.ServersOwned > owned[vi].Cluster.ServersOwned {
			vi = i
		}
	}
	victim := nodes[vi]
	var survivors []*node
	for _, n := range nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	kf.victim, kf.shards, kf.servers = victim.name, len(owned[vi].Cluster.Shards), owned[vi].Cluster.ServersOwned
	b.logf("kill -9 of %s (%d shards, %d servers)", victim.name, kf.shards, kf.servers)
	ph := newPhase("kill -9 until owned again")
	b.d.cur.Store(ph)
	b.d.setRotation(survivors, nil)
	killed := time.Now()
	victim.kill9()
	_, err := b.waitSettled(ctx, survivors, servers, 2*time.Minute)
	kf.ownedAgain = time.Since(killed)
	ph.finish()
	kf.failover = summarize(ph, 0)
	if err != nil {
		kf.ownedErr = err.Error()
		b.note("after kill -9 of %s: %v", victim.name, err)
		return kf
	}
	b.logf("every server owned again %s after the kill", kf.ownedAgain.Round(time.Millisecond))

	ph = newPhase("restart until ready with its share")
	b.d.cur.Store(ph)
	if err := victim.start(b.c.binary, b.nodeEnv(victim, etcdURL)); err != nil {
		kf.readyErr = err.Error()
		return kf
	}
	owned, err = b.waitSettled(ctx, nodes, servers, 3*time.Minute)
	kf.readyAgain = time.Since(victim.started)
	ph.finish()
	kf.rejoin = summarize(ph, 0)
	if err != nil {
		kf.readyErr = err.Error()
		b.note("restart of %s: %v", victim.name, err)
		return kf
	}
	kf.done = true
	kf.shardsBack, kf.serversBack = len(owned[vi].Cluster.Shards), owned[vi].Cluster.ServersOwned
	b.d.setRotation(nodes, owned)
	b.logf("%s ready with %d shards, %d servers, %s after its restart", victim.name, kf.shardsBack, kf.serversBack, kf.readyAgain.Round(time.Millisecond))
	return kf
}

// finalSweep lists the fleet's non-healthy servers through the first node, and which of them belong to a
// module heartbeated on time (its last 200 sent less than 2H ago): those are false transitions.
func (b *bench) finalSweep(ctx context.Context) {
	res := b.res
	byID := make(map[string]*module, len(b.d.mods))
	for i := range b.d.mods {
		if b.d.mods[i].registered.Load() {
			byID[b.d.mods[i].id] = &b.d.mods[i]
		}
	}
	now := b.d.now()
	fc := fleetclient.New(b.d.rotationURL(), b.c.readKey, fleetclient.WithHTTPClient(b.regHC))
	for _, st := range []fleetclient.Status{fleetclient.StatusDegraded, fleetclient.StatusUnhealthy} {
		for s, err := range fc.AllServers(ctx, fleetclient.ListOptions{Status: st, Limit: 1000}) {
			if err != nil {
				res.sweep.err = err.Error()
				b.note("final sweep: %v", err)
				return
			}
			m := byID[s.ServerID]
			switch {
			case m == nil:
				res.sweep.foreign++
				continue
			case now-m.lastOK.Load() < int64(2*b.c.interval):
				res.sweep.onTime++ // its module's last heartbeat was answered less than 2H ago
			}
			switch {
			case st == fleetclient.StatusDegraded:
				res.sweep.degraded++
			default:
				res.sweep.unhealthy++
			}
		}
	}
	res.sweep.done = true
}

// rotationURL is the base URL of the first node in rotation.
func (d *driver) rotationURL() string {
	if ts := *d.rotation.Load(); len(ts) > 0 {
		return ts[0].n.url
	}
	return "http://127.0.0.1:1"
}

// serversInDatabase counts the servers not deregistered in the run's database (def without one).
func (b *bench) serversInDatabase(ctx context.Context, def int) int {
	if b.pg == nil {
		return def
	}
	var n int
	if err := b.pg.QueryRow(ctx, `SELECT count(*) FROM mcp_servers WHERE status <> 'deregistered'`).Scan(&n); err != nil {
		b.note("servers in the database not counted: %v", err)
		return def
	}
	return n
}

// auditTransitions counts the audit log's degraded and unhealthy transitions of the servers the run
// registered (and so heartbeats; the database is the run's).
func (b *bench) auditTransitions(ctx context.Context) (int, bool) {
	if b.pg == nil {
		return 0, false
	}
	var ids []string
	for i := range b.d.mods {
		if b.d.mods[i].registered.Load() {
			ids = append(ids, b.d.mods[i].id)
		}
	}
	var n int
	err := b.pg.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE kind IN ('mcp.server.degraded', 'mcp.server.unhealthy')
		AND server_id = ANY($1::uuid[])`, ids).Scan(&n)
	if err != nil {
		b.note("audit log not read: %v", err)
		return 0, false
	}
	return n, true
}

// runBaseline stops the cluster (SIGTERM, all at once), starts one single-node service on the same
// database and drives it with the same load for the same time.
func (b *bench) runBaseline(ctx context.Context, nodes []*node, servers int) error {
	res := b.res
	b.d.setRotation(nil, nil)
	b.logf("baseline: stopping the cluster")
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.terminate(time.Minute) })
	}
	wg.Wait()
	single, err := b.newNode("single", false)
	if err != nil {
		return err
	}
	if err := single.start(b.c.binary, b.nodeEnv(single, "")); err != nil {
		return err
	}
	defer single.terminate(time.Minute)
	err = waitFor(ctx, 5*time.Minute, func() bool { return single.alive() && single.readyz().Status == "ready" })
	res.baselineReady = time.Since(single.started)
	if err != nil {
		return fmt.Errorf("the single node was not ready (see %s): %w", single.logPath, err)
	}
	b.logf("baseline: single node pid %d ready with %d servers in %s", single.pid(), servers, res.baselineReady.Round(time.Millisecond))
	b.d.setRotation([]*node{single}, nil)
	before, _ := b.auditTransitions(ctx)
	b.phase(ctx, "baseline settle", b.c.interval)
	res.baselinePhase, res.baselineCPU = b.measured(ctx, "baseline", []*node{single}, b.c.duration, float64(servers)/b.c.interval.Seconds())
	res.baselineRSS = rssKiB(single.pid())
	after, ok := b.auditTransitions(ctx)
	res.baselineDone, res.auditBaseline = true, after-before
	res.auditMeasured = res.auditMeasured && ok
	return nil
}
