// Package actors is mcpfleet's actor system (protoactor-go): a fleet supervisor with one server actor
// per registered server, a skill registry actor, two persistence actors (the durable-command writer and
// the heartbeat stamper) and an alert dispatcher.
//
// The Fleet type is the only way in: HTTP handlers call its methods, which talk to the actors with
// futures bounded by a timeout; a timeout or a dead letter is ErrUnavailable, never a hang.
package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Config configures the actor system. The service passes every value (see service.FromEnv); a zero
// field, left by a test building a Config by hand, takes the default defined in package config.
type Config struct {
	HeartbeatInterval  time.Duration // H; default 10 s
	MonitorInterval    time.Duration // monitor period; default 5 s
	ManualMonitor      bool          // no automatic ticks: the caller runs RunMonitor or Tick (tests)
	StampFlushInterval time.Duration // heartbeat stamp window; default 500 ms (bounded: ≤ 1 s)
	StampBatchMax      int           // flush early at this many servers; default 5000
	WriteTimeout       time.Duration // how long a durable command may take to commit; default 5 s
	AskTimeout         time.Duration // how long a caller waits for an actor; default WriteTimeout + 2 s
	WriterMaxBatch     int           // commands per group commit; default 256
	WriterMaxPending   int           // queued durable requests before back-pressure; default 10000
	// SaturationLatency is the p99 time goroutines wait for a CPU from which the node refuses first
	// registrations (see saturation); default 25 ms, negative: never.
	SaturationLatency  time.Duration
	ReconcileInterval  time.Duration // skill reconciliation period; default 1 min
	AlertInterval      time.Duration // outbox sweep period; default 5 s
	AlertWebhookURL    string
	AlertWebhookSecret string
	Flap               FlapConfig        // flapping detection; defaults 15 min, 4 transitions
	MassSilence        MassSilenceConfig // off unless Fraction > 0
	// DormantAfter is how long a deregistered server's actor lives on without a message before it stops
	// and the server goes dormant (sleep.go); default 1 min.
	DormantAfter time.Duration
	// Sharded is cluster mode: the fleet starts owning no shard and runs only the servers of the
	// shards SetOwned gives it. Off (single-node mode) it owns every shard from the start.
	Sharded bool
}

// defaults sets every zero field of c to its default (package config).
func (c *Config) defaults() {
	c.HeartbeatInterval = config.Or(c.HeartbeatInterval, config.DefaultHeartbeatInterval)
	c.MonitorInterval = config.Or(c.MonitorInterval, config.DefaultMonitorInterval)
	c.StampFlushInterval = config.Or(c.StampFlushInterval, config.DefaultStampFlushInterval)
	c.WriteTimeout = config.Or(c.WriteTimeout, config.DefaultWriteTimeout)
	c.AskTimeout = config.Or(c.AskTimeout, c.WriteTimeout+2*time.Second) // a caller waits a little longer than a write may take
	c.ReconcileInterval = config.Or(c.ReconcileInterval, config.DefaultReconcileInterval)
	c.AlertInterval = config.Or(c.AlertInterval, config.DefaultAlertInterval)
	c.StampBatchMax = config.Or(c.StampBatchMax, config.DefaultStampBatchMax)
	c.WriterMaxBatch = config.Or(c.WriterMaxBatch, config.DefaultWriterMaxBatch)
	c.WriterMaxPending = config.Or(c.WriterMaxPending, config.DefaultWriterMaxPending)
	if c.SaturationLatency == 0 {
		c.SaturationLatency = config.DefaultSaturationLatency // negative stays: never saturated
	}
	c.Flap = c.Flap.WithDefaults()
	c.MassSilence.Min = config.Or(c.MassSilence.Min, config.DefaultMassSilenceMin)
	c.DormantAfter = config.Or(c.DormantAfter, defaultDormantAfter)
}

// Store is the persistence the actors need.
type Store interface {
	committer
	stampStore
	reconcileStore
	alertStore
	silenceStore
	LoadFleet(ctx context.Context, tenants []uuid.UUID, totals []int, fn func(persistence.Server) error) error
	ServerTotals(ctx context.Context, tenants []uuid.UUID) ([]int, error)
}

