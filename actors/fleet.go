package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// fleetActor supervises one server actor per registered server, spawned by server_id (PID id
// "fleet/<server_id>"; a server loaded from PostgreSQL gets its actor when first needed, see wake). It
// routes registrations (so two registrations of one module are serialised and
// can never create two servers), sends each monitor tick to the servers whose deadline has come (its
// deadline heap, deadlines.go), and respawns a server actor that was stopped
// by anything but the fleet itself. Its supervisor strategy restarts a panicking server actor in place.
//
// It shares no state with the server actors: it reads no field of a serverRecord an actor has had (it
// only hands the record to the producer of each incarnation of its actor; the exceptions are the
// published deadline, dueHint, and the status of a server no actor changes — dormant, or whose actor has
// told it it went asleep — leaving the servers gauge in forgetShards) and learns by message what it
// must know (serverRegistered, removeServer, permitMsg, armMsg, asleepMsg).
type fleetActor struct {
	deps     *serverDeps
	entries  map[uuid.UUID]*fleetEntry // every server the fleet runs, with its actor's PID when one is alive
	byModule moduleIndex
	removing map[uuid.UUID]bool
	sleeping map[uuid.UUID]bool // servers whose actor went asleep and has not terminated yet (sleep.go)
	onEvent  func(event string)
	stopping bool // the fleet itself is stopping: its children end with it and are not respawned

	monitor   *lifecycle.Monitor // measures the lateness of automatic ticks into deps.stall
	deadlines deadlineHeap       // the servers' deadline bounds (deadlines.go): a tick checks only what is due
	unarmed   []*serverRecord    // taken in by the start's load, waiting for armLoaded
	heldAt    time.Time          // the last tick while the membership was not confirmed (zero: it was)
	tenants   map[uuid.UUID]int
	silence   *lifecycle.MassSilence // nil when the guard is off

	// Cluster mode, guard on: the permits are the tenant's, counted in PostgreSQL (askShared).
	shared      silenceStore // nil: the guard counts in memory (single-node mode: the node has the whole tenant)
	period      time.Duration
	periodStart time.Time                  // the wall-clock period of the last tick (periodOf)
	waiting     map[uuid.UUID][]*actor.PID // permit requests not yet sent to the shared count
	asking      map[uuid.UUID]bool         // a shared count call of the tenant is in flight
	spent       map[uuid.UUID]bool         // the tenant's budget of periodStart is spent: refuse without asking
}

// fleetEntry is the fleet's own view of one server: whether a registration of it has committed (told
// by serverRegistered), its actor and its deadline bound. rec is the server actor's: the fleet passes it
// to each incarnation and reads only what never changes after it made it (id, tenantID, key), or the
// rest while no incarnation changes it (dormant, or asleep: sleep.go). One is held per server: it is
// kept small (32 bytes).
type fleetEntry struct {
	registered bool
	// dormant: the server has no actor and one may be spawned when needed (see wake): it was loaded from
	// PostgreSQL and nothing has needed its actor yet, or it is deregistered and its actor went asleep.
	dormant bool
	armed   int64      // the server's deadline bound in the heap (UnixNano, monitor clock); 0: none
	pid     *actor.PID // the running incarnation of its actor; nil while it is respawned or dormant
	rec     *serverRecord
}

// child is the PID of server id's running actor, or nil. A dormant server's actor is spawned first
// (wake): whoever asks for a server's actor needs it.
func (f *fleetActor) child(ctx actor.Context, id uuid.UUID) *actor.PID {
	e := f.entries[id]
	if e == nil {
		return nil
	}
	f.wake(ctx, id, e)
	return e.pid
}

// wake spawns the actor of a dormant server. A server loaded from PostgreSQL (a start, a shard taken)
// gets its actor only when something needs it — a message to it that found no actor (lookupMsg), its
// deadline (a monitor tick), a registration routed through the fleet — so a fleet is ready once its
// servers are known and their deadlines armed, not once 250,000 actors exist, and a server that never
// speaks again (unhealthy, its module gone) costs no actor. It reports whether it spawned.
func (f *fleetActor) wake(ctx actor.Context, id uuid.UUID, e *fleetEntry) bool {
	if !e.dormant {
		return false
	}
	e.dormant = false
	f.spawn(ctx, id)
	return true
}

// serverRegistered tells the fleet that a server's first registration or configuration committed.
type serverRegistered struct{ serverID uuid.UUID }

