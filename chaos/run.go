// Package chaos is mcpfleet's out-of-process chaos suite (issue 7). It runs the real service binary,
// built with -tags chaos, against a private PostgreSQL cluster of its own (initdb from the local
// binaries, on its own port, under a directory of its own), drives a load of simulated modules over
// HTTP on loopback, injects faults on a schedule — actors killed through the chaos endpoint, the process
// killed with -9 and restarted, stopped with SIGSTOP and continued, PostgreSQL stopped and restarted,
// modules' heartbeats dropped — records everything that happened, and checks the invariants of the
// issue's contract on the recorded history afterwards (see Check).
//
// cmd/mcpfleet-chaos runs the full schedule (make chaos); TestChaosShort runs the short one inside
// make test. The cluster schedules (issue 12, see cluster.go) run three nodes on a private etcd instead of
// one process: make chaos-cluster, and TestChaosClusterShort inside make test.
package chaos

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/freeport"
)

// Config configures a run. Zero values take the defaults of the schedule.
type Config struct {
	Schedule string // "short" or "full" (one process); "cluster" or "cluster-short" (three nodes on etcd)
	Binary   string // the service built with -tags chaos; empty: built from Root
	Root     string // the module's root directory (to build the binary and hold artifacts)
	Race     bool   // build the service with the race detector
	Modules  int    // simulated modules
	Churn    int    // of which this many deregister and register again now and then
	Rounds   int    // repetitions of the fault schedule (full: 2)

	Heartbeat  time.Duration // H given to the service (default 1 s)
	Monitor    time.Duration // monitor period given to the service (default 250 ms)
	DBOutage   time.Duration // how long PostgreSQL stays stopped (full: 60 s, short: 8 s)
	FlapWindow time.Duration // the service's flapping window (default 15 min, the service's default)
	EtcdOutage time.Duration // cluster: how long etcd stays stopped (cluster: 30 s, cluster-short: 10 s)
	Nodes      int           // cluster: nodes at the start (default 3; one more is added under load)

	Artifacts string    // directory for the history and the service logs; default Root/artifacts/chaos/<schedule>-<time>
	Log       io.Writer // progress; nil discards
}