var _ Store = (*persistence.Store)(nil)

// Deps are the collaborators of the actor system.
type Deps struct {
	Clock      health.Clock // default health.RealClock
	Log        *slog.Logger // default slog.Default()
	Tracer     trace.Tracer // default a no-op tracer
	HTTPClient *http.Client // for alert webhooks; default a client with a 10 s timeout
	OnEvent    func(string) // optional observer of supervision events (restarts, respawns)
	// Metrics, if not nil, records the actors' metrics (and counts OnEvent's restarts and respawns).
	Metrics *telemetry.Metrics
	// Fences are the shards this node claimed (persistence.Store.ClaimShards) before Start: every durable
	// write of a server is sent under its shard's fence, and a write PostgreSQL refuses (persistence.ErrFenced:
	// another process claimed the shard since) makes the fleet give the shard up and stop its servers'
	// actors. Single-node mode claims every shard. Empty: no fencing (tests on a store of their own).
	Fences []persistence.Fence

	// Test hooks: observeSystem is handed the actor system as soon as it exists; spawnFails names an
	// actor whose spawn fails.
	observeSystem func(*actor.ActorSystem)
	spawnFails    string
}

// Fleet is the running actor system.
type Fleet struct {
	cfg      Config
	clock    health.Clock
	log      *slog.Logger
	system   *actor.ActorSystem
	guardian *actor.PID
	fleet    *actor.PID
	writer   *actor.PID
	stamper  *actor.PID
	skills   *actor.PID
	alerts   *actor.PID
	timers   []func()
	workers  *workers // the dispatcher of the server, fleet and stamper actors (dispatcher.go)
	readyAt  time.Time
	servers  int
	// stall is the monitor's accumulated stall (shared with the server actors): a server restored into
	// the fleet takes it as the stall at its evidence, so only stalls after its restore extend its deadline.
	stall   *lifecycle.Stall
	sdeps   *serverDeps // the server actors' and the fleet actor's shared dependencies
	metrics *telemetry.Metrics

	store Store
	own   *ownership
	// ownedServers counts the servers the fleet runs (the fleet actor adds and removes them).
	ownedServers *atomic.Int64
	stats        *MonitorStats

	stopOnce sync.Once // Stop runs once; a concurrent call waits for it
	stopErr  error
}

type epochCounter struct{ atomic.Uint64 }

func (e *epochCounter) next() uint64 { return e.Add(1) }

// guardian spawns the top-level actors with an explicit strategy: restart on panic, always.
type guardian struct{}

type spawnChild struct {
	name  string
	props *actor.Props
}

func (guardian) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*spawnChild); ok {
		pid, err := ctx.SpawnNamed(m.props, m.name)
		if err != nil {
			ctx.Respond(err)
			return
		}
		ctx.Respond(pid)
	}
}

// Start builds the actor system, rebuilds the fleet from PostgreSQL, repairs the skill cascade and
// starts the timers. When it returns the fleet is ready: every persisted server is known to the fleet
// with its deadline armed, running from now (restart grace: nobody is declared unhealthy until 3H after
// this moment unless evidence says otherwise; a server persisted as unhealthy stays unhealthy until
// evidence); its actor is spawned when something first needs it (fleetActor.wake).
// When it fails, every actor it spawned is stopped and the actor system shut down before it returns.
func Start(ctx context.Context, cfg Config, store Store, deps Deps) (_ *Fleet, err error) {
	cfg.defaults()
	deps = deps.withDefaults()
	log := deps.Log
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log.With("component", "protoactor") }),
		actor.WithDeadLetterRequestLogging(false),
	)
	system.EventStream.Subscribe(deadHeartbeats)
	if deps.observeSystem != nil {
		deps.observeSystem(system)
	}
	f := &Fleet{cfg: cfg, clock: deps.Clock, log: log, system: system, metrics: deps.Metrics, store: store,
		own: &ownership{}, ownedServers: &atomic.Int64{}, stats: &MonitorStats{}}
	switch {
	case cfg.Sharded: // cluster mode: SetOwned gives the shards, claimed as they are taken
	case len(deps.Fences) > 0:
		f.own.claimed(deps.Fences)
	default:
		f.own.owned.Store(uint64(allShards))
	}
	defer func() {
		if err != nil {
			f.abort()
		}
	}()
	if err := f.spawnActors(store, deps); err != nil {
		return nil, err
	}
	// The skill cascade is repaired from the persisted statuses alone, so PostgreSQL does it while the
	// fleet loads; Start waits for both (nothing it started outlives a failed Start).
	type repair struct {
		n   int64
		err error
	}
	repaired := make(chan repair, 1)
	go func() {
		n, err := ReconcileSkills(ctx, store)
		repaired <- repair{n, err}
	}()
	loadErr := f.load(ctx, store, cfg.Sharded)
	r := <-repaired
	if loadErr != nil {
		return nil, loadErr
	}
	if r.err != nil {
		return nil, fmt.Errorf("start actors: %w", r.err)
	} else if r.n > 0 {
		log.Warn("skill cascade repaired at start", "skills", r.n)
	}
	f.startTimers()
	system.Root.Send(f.alerts, &alertTick{}) // deliver what a previous run left in the outbox
	return f, nil
}