// fleetChunk bounds how many servers one fan-out message touches, so heartbeats interleave with a tick.
const fleetChunk = 2000

// loadMsg hands the fleet servers read from PostgreSQL at start or with a shard (all registered). They
// are taken in dormant: their actors are spawned when needed (wake). With arm set (a shard's servers),
// each is restored as arm says and its deadline armed at once, and the message is answered with
// loaded; with arm nil (the start's load, sent while the rest is still being read, and not answered),
// the records wait, unarmed, for armLoaded.
type loadMsg struct {
	records []*serverRecord
	arm     *armLoaded
	// expect, if more than the fleet holds, is how many servers the whole load brings (this message's
	// and the ones after it), by tenant: an empty fleet sizes its maps for them once instead of growing
	// them.
	expect map[uuid.UUID]int
}

// armLoaded ends the start's load: every server taken in unarmed is restored as of at (readiness: the
// start of restart grace) with the monitor's stall at that moment, and its deadline bound armed. It
// is answered with loaded.
type armLoaded struct {
	at    time.Time
	stall time.Duration
}

type loaded struct{}

type respawnMsg struct{ id uuid.UUID }

// shared, if not nil and the guard is on, is where the tenants' mass-silence counts are kept (cluster
// mode); nil keeps them in memory.
func newFleetProps(deps *serverDeps, period time.Duration, ms MassSilenceConfig, shared silenceStore, onEvent func(string)) *actor.Props {
	strategy := actor.NewOneForOneStrategy(10, 10*time.Second, func(reason any) actor.Directive {
		deps.log.Error("server actor failed; restarting it", "reason", reason)
		if onEvent != nil {
			onEvent("server_actor_restart")
		}
		return actor.RestartDirective
	})
	return actor.PropsFromProducer(func() actor.Actor {
		f := &fleetActor{
			deps: deps, entries: map[uuid.UUID]*fleetEntry{},
			byModule: moduleIndex{}, removing: map[uuid.UUID]bool{}, sleeping: map[uuid.UUID]bool{}, onEvent: onEvent,
			monitor: lifecycle.NewMonitor(period, deps.stall), tenants: map[uuid.UUID]int{},
			silence: lifecycle.NewMassSilence(ms), period: period,
			waiting: map[uuid.UUID][]*actor.PID{}, asking: map[uuid.UUID]bool{}, spent: map[uuid.UUID]bool{},
		}
		if f.silence != nil {
			f.shared = shared
		}
		return f
	}, actor.WithSupervisor(strategy), actor.WithMailbox(unboundedMailbox()), actor.WithDispatcher(deps.workers.withThroughput(fleetThroughput)))
}

// fleetThroughput is the messages the fleet actor handles per mailbox run before it yields. Every
// first registration and every monitor tick of the node passes through this one actor, while each server
// actor handles only its own: when the machine is saturated, a yield sends the fleet's goroutine to the
// back of the Go scheduler's queue behind every runnable request goroutine. At protoactor's 300 a run,
// registering 250,000 on two cores, the fleet fell behind its mailbox for good from ~156,000 servers:
// monitor ticks handled up to 19 s late and every registration timing out for minutes while heartbeats
// were answered. At 100,000 a run no tick was late, and registrations kept committing until PostgreSQL
// was the limit (bench/REPORT-250k.md).
const fleetThroughput = 100_000