func (c *Config) defaults() error {
	switch c.Schedule {
	case "":
		c.Schedule = "short"
	case "short", "full", "cluster", "cluster-short":
	default:
		return fmt.Errorf("unknown schedule %q: want short, full, cluster or cluster-short", c.Schedule)
	}
	short := c.Schedule == "short" || c.Schedule == "cluster-short"
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Heartbeat, time.Second)
	def(&c.Monitor, 250*time.Millisecond)
	def(&c.FlapWindow, 15*time.Minute)
	if short {
		def(&c.DBOutage, 8*time.Second)
	} else {
		def(&c.DBOutage, 60*time.Second)
	}
	if c.cluster() {
		if c.Nodes == 0 {
			c.Nodes = 3
		}
		if short {
			def(&c.EtcdOutage, 10*time.Second)
		} else {
			def(&c.EtcdOutage, 30*time.Second)
		}
		if c.Nodes < 2 || c.Nodes > 6 || c.EtcdOutage < time.Second {
			return fmt.Errorf("nodes %d (2 to 6), etcd outage %s (at least 1 s)", c.Nodes, c.EtcdOutage)
		}
	}
	if c.Modules == 0 {
		c.Modules = 300
		switch {
		case c.Schedule == "cluster":
			c.Modules = 150
		case short:
			c.Modules = 60
		}
	}
	if c.Churn == 0 {
		c.Churn = max(2, c.Modules/20)
	}
	if c.Rounds == 0 {
		c.Rounds = 2
		if short {
			c.Rounds = 1
		}
	}
	if c.Modules < 10 || c.Modules > 5000 || c.Churn >= c.Modules/2 || c.Rounds > 10 {
		return fmt.Errorf("modules %d (10 to 5000), churn %d (under half), rounds %d (at most 10)", c.Modules, c.Churn, c.Rounds)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

func (c *Config) cluster() bool { return c.Schedule == "cluster" || c.Schedule == "cluster-short" }

// Result is the outcome of a run.
type Result struct {
	History *History
	Report  *Report
	Dir     string // where the history, the report and the service logs were written
}

// Failed reports whether the run found a violation or could not complete its schedule.
func (r *Result) Failed() bool {
	return r.Report == nil || len(r.Report.Violations) > 0 || r.Report.SuiteError != ""
}

// runner holds a run's moving parts.
type runner struct {
	cfg   Config
	rec   *recorder
	svc   *service
	db    *database
	fleet *fleet
	api   *api
	hook  *webhook
	keys  struct{ module, admin string }
	start time.Time

	procMu sync.Mutex // serialises restarts of the service
	mcfg   moduleConfig

	// Cluster schedules: the nodes behind the balancer (svc is nil), etcd, the nodes' common environment.
	etcd    *etcdProc
	lb      *balancer
	nodeEnv []string
	exitCtx context.Context // ends when the schedule stops watching for unasked exits
	// The network-namespace cut: the namespace of node slot netnsNode, or nil and why not (nsReason).
	ns        *netns
	netnsNode int
	nsReason  string
}

// host is the address the schedule's processes listen on: the veth pair's host end when a node runs
// in a namespace of its own (which cannot reach the host's 127.0.0.1), else 127.0.0.1.
func (r *runner) host() string {
	if r.ns != nil {
		return r.ns.hostIP
	}
	return "127.0.0.1"
}

// services returns every service process slot: the one process, or the cluster's nodes.
func (r *runner) services() []*service {
	if r.lb != nil {
		return r.lb.all()
	}
	if r.svc == nil {
		return nil
	}
	return []*service{r.svc}
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "chaos %6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run runs the schedule and checks the history. The error is for a run that could not be set up; a
// run that started always returns a Result, whose Report lists the violations (and a SuiteError if the
// schedule could not complete). Everything it started is stopped and removed before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, start: time.Now()}
	if r.cfg.Root == "" {
		root, err := ModuleRoot(".")
		if err != nil && cfg.Binary == "" {
			return nil, err
		}
		r.cfg.Root = root
	}
	if r.cfg.Artifacts == "" {
		base := filepath.Join(r.cfg.Root, "artifacts", "chaos")
		pruneArtifacts(base, cfg.Schedule+"-", 5)
		r.cfg.Artifacts = filepath.Join(base, cfg.Schedule+"-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(r.cfg.Artifacts, 0o755); err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	sweepStale(ctx, r.logf)
	wd, err := newWorkDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(wd.path)

	if r.cfg.Binary == "" {
		r.cfg.Binary = filepath.Join(wd.path, "mcpfleet")
		r.logf("building the service with -tags chaos from %s", r.cfg.Root)
		if err := BuildBinary(ctx, r.cfg.Root, r.cfg.Binary, cfg.Race); err != nil {
			return nil, err
		}
	}
	tol := 500 * time.Millisecond
	p := Params{
		Schedule: cfg.Schedule, Heartbeat: cfg.Heartbeat, Monitor: cfg.Monitor, WriteTimeout: 5 * time.Second,
		ReconcileEvery: time.Minute, FlapWindow: cfg.FlapWindow, HeartbeatTimeout: 10 * time.Second,
		CommandTimeout: 15 * time.Second, Tolerance: tol, EarlyTolerance: 25 * time.Millisecond,
	}
	if r.cfg.cluster() {
		p.Nodes, p.FailoverBound = r.cfg.Nodes, FailoverBound
	}
	r.rec = newRecorder(p)

	if r.cfg.cluster() {
		if r.ns, err = newNetns(); err != nil {
			r.ns, r.nsReason = nil, err.Error()
		} else {
			defer r.ns.close()
		}
		r.netnsNode = r.cfg.Nodes - 1 // the last of the first nodes runs in the namespace, if there is one
	}
	r.logf("starting a private PostgreSQL cluster under %s", wd.path)
	r.db, err = startDatabase(ctx, wd.pgDir())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := r.db.cluster.Close(); err != nil {
			r.logf("stop the private cluster: %v", err)
		}
	}()
	if err := r.setupSchema(ctx); err != nil {
		return nil, err
	}
	if r.ns != nil {
		if err := r.listenOn(ctx, r.ns.hostIP); err != nil {
			return nil, fmt.Errorf("PostgreSQL on %s: %w", r.ns.hostIP, err)
		}
	}

	secret := rand.Text()
	r.hook, err = startWebhook(secret, r.rec, r.host())
	if err != nil {
		return nil, err
	}
	defer r.hook.close()
	env := append(baseEnv(),
		"MCPFLEET_DATABASE_URL="+r.db.appURL,
		"MCPFLEET_HEARTBEAT_INTERVAL="+cfg.Heartbeat.String(),
		"MCPFLEET_MONITOR_INTERVAL="+cfg.Monitor.String(),
		"MCPFLEET_WRITE_TIMEOUT=5s",
		"MCPFLEET_FLAP_WINDOW="+cfg.FlapWindow.String(),
		"MCPFLEET_ALERT_WEBHOOK_URL="+r.hook.url(),
		"MCPFLEET_ALERT_WEBHOOK_SECRET="+secret,
		"MCPFLEET_LOG_LEVEL=info",
		"MCPFLEET_METRICS_ADDR=off", // the suite reads no metrics; never collide on the default port
	)
	exitCtx, stopExits := context.WithCancel(ctx)
	defer stopExits()
	r.exitCtx = exitCtx
	defer func() {
		for _, s := range r.services() {
			s.kill()
		}
		if r.etcd != nil {
			r.etcd.stop()
		}
	}()
	if r.cfg.cluster() {
		r.logf("starting a cluster of %d nodes (H %s, monitor %s); %s", cfg.Nodes, cfg.Heartbeat, cfg.Monitor, r.netnsNote())
		r.rec.note("%s", r.netnsNote())
		if err := r.startCluster(ctx, wd, env); err != nil {
			return nil, err
		}
	} else {
		p, err := freeport.Ports(1)
		if err != nil {
			return nil, err
		}
		port := p[0]
		r.svc = &service{binary: r.cfg.Binary, addr: "127.0.0.1:" + strconv.Itoa(port), logDir: r.cfg.Artifacts}
		r.svc.env = append(env, "MCPFLEET_HTTP_ADDR="+r.svc.addr)
		r.rec.inc = r.svc.current
		r.api = &api{base: r.svc.url(), client: &http.Client{Transport: newTransport()}, rec: r.rec, inc: r.svc.current}
		r.logf("starting the service %s on %s (H %s, monitor %s)", r.cfg.Binary, r.svc.addr, cfg.Heartbeat, cfg.Monitor)
		if _, err := r.svc.start(ctx, time.Minute); err != nil {
			return nil, err
		}
		go r.watchExits(exitCtx, r.svc, -1)
	}
	suiteErr := r.schedule(ctx, stopExits)
	if suiteErr != nil {
		r.logf("schedule stopped: %v", suiteErr)
	}
	h := r.collect(ctx)
	rep := Check(h)
	if suiteErr != nil {
		rep.SuiteError = suiteErr.Error()
	}
	res := &Result{History: h, Report: rep, Dir: r.cfg.Artifacts}
	if err := h.Save(filepath.Join(r.cfg.Artifacts, "history.json")); err != nil {
		r.logf("%v", err)
	}
	if err := os.WriteFile(filepath.Join(r.cfg.Artifacts, "report.txt"), []byte(rep.String()), 0o644); err != nil {
		r.logf("write report: %v", err)
	}
	return res, nil
}

func (r *runner) setupSchema(ctx context.Context) error {
	var mig struct{}
	if err := runCLI(ctx, r.cfg.Binary, r.db.adminURL, &mig, "migrate"); err != nil {
		return err
	}
	var tenant struct {
		TenantID string `json:"tenant_id"`
	}
	if err := runCLI(ctx, r.cfg.Binary, r.db.adminURL, &tenant, "tenant", "create", "--name", "chaos"); err != nil {
		return err
	}
	var key struct {
		APIKey string `json:"api_key"`
	}
	if err := runCLI(ctx, r.cfg.Binary, r.db.adminURL, &key, "apikey", "create", "--tenant", tenant.TenantID, "--role", "module"); err != nil {
		return err
	}
	r.keys.module = key.APIKey
	if err := runCLI(ctx, r.cfg.Binary, r.db.adminURL, &key, "apikey", "create", "--tenant", tenant.TenantID, "--role", "admin"); err != nil {
		return err
	}
	r.keys.admin = key.APIKey
	return nil
}

// schedule runs the load, the observers and the faults, then winds everything down.
func (r *runner) schedule(ctx context.Context, stopExits func()) (err error) {
	r.mcfg = moduleConfig{H: r.cfg.Heartbeat, HeartbeatTimeout: 10 * time.Second, CommandTimeout: 15 * time.Second, Key: r.keys.module, Async: r.cfg.cluster()}
	r.fleet = newFleet(r.cfg.Modules, r.cfg.Churn, "chaos-mod")
	obsCtx, stopObs := context.WithCancel(ctx)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopLoad()
		r.fleet.wg.Wait()
		stopObs()
		wg.Wait()
		stopExits()
	}()
	wg.Go(func() { pollAudit(obsCtx, r.api, r.keys.admin, 100*time.Millisecond) })
	wg.Go(func() { probeReadyz(obsCtx, r.api, 500*time.Millisecond) })
	wg.Go(func() { watchSkills(obsCtx, r.db.adminURL, r.rec, time.Second) })

	r.rec.setPhase("warmup")
	r.logf("registering %d modules (%d churning)", r.cfg.Modules, r.cfg.Churn)
	r.fleet.start(loadCtx, r.api, r.mcfg, r.rec)
	if err := r.fleet.registered(ctx, time.Minute); err != nil {
		return err
	}
	churnCtx, stopChurn := context.WithCancel(loadCtx)
	wg.Go(func() { r.churn(churnCtx) })
	sleep(ctx, r.settle())
	r.checkpoint(ctx, "warmup")

	for round := 1; round <= r.cfg.Rounds; round++ {
		phases := r.phases
		if r.cfg.cluster() {
			phases = r.clusterPhases
		}
		for _, p := range phases(round) {
			if ctx.Err() != nil {
				stopChurn()
				return ctx.Err()
			}
			name := fmt.Sprintf("r%d/%s", round, p.name)
			r.rec.setPhase(name)
			r.logf("phase %s", name)
			if err := p.run(ctx); err != nil {
				stopChurn()
				return fmt.Errorf("phase %s: %w", name, err)
			}
			r.checkpoint(ctx, name)
		}
	}

	r.rec.setPhase("final")
	stopChurn()
	for _, m := range r.fleet.mods {
		if m.silent.Swap(false) {
			r.rec.silence(m.idx, false, SilenceDrop, time.Now())
		}
	}
	sleep(ctx, r.settle())
	r.logf("waiting for the outbox to drain and the skills to agree")
	r.drain(ctx, time.Minute)
	r.checkpoint(ctx, "final")
	r.rec.setPhase("shutdown")
	stopLoad()
	r.fleet.wg.Wait()
	stopObs()
	wg.Wait()
	stopExits()
	r.logf("SIGTERM: graceful shutdown")
	r.procMu.Lock()
	defer r.procMu.Unlock()
	var stops sync.WaitGroup
	for _, s := range r.services() { // every node at once: the load has stopped, nothing is left to hand over
		stops.Go(func() {
			took, serr := s.stop(syscall.SIGTERM, 25*time.Second)
			if serr != nil {
				r.rec.note("graceful shutdown of %s: %v", orDash(s.name), serr)
			}
			r.logf("%s exited %s after SIGTERM", orDash(s.name), took.Round(time.Millisecond))
		})
	}
	stops.Wait()
	return nil
}

// settle is how long a fault is given to settle: a silent server has become unhealthy and a recovered
// one healthy.
func (r *runner) settle() time.Duration { return 3*r.cfg.Heartbeat + r.cfg.Monitor + time.Second }

// checkpoint records a scan of skill consistency after a fault settled.
func (r *runner) checkpoint(ctx context.Context, name string) {
	for range 10 {
		s := scanSkills(ctx, r.db.adminURL)
		if s.OK {
			s.Checkpoint = name
			r.rec.skills(s)
			return
		}
		sleep(ctx, time.Second)
	}
	r.rec.note("checkpoint %s: the database did not answer the skills scan", name)
}

// drain waits until the outbox is empty and no server's skills disagree with its status, up to limit
// (plus one reconciliation period for the skills).
func (r *runner) drain(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := undelivered(ctx, r.db.adminURL); err == nil && n == 0 {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	deadline = time.Now().Add(r.rec.h.Params.ReconcileEvery + 15*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if s := scanSkills(ctx, r.db.adminURL); s.OK && len(s.Bad) == 0 {
			return
		}
		sleep(ctx, time.Second)
	}
}

// watchExits notices an incarnation of s (node slot node; -1: the one process) that exits without the
// suite asking, records it, and starts a new one so the schedule can go on (the exit itself is a
// violation).
func (r *runner) watchExits(ctx context.Context, s *service, node int) {
	for ctx.Err() == nil {
		inc, done := s.running()
		if inc == nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
		r.procMu.Lock()
		unasked := !s.askedToStop(inc)
		if unasked && ctx.Err() == nil && s.current() == 0 {
			r.rec.note("%s incarnation %d exited on its own (%s); starting a new one", orDash(s.name), inc.N, inc.Exit)
			r.logf("%s exited on its own: %s; restarting it", orDash(s.name), inc.Exit)
			if node >= 0 {
				r.lb.set(node, false)
			}
			if _, err := s.start(ctx, time.Minute); err != nil {
				r.rec.note("restart after an unexpected exit: %v", err)
			} else if node >= 0 {
				r.lb.set(node, true)
			}
		}
		r.procMu.Unlock()
	}
}

// collect assembles the history after the run.
func (r *runner) collect(ctx context.Context) *History {
	h := r.rec.history()
	h.Ended = time.Now()
	h.Modules = r.fleet.infosOrNil()
	for _, svc := range r.services() {
		h.Incarnations = append(h.Incarnations, svc.incarnations()...)
	}
	for _, inc := range h.Incarnations {
		h.Stalls = append(h.Stalls, stallLines(inc.Log, inc.N)...)
		s := summarizeLog(inc.Log)
		keys := make([]string, 0, len(s.Messages))
		for k := range s.Messages {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h.Notes = append(h.Notes, fmt.Sprintf("%s log: %d× %s", filepath.Base(inc.Log), s.Messages[k], k))
		}
	}
	if r.db.cluster != nil {
		if err := r.db.cluster.Start(ctx); err != nil {
			h.Notes = append(h.Notes, "final read: "+err.Error())
		}
	}
	f, err := readFinal(ctx, r.db.adminURL, r.cfg.cluster(), &h.Writes)
	if err != nil {
		h.Notes = append(h.Notes, err.Error())
	}
	h.Final = f
	return h
}

func (f *fleet) infosOrNil() []ModuleInfo {
	if f == nil {
		return nil
	}
	return f.infos()
}

// pruneArtifacts keeps the newest keep-1 run directories starting with prefix under base.
func pruneArtifacts(base, prefix string, keep int) {
	m, _ := filepath.Glob(filepath.Join(base, prefix+"*"))
	sort.Strings(m)
	for len(m) >= keep {
		_ = os.RemoveAll(m[0])
		m = m[1:]
	}
}