// withDefaults returns d with every unset collaborator at its default, and OnEvent counting into
// Metrics when both are set.
func (d Deps) withDefaults() Deps {
	if d.Clock == nil {
		d.Clock = health.RealClock{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Tracer == nil {
		d.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if d.HTTPClient == nil {
		d.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if m, observe := d.Metrics, d.OnEvent; m != nil {
		d.OnEvent = func(event string) {
			m.ActorEvent(event)
			if observe != nil {
				observe(event)
			}
		}
	}
	return d
}

// spawnActors spawns the guardian and, under it, the writer, the stamper, the skill registry, the
// alert dispatcher and the fleet supervisor, in that order (each later one is given the earlier ones).
func (f *Fleet) spawnActors(store Store, deps Deps) error {
	cfg, log, system := f.cfg, f.log, f.system
	t := newTel(deps.Tracer, deps.Metrics)
	gstrategy := actor.NewOneForOneStrategy(1000, time.Second, func(reason any) actor.Directive {
		log.Error("system actor failed; restarting it", "reason", reason)
		if deps.OnEvent != nil {
			deps.OnEvent("system_actor_restart")
		}
		return actor.RestartDirective
	})
	g, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return guardian{} },
		actor.WithSupervisor(gstrategy)), "system")
	if err != nil {
		return fmt.Errorf("start actors: %w", err)
	}
	f.guardian = g
	spawn := func(name string, props *actor.Props) (*actor.PID, error) {
		if deps.spawnFails == name {
			return nil, fmt.Errorf("spawn %s: test failure", name)
		}
		res, err := system.Root.RequestFuture(g, &spawnChild{name: name, props: props}, 5*time.Second).Result()
		if err != nil {
			return nil, fmt.Errorf("spawn %s: %w", name, err)
		}
		if e, ok := res.(error); ok {
			return nil, fmt.Errorf("spawn %s: %w", name, e)
		}
		return res.(*actor.PID), nil
	}
	epochs := &epochCounter{}
	f.workers = newWorkers(defaultWorkers())
	wcfg := writerConfig{
		maxBatch: cfg.WriterMaxBatch, maxPending: cfg.WriterMaxPending, retryBackoff: 50 * time.Millisecond,
		commitTimeout: cfg.WriteTimeout, tel: t,
	}
	queue := &writeQueue{cfg: wcfg}
	wcfg.queue = queue
	if f.writer, err = spawn("writer", newWriterProps(store, log, wcfg, epochs)); err != nil {
		return err
	}
	fleetPID := &atomic.Pointer[actor.PID]{}
	stamps := newStampTable(cfg.StampBatchMax)
	if f.stamper, err = spawn("stamper", newStamperProps(store, log, stamps, epochs, t, fleetPID, f.workers)); err != nil {
		return err
	}
	if f.skills, err = spawn("skills", newSkillsProps(store, log)); err != nil {
		return err
	}
	if f.alerts, err = spawn("alerts", newAlertsProps(store, deps.HTTPClient, cfg.AlertWebhookURL, cfg.AlertWebhookSecret, log, t)); err != nil {
		return err
	}
	sdeps := &serverDeps{
		clock: deps.Clock, writeTimeout: cfg.WriteTimeout,
		life: &lifecycle.Config{Thresholds: health.Thresholds{Interval: cfg.HeartbeatInterval}, Flap: cfg.Flap, MassSilence: cfg.MassSilence.Fraction > 0},
		log:  log, bursts: telemetry.NewBurstLog(log, deps.Clock.Now, telemetry.BurstLogInterval), tracer: deps.Tracer, metrics: deps.Metrics, writer: f.writer, stamper: f.stamper, stamps: stamps, alerts: f.alerts,
		stall: &lifecycle.Stall{}, own: f.own, count: f.ownedServers, stats: f.stats, handover: newHandover(), workers: f.workers, pids: &pidCache{},
		writeQueue: queue, load: newSaturation(cfg.SaturationLatency, log, deps.Metrics), sleepAfter: cfg.DormantAfter,
	}
	sdeps.serverProps = newServerProps(sdeps)
	f.stall, f.sdeps = sdeps.stall, sdeps
	// The mass-silence guard counts in memory on a single node (it runs the whole tenant, and a permit
	// costs no round trip); a cluster node runs a share of each tenant, so it counts in PostgreSQL.
	var sharedSilence silenceStore
	if cfg.Sharded {
		sharedSilence = store
	}
	f.fleet, err = spawn("fleet", newFleetProps(sdeps, cfg.MonitorInterval, cfg.MassSilence, sharedSilence, deps.OnEvent))
	fleetPID.Store(f.fleet)
	return err
}

// startTimers starts the periodic ticks: the monitor (unless it is manual), the stamp flush, skill
// reconciliation and the alert outbox sweep.
func (f *Fleet) startTimers() {
	if !f.cfg.ManualMonitor {
		f.timers = append(f.timers, every(f.system, f.cfg.MonitorInterval, f.fleet, &monitorTick{auto: true}))
	}
	f.timers = append(f.timers,
		f.sdeps.load.start(),
		every(f.system, f.cfg.StampFlushInterval, f.stamper, &stampTick{}),
		every(f.system, f.cfg.ReconcileInterval, f.skills, &reconcileTick{}),
		every(f.system, f.cfg.AlertInterval, f.alerts, &alertTick{}),
	)
}

// abort undoes a Start that failed: it stops the timers and every actor spawned (the guardian, and
// with it its children, which fail what they hold) and shuts the actor system down.
func (f *Fleet) abort() {
	for _, cancel := range f.timers {
		cancel()
	}
	if f.guardian != nil {
		if err := f.system.Root.StopFuture(f.guardian).Wait(); err != nil {
			f.log.Warn("actors not stopped after a failed start", "err", err)
		}
	}
	f.system.Shutdown()
	if f.workers != nil {
		f.workers.stop()
	}
}

// load rebuilds the fleet from PostgreSQL, every tenant's servers (none when sharded: SetOwned loads the
// shards the node is given). The fleet actor takes the servers in, in chunks, while the rest are still
// read; once all are read, that moment is readiness, and armLoaded restores every server's life from
// it and arms its deadline.
func (f *Fleet) load(ctx context.Context, store Store, sharded bool) error {
	f.readyAt = f.clock.Now()
	if sharded {
		return nil
	}
	tenants, err := store.TenantIDs(ctx)
	if err != nil {
		return fmt.Errorf("load fleet: %w", err)
	}
	// The fleet sizes its maps once for the whole load (loadMsg.expect) instead of growing them: growing
	// to 250,000 servers was a fifth of the service's CPU in a cold start.
	totals, err := store.ServerTotals(ctx, tenants)
	if err != nil {
		return fmt.Errorf("load fleet: %w", err)
	}
	expect := make(map[uuid.UUID]int, len(tenants))
	for i, t := range tenants {
		expect[t] = totals[i]
	}
	n := 0
	chunk := make([]*serverRecord, 0, loadChunk)
	err = store.LoadFleet(ctx, tenants, totals, func(s persistence.Server) error {
		r := newLoadedRecord(s)
		f.metrics.ServerStatus("", r.statusOf())
		if chunk = append(chunk, r); len(chunk) == loadChunk {
			f.system.Root.Send(f.fleet, &loadMsg{records: chunk, expect: expect})
			expect = nil // the first message sizes the maps
			chunk = make([]*serverRecord, 0, loadChunk)
		}
		n++
		return nil
	})
	if err != nil {
		return fmt.Errorf("load fleet: %w", err)
	}
	if len(chunk) > 0 {
		f.system.Root.Send(f.fleet, &loadMsg{records: chunk, expect: expect})
	}
	f.readyAt = f.clock.Now()
	if _, err := f.system.Root.RequestFuture(f.fleet, &armLoaded{at: f.readyAt, stall: f.stall.Total()}, time.Minute).Result(); err != nil {
		return fmt.Errorf("load fleet: %w", err)
	}
	f.servers = n
	f.log.Info("fleet loaded", "servers", n, "tenants", len(tenants))
	return nil
}

// loadChunk is how many servers one loadMsg hands the fleet actor.
const loadChunk = 10000

// newLoadedRecord is the record of a server read from PostgreSQL (its life is the caller's to restore).
func newLoadedRecord(s persistence.Server) *serverRecord {
	r := &serverRecord{}
	r.setRow(s)
	r.registrationTrace = linkToTrace(r.row.traceID) // the row's trace id, parsed once
	return r
}

// sendLoad hands loaded records to the fleet actor, in chunks, each restored as arm says and armed as
// it is taken in, and waits for it to take them. The records are nobody's yet: after this, only the
// fleet (while the server is dormant) and then the server's actor read them.
func (f *Fleet) sendLoad(all []*serverRecord, arm *armLoaded) error {
	expect := map[uuid.UUID]int{}
	for _, r := range all {
		expect[r.tenantID()]++
	}
	for i := 0; i < len(all); i += loadChunk {
		chunk := all[i:min(i+loadChunk, len(all))]
		if _, err := f.system.Root.RequestFuture(f.fleet, &loadMsg{records: chunk, arm: arm, expect: expect}, time.Minute).Result(); err != nil {
			return err
		}
		expect = nil // the first message sizes the maps
	}
	return nil
}

// ReadyAt is when the fleet finished loading: the start of restart grace.
func (f *Fleet) ReadyAt() time.Time { return f.readyAt }

// Register registers or re-registers a module. It returns after the registration committed. A first
// registration the saturated node refuses is held for the node to open (saturation.hold) and tried again;
// ErrSaturated only once the hold ends with the node still saturated (or too many are held already).
func (f *Fleet) Register(ctx context.Context, req RegisterRequest) (RegisterResult, error) {
	var until time.Time // the hold's end, from the first refusal
	for {
		res, err := f.askForwarded(ctx, &registerMsg{req: req, deadline: f.writeDeadline()})
		if err != nil {
			return RegisterResult{}, err
		}
		r := res.(*registerReply)
		if errors.Is(r.err, ErrSaturated) {
			if until.IsZero() {
				until = f.sdeps.load.holdUntil(ctx)
			}
			if f.sdeps.load.hold(ctx, until) {
				continue
			}
		}
		return r.res, r.err
	}
}

// Heartbeat accepts a heartbeat for serverID from tenantID. A server that was not healthy is recovered,
// durably, before it returns. A caller that gives up (ctx done: its client went away) is answered at
// once, ErrUnavailable: the heartbeat stays with the server's actor, which handles it as if the answer
// were still awaited, but nothing waits for it — a saturated service does not hold a request, its
// buffers and its goroutine for every client that stopped waiting.
//
// It is askServer without a future: the heartbeat carries a channel for its answer, so the hottest
// round trip of the service registers no PID, formats no id and arms no timer in the actor system. A
// heartbeat for an actor that is gone is answered actor.ErrDeadLetter by deadHeartbeats, as a future
// would have been, and handled as askServer handles one.
func (f *Fleet) Heartbeat(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (HeartbeatResult, error) {
	if !f.own.ownsServer(serverID) {
		return HeartbeatResult{}, ErrNotOwner
	}
	timeout, err := f.askTimeout(ctx)
	if err != nil {
		return HeartbeatResult{}, err
	}
	deadline := f.writeDeadline()
	t := startTimer(timeout)
	defer stopTimer(t)
	for try := 0; ; try++ {
		msg := newHeartbeatMsg(tenantID, trc, deadline)
		f.system.Root.Send(f.serverPID(serverID), msg)
		select {
		case r := <-msg.reply:
			if !errors.Is(r.err, actor.ErrDeadLetter) {
				return r.res, r.err
			}
			if again, err := f.noActor(ctx, tenantID, serverID, try == 0); !again {
				return HeartbeatResult{}, err
			}
		case <-t.C:
			return HeartbeatResult{}, fmt.Errorf("%w: no answer in %s", ErrUnavailable, timeout)
		case <-ctx.Done():
			return HeartbeatResult{}, fmt.Errorf("%w: the caller stopped waiting: %w", ErrUnavailable, context.Cause(ctx))
		}
	}
}

// deadHeartbeats answers a heartbeat sent with a reply channel to an actor that does not exist (it is
// published as a dead letter): actor.ErrDeadLetter, what a future would have been told.
func deadHeartbeats(evt any) {
	if dl, ok := evt.(*actor.DeadLetterEvent); ok {
		if m, ok := dl.Message.(*heartbeatMsg); ok {
			m.answer(heartbeatReply{err: actor.ErrDeadLetter})
		}
	}
}

// Deregister marks serverID deregistered and its skills unavailable, durably, before it returns. The
// row it returns carries the capability advertisement when this call committed the deregistration (the
// commit returns it); a server already deregistered is answered with the actor's slim row, without it.
func (f *Fleet) Deregister(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (persistence.Server, error) {
	res, err := f.askServer(ctx, tenantID, serverID, &deregisterMsg{tenantID: tenantID, trace: trc, deadline: f.writeDeadline()})
	if err != nil {
		return persistence.Server{}, err
	}
	r := res.(*deregisterReply)
	return r.server, r.err
}

// writeDeadline is the deadline of a caller's durable write: the caller waits a little longer than
// this for the answer, so a write is either committed before the caller is answered or never.
func (f *Fleet) writeDeadline() time.Time { return time.Now().Add(f.cfg.WriteTimeout) }

func (f *Fleet) serverPID(serverID uuid.UUID) *actor.PID {
	return f.sdeps.pids.get(f.system, f.fleet, serverID)
}

// askServer sends msg straight to the server's actor. A dead letter means no such actor: the fleet is
// asked whether it knows the server (then it is being respawned: ErrUnavailable) or not (ErrNotFound).
func (f *Fleet) askServer(ctx context.Context, tenantID, serverID uuid.UUID, msg any) (any, error) {
	if !f.own.ownsServer(serverID) {
		return nil, ErrNotOwner
	}
	for try := 0; ; try++ {
		res, err := f.ask(ctx, f.serverPID(serverID), msg)
		if !errors.Is(err, actor.ErrDeadLetter) {
			return res, err
		}
		if again, err := f.noActor(ctx, tenantID, serverID, try == 0); !again {
			return nil, err
		}
	}
}

// noActor handles a message to serverID's actor that found none: the fleet is asked whether it knows
// the server. Dormant, the fleet spawns its actor and again is true: the caller sends its message once
// more, on its first try only (first) — a dead letter after that is a restart. So is an actor that runs
// by the time the fleet answers: two requests for a dormant server at once (a fleet's modules after a
// restart or failover) both find no actor, and the lookup of the first wakes it for both. Being
// respawned, the error is ErrUnavailable; unknown, ErrNotFound (or ErrUnavailable when the server's shard
// has just moved to another process).
func (f *Fleet) noActor(ctx context.Context, tenantID, serverID uuid.UUID, first bool) (again bool, err error) {
	lres, lerr := f.ask(ctx, f.fleet, &lookupMsg{tenantID: tenantID, serverID: serverID})
	if lerr != nil {
		return false, lerr
	}
	if r := lres.(*lookupReply); r.running && first {
		return true, nil
	} else if r.known {
		return false, fmt.Errorf("%w: server actor restarting", ErrUnavailable)
	}
	if !f.own.ownsServer(serverID) {
		return false, fmt.Errorf("%w: the server's shard is owned by another process", ErrUnavailable)
	}
	return false, ErrNotFound
}

// askForwarded asks the fleet actor with msg, which it forwards to a server's actor. A dead letter means
// that actor stopped between the forward and the message's arrival (it went asleep: sleep.go), so
// nothing ran: ErrUnavailable, and the caller tries again.
func (f *Fleet) askForwarded(ctx context.Context, msg any) (any, error) {
	res, err := f.ask(ctx, f.fleet, msg)
	if errors.Is(err, actor.ErrDeadLetter) {
		return nil, fmt.Errorf("%w: the server's actor stopped before it took the request; nothing was recorded", ErrUnavailable)
	}
	return res, err
}

func (f *Fleet) ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	timeout, err := f.askTimeout(ctx)
	if err != nil {
		return nil, err
	}
	res, err := f.system.Root.RequestFuture(pid, msg, timeout).Result()
	switch {
	case errors.Is(err, actor.ErrDeadLetter):
		return nil, err
	case errors.Is(err, actor.ErrTimeout):
		return nil, fmt.Errorf("%w: no answer in %s", ErrUnavailable, timeout)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return res, nil
}

// askTimeout is how long an ask waits for its answer: AskTimeout, or less if ctx ends sooner.
func (f *Fleet) askTimeout(ctx context.Context) (time.Duration, error) {
	timeout := f.cfg.AskTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return 0, fmt.Errorf("%w: deadline passed", ErrUnavailable)
	}
	return timeout, nil
}

// RunMonitor runs one monitor pass now and returns when every server whose deadline has come (the
// fleet's deadline heap: at least every server the pass can change) has evaluated it and committed what
// it decided (transition, audit, outbox, skill cascade). Tests drive the fake clock with it.
func (f *Fleet) RunMonitor(ctx context.Context) error { return f.runRound(ctx, false) }

// Tick runs one monitor pass as the periodic ticker does — including the self-health check that
// measures how late the tick is — and waits for it like RunMonitor.
func (f *Fleet) Tick(ctx context.Context) error { return f.runRound(ctx, true) }

func (f *Fleet) runRound(ctx context.Context, auto bool) error {
	round := &monitorRound{}
	round.wg.Add(1) // held until the fleet has added one count per server
	f.system.Root.Send(f.fleet, &monitorTick{round: round, auto: auto})
	done := make(chan struct{})
	go func() { round.wg.Wait(); close(done) }()
	// The fleet adds its counts while handling the tick; a ping behind it in the mailbox proves it has.
	if _, err := f.ask(ctx, f.fleet, &lookupMsg{}); err != nil {
		return err
	}
	round.wg.Done()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("run monitor: %w", ctx.Err())
	}
}

// Stop stops the timers, drains the writer and the stamper (the actor system's Shutdown does not), and
// shuts the actor system down. Work acknowledged before Stop is committed when it returns nil. Stop
// may be called more than once and from several goroutines: a later call waits for the first to finish
// and returns its result.
func (f *Fleet) Stop(ctx context.Context) error {
	f.stopOnce.Do(func() { f.stopErr = f.stop(ctx) })
	return f.stopErr
}

func (f *Fleet) stop(ctx context.Context) error {
	for _, cancel := range f.timers {
		cancel()
	}
	var errs []error
	for _, pid := range []*actor.PID{f.writer, f.stamper} {
		if _, err := f.ask(ctx, pid, &drainMsg{}); err != nil {
			errs = append(errs, fmt.Errorf("drain %s: %w", pid.Id, err))
		}
	}
	// One last delivery attempt of the outbox; what is not delivered stays in it for the next start.
	if _, err := f.ask(ctx, f.alerts, &flushAlerts{}); err != nil {
		f.log.Warn("alerts not flushed at shutdown; they stay in the outbox", "err", err)
	}
	f.system.Shutdown()
	f.workers.stop()
	return errors.Join(errs...)
}