func (f *fleetActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *loadMsg:
		if len(f.entries) == 0 && len(msg.expect) > 0 {
			total := 0
			for t, n := range msg.expect {
				f.byModule.reserve(t, n)
				total += n
			}
			f.entries = make(map[uuid.UUID]*fleetEntry, total)
		}
		for _, rec := range msg.records {
			f.enter(rec, true).dormant = true
			if msg.arm == nil {
				f.unarmed = append(f.unarmed, rec)
			} else {
				f.restore(rec, msg.arm)
			}
		}
		if msg.arm != nil {
			ctx.Respond(&loaded{})
		}
	case *armLoaded:
		for _, rec := range f.unarmed {
			f.restore(rec, msg)
		}
		f.unarmed = nil
		ctx.Respond(&loaded{})
	case *registerMsg:
		f.register(ctx, msg)
	case *configureMsg:
		f.configure(ctx, msg)
	case *serverRegistered:
		if e := f.entries[msg.serverID]; e != nil && !e.registered {
			e.registered = true
			f.deps.count.Add(1)
		}
	case *lookupMsg:
		e, ok := f.entries[msg.serverID]
		known := ok && e.rec.tenantID() == msg.tenantID
		// Running: woken now, or since the caller's message found no actor (another's lookup woke it).
		ctx.Respond(&lookupReply{known: known, running: known && (f.wake(ctx, msg.serverID, e) || e.pid != nil)})
	case *armMsg:
		f.arm(msg)
	case *monitorTick:
		var ids []uuid.UUID
		if at, judged := f.tick(msg); judged {
			ids = f.due(at.UnixNano())
		}
		if msg.round != nil {
			msg.round.wg.Add(len(ids))
		}
		if len(ids) > 0 {
			ctx.Send(ctx.Self(), &tickChunk{ids: ids, round: msg.round})
		}
	case *tickChunk:
		n := min(len(msg.ids), fleetChunk)
		for _, id := range msg.ids[:n] {
			if pid := f.child(ctx, id); pid != nil {
				ctx.Send(pid, &evaluateMsg{round: msg.round})
			} else {
				msg.round.done()
			}
		}
		if n < len(msg.ids) {
			ctx.Send(ctx.Self(), &tickChunk{ids: msg.ids[n:], round: msg.round})
		}
	case *removeServer:
		f.remove(ctx, msg)
	case *asleepMsg:
		f.asleep(ctx, msg)
	case *shardFenced:
		f.fenced(ctx, msg)
	case *dropShards:
		f.dropShards(ctx, msg)
	case *actor.Stopping:
		f.stopping = true
	case *actor.Terminated:
		f.terminated(ctx, msg)
	case *permitMsg:
		if f.shared == nil {
			ctx.Respond(&permitReply{granted: f.permit(ctx, msg.tenantID)})
			return
		}
		if f.spent[msg.tenantID] {
			f.silence.Refused(msg.tenantID, 1)
			ctx.Respond(&permitReply{granted: false})
			return
		}
		f.waiting[msg.tenantID] = append(f.waiting[msg.tenantID], ctx.Sender())
		f.askShared(ctx, msg.tenantID)
	case *sharedPermits:
		f.answerShared(ctx, msg)
	case *writeResult:
		if err := msg.err(); err != nil {
			f.deps.log.Error("fleet alert not written", "err", err)
		}
	case *respawnMsg:
		if e := f.entries[msg.id]; e != nil && e.pid == nil {
			f.spawn(ctx, msg.id)
		}
	}
}

// add takes a new server into the fleet and spawns its actor. rec is read here, before any server
// actor has it, and never again.
func (f *fleetActor) add(ctx actor.Context, rec *serverRecord, registered bool) {
	f.enter(rec, registered)
	f.spawn(ctx, rec.id())
}

// enter takes a new server into the fleet's maps, without an actor, and returns its entry.
// restore gives a loaded server its life as of arm.at (its restart grace runs from then) with the
// monitor's stall at that moment, and arms its deadline bound if time alone can change it.
func (f *fleetActor) restore(rec *serverRecord, arm *armLoaded) {
	rec.life = lifecycle.Restore(rec.statusOf(), arm.at, arm.stall)
	if due, ok := rec.life.Due(f.deps.life); ok {
		f.arm(&armMsg{id: rec.id(), at: due.UnixNano()})
	}
}

func (f *fleetActor) enter(rec *serverRecord, registered bool) *fleetEntry {
	e := &fleetEntry{registered: registered, rec: rec}
	f.entries[rec.id()] = e
	f.byModule.put(rec.key(), rec.id())
	f.tenants[rec.tenantID()]++
	if registered {
		f.deps.count.Add(1)
	}
	return e
}

func (f *fleetActor) register(ctx actor.Context, msg *registerMsg) {
	if err := pastDeadline(msg.deadline); err != nil {
		// Not even a span or an actor: behind a backlog, the fleet's time goes to registrations whose
		// callers can still be answered.
		ctx.Respond(&registerReply{err: err})
		return
	}
	span := startSpan(f.deps.tracer, msg.req.Trace, "fleet.register")
	key := moduleKey{tenantID: msg.req.TenantID, moduleName: msg.req.ModuleName}
	id, ok := f.byModule.get(key)
	if !ok {
		if !f.deps.own.owns(ModuleShard(key.tenantID, key.moduleName)) {
			endSpan(span, ErrNotOwner)
			ctx.Respond(&registerReply{err: ErrNotOwner})
			return
		}
		// Refused here, before a record or an actor exists, not at the writer's door (isAdmission), where a
		// refused first registration costs a spawn and a removal — what a saturated node can least afford.
		if err := f.deps.load.refusal(); err != nil {
			endSpan(span, err)
			ctx.Respond(&registerReply{err: err})
			return
		}
		id = newServerID(key)
		f.add(ctx, newServerRecord(id, key), false)
	}
	pid := f.child(ctx, id)
	setServerAttrs(span, key.tenantID, id, key.moduleName)
	if pid == nil {
		endSpan(span, ErrUnavailable)
		ctx.Respond(&registerReply{err: ErrUnavailable})
		return
	}
	msg.req.Trace = carrierOf(span) // the server actor's span is a child of this one
	span.End()
	ctx.Forward(pid)
}

// remove forgets a server whose first registration failed (never one that registered) and, when the
// registration committed on the module's existing server instead (msg.row), takes that one in.
func (f *fleetActor) remove(ctx actor.Context, msg *removeServer) {
	if e, ok := f.entries[msg.serverID]; ok && !e.registered {
		delete(f.entries, msg.serverID)
		f.deps.pids.forget(msg.serverID)
		f.tenants[e.rec.tenantID()]--
		f.byModule.remove(msg.key, msg.serverID)
		if e.pid != nil {
			f.removing[msg.serverID] = true
			ctx.Poison(e.pid)
		}
	}
	if msg.row != nil {
		f.adoptExisting(ctx, msg)
	}
}

// adoptExisting runs the server PostgreSQL holds for a module whose registration committed on it while
// the fleet ran another id for the module (removeServer.row): such a server is in the database and, if
// its shard is this node's, must have an actor here. The registration's caller is answered with its
// result; when the server's shard is not this node's, or the fleet already runs it, with ErrUnavailable
// (the caller tries again, and reaches it).
func (f *fleetActor) adoptExisting(ctx actor.Context, msg *removeServer) {
	row := *msg.row
	_, running := f.entries[row.ServerID]
	if running || row.TenantID != msg.key.tenantID || !f.deps.own.ownsServer(row.ServerID) {
		ctx.Send(msg.reply, &registerReply{err: fmt.Errorf("%w: module registered under another id", ErrUnavailable)})
		return
	}
	rec := newLoadedRecord(row)
	// Its registration has just committed: fresh evidence, as a registration gives.
	rec.life = lifecycle.Restore(row.Status, f.deps.clock.Now(), f.deps.stall.Total())
	f.deps.metrics.ServerStatus("", row.Status)
	f.add(ctx, rec, true)
	f.deps.log.Warn("module's server found in the database under another id: running it", "server_id", row.ServerID, "module", row.ModuleName)
	ctx.Send(msg.reply, &registerReply{res: RegisterResult{Server: row, Created: msg.created}})
}

// terminated respawns a server actor stopped by anything but the fleet, with the same record; while
// the fleet stops, none (a respawned child would keep the fleet from ever finishing its stop).
func (f *fleetActor) terminated(ctx actor.Context, msg *actor.Terminated) {
	id, err := uuid.Parse(strings.TrimPrefix(msg.Who.Id, ctx.Self().Id+"/"))
	if err != nil || f.stopping {
		return
	}
	if f.removing[id] {
		delete(f.removing, id)
		return
	}
	if f.fellAsleep(id) {
		return
	}
	e := f.entries[id]
	if e != nil && e.pid != nil && e.pid.Equal(msg.Who) {
		e.pid = nil
	}
	if e != nil && e.pid == nil {
		f.deps.log.Warn("server actor stopped; respawning it", "server_id", id)
		if f.onEvent != nil {
			f.onEvent("server_actor_respawn")
		}
		f.spawn(ctx, id)
	}
}

// spawn starts an incarnation of server id's actor over its record.
func (f *fleetActor) spawn(ctx actor.Context, id uuid.UUID) {
	name := id.String()
	pidID := ctx.Self().Id + "/" + name // the PID id protoactor gives a child
	f.deps.handover.put(pidID, f.entries[id].rec)
	pid, err := ctx.SpawnNamed(f.deps.serverProps, name)
	if err != nil {
		f.deps.handover.take(pidID)
		// The old process may not be unregistered yet: try again shortly.
		f.deps.log.Warn("spawn server actor failed; retrying", "server_id", id, "err", err)
		system, self := ctx.ActorSystem(), ctx.Self()
		time.AfterFunc(50*time.Millisecond, func() { system.Root.Send(self, &respawnMsg{id: id}) })
		return
	}
	f.entries[id].pid = pid
	f.deps.pids.put(id, pid)
}

// tick does the fleet's part of a monitor tick before the fan-out: the self-health check (an automatic
// tick handled later than its period means the monitor stalled; lifecycle.Monitor credits the stall to
// every deadline) and the mass-silence guard's new period. It returns the tick's time on the monitor's
// clock, the time the deadlines due are popped at, and whether the servers are judged this tick (not
// while the cluster membership is unconfirmed, see holdUnconfirmed: their deadlines stay in the heap).
func (f *fleetActor) tick(msg *monitorTick) (time.Time, bool) {
	now := f.deps.clock.Now()
	if p := periodOf(now, f.period); !p.Equal(f.periodStart) {
		f.periodStart = p
		clear(f.spent)
	}
	if msg.auto {
		if late := f.monitor.Tick(now); late > 0 {
			f.deps.log.Warn("monitor stalled: deadlines extended by the stall", "stall", late.String())
			if f.onEvent != nil {
				f.onEvent("monitor_stall")
			}
		}
	}
	held := f.holdUnconfirmed()
	for _, r := range f.silence.NewPeriod() {
		f.deps.log.Warn("mass-silence guard released: no more servers held", "tenant_id", r.TenantID, "held", r.Held)
	}
	return lifecycle.MonitorTime(now, f.deps.stall.Total()), !held
}

// holdUnconfirmed reports whether this node's cluster membership is unconfirmed, and counts the time
// between ticks during which it was as a stall of the monitor. While it is, no server is judged (the
// tick checks none), and afterwards that time is not silence: a node that cannot read etcd cannot know
// whether the requests of its servers still reach it (it may be partitioned and its shards taken by
// others, whose claim a transaction of its own left open may be holding up), so a silence it sees then
// is no evidence. Its deadlines run again, net of that time, once it is confirmed.
func (f *fleetActor) holdUnconfirmed() bool {
	confirmed := f.deps.confirmed.Load()
	now := f.deps.clock.Now()
	if confirmed == nil || (*confirmed)() {
		if !f.heldAt.IsZero() {
			f.deps.stall.Add(now.Sub(f.heldAt))
			f.deps.log.Info("cluster membership confirmed again: servers are judged again")
			f.heldAt = time.Time{}
		}
		return false
	}
	if f.heldAt.IsZero() {
		f.deps.log.Warn("cluster membership not confirmed (etcd not read within its lease): no server is judged until it is")
		if f.onEvent != nil {
			f.onEvent("membership_unconfirmed")
		}
	} else {
		f.deps.stall.Add(now.Sub(f.heldAt))
	}
	f.heldAt = now
	return true
}

// permit grants a server of tenantID the right to turn unhealthy this monitor period, within the
// tenant's budget (lifecycle.MassSilence, in memory: single-node mode); the first refusal of an
// episode raises one fleet-level alert.
func (f *fleetActor) permit(ctx actor.Context, tenantID uuid.UUID) bool {
	granted, hold := f.silence.Permit(tenantID, f.tenants[tenantID])
	if hold != nil {
		f.hold(ctx, hold)
	}
	return granted
}

// hold makes the start of a mass-silence episode visible: a log line, an event and one fleet-level
// alert.
func (f *fleetActor) hold(ctx actor.Context, hold *lifecycle.Hold) {
	tenantID := hold.TenantID
	f.deps.log.Warn("mass-silence guard holding servers at degraded", "tenant_id", tenantID, "budget_per_period", hold.Budget)
	if f.onEvent != nil {
		f.onEvent("mass_silence_hold")
	}
	cmd := &persistence.FleetAlertCmd{Payload: persistence.FleetAlertPayload{
		EventID: uuid.New(), Kind: persistence.AlertMassSilence, TenantID: tenantID, Held: hold.Held, Budget: hold.Budget,
		Detail:     "more servers than the budget would turn unhealthy in one monitor period: they are held at degraded and released at the budget's rate unless they recover",
		OccurredAt: f.deps.clock.Now().UTC(),
	}}
	ctx.Request(f.deps.writer, &writeRequest{cmds: []persistence.Command{cmd}, deadline: time.Now().Add(f.deps.writeTimeout)})
	ctx.Send(f.deps.alerts, &alertQueued{})
}
