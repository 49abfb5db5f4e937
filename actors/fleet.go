package actors

import (
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// fleetActor supervises one server actor per registered server, spawned by server_id (PID id
// "fleet/<server_id>"). It routes registrations (so two registrations of one module are serialised and
// can never create two servers), fans out monitor ticks, and respawns a server actor that was stopped
// by anything but the fleet itself. Its supervisor strategy restarts a panicking server actor in place.
type fleetActor struct {
	deps     *serverDeps
	records  map[uuid.UUID]*serverRecord
	children map[uuid.UUID]*actor.PID
	byModule map[moduleKey]uuid.UUID
	removing map[uuid.UUID]bool
	onEvent  func(event string)

	period   time.Duration // the monitor period, to measure stall against
	lastAuto time.Time     // when the last automatic tick was handled
	tenants  map[uuid.UUID]int
	silence  *massSilence // nil when the guard is off
	refused  map[uuid.UUID]int
}

// fleetChunk bounds how many servers one fan-out message touches, so heartbeats interleave with a tick.
const fleetChunk = 2000

// loadMsg hands the fleet servers read from PostgreSQL at start.
type loadMsg struct{ records []*serverRecord }

type loaded struct{}

type respawnMsg struct{ id uuid.UUID }

func newFleetProps(deps *serverDeps, period time.Duration, ms MassSilenceConfig, onEvent func(string)) *actor.Props {
	strategy := actor.NewOneForOneStrategy(10, 10*time.Second, func(reason any) actor.Directive {
		deps.log.Error("server actor failed; restarting it", "reason", reason)
		if onEvent != nil {
			onEvent("server_actor_restart")
		}
		return actor.RestartDirective
	})
	return actor.PropsFromProducer(func() actor.Actor {
		f := &fleetActor{
			deps: deps, records: map[uuid.UUID]*serverRecord{}, children: map[uuid.UUID]*actor.PID{},
			byModule: map[moduleKey]uuid.UUID{}, removing: map[uuid.UUID]bool{}, onEvent: onEvent,
			period: period, tenants: map[uuid.UUID]int{}, refused: map[uuid.UUID]int{},
		}
		if ms.Fraction > 0 {
			f.silence = &massSilence{cfg: ms, used: map[uuid.UUID]int{}, held: map[uuid.UUID]int{}, episode: map[uuid.UUID]bool{}}
		}
		return f
	}, actor.WithSupervisor(strategy), actor.WithMailbox(unboundedMailbox()))
}

func (f *fleetActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *loadMsg:
		for _, rec := range msg.records {
			f.records[rec.id] = rec
			f.byModule[rec.key] = rec.id
			f.tenants[rec.tenantID]++
			f.spawn(ctx, rec)
		}
		ctx.Respond(&loaded{})
	case *registerMsg:
		span := startSpan(f.deps.tracer, msg.req.Trace, "fleet.register")
		key := moduleKey{tenantID: msg.req.TenantID, moduleName: msg.req.ModuleName}
		id, ok := f.byModule[key]
		if !ok {
			id = uuid.New()
			rec := &serverRecord{id: id, tenantID: key.tenantID, key: key}
			f.records[id] = rec
			f.byModule[key] = id
			f.tenants[key.tenantID]++
			f.spawn(ctx, rec)
		}
		pid := f.children[id]
		setServerAttrs(span, key.tenantID, id, key.moduleName)
		if pid == nil {
			endSpan(span, ErrUnavailable)
			ctx.Respond(&registerReply{err: ErrUnavailable})
			return
		}
		msg.req.Trace = carrierOf(span) // the server actor's span is a child of this one
		span.End()
		ctx.Forward(pid)
	case *configureMsg:
		f.configure(ctx, msg)
	case *lookupMsg:
		rec, ok := f.records[msg.serverID]
		ctx.Respond(&lookupReply{known: ok && rec.tenantID == msg.tenantID})
	case *monitorTick:
		f.tick(ctx, msg)
		ids := make([]uuid.UUID, 0, len(f.children))
		for id := range f.children {
			ids = append(ids, id)
		}
		if msg.round != nil {
			msg.round.wg.Add(len(ids))
		}
		ctx.Send(ctx.Self(), &tickChunk{ids: ids, round: msg.round})
	case *tickChunk:
		n := min(len(msg.ids), fleetChunk)
		for _, id := range msg.ids[:n] {
			if pid := f.children[id]; pid != nil {
				ctx.Send(pid, &evaluateMsg{round: msg.round})
			} else {
				msg.round.done()
			}
		}
		if n < len(msg.ids) {
			ctx.Send(ctx.Self(), &tickChunk{ids: msg.ids[n:], round: msg.round})
		}
	case *removeServer:
		rec, ok := f.records[msg.serverID]
		if !ok || rec.registered {
			return
		}
		delete(f.records, msg.serverID)
		f.tenants[rec.tenantID]--
		if f.byModule[msg.key] == msg.serverID {
			delete(f.byModule, msg.key)
		}
		if pid := f.children[msg.serverID]; pid != nil {
			f.removing[msg.serverID] = true
			delete(f.children, msg.serverID)
			ctx.Poison(pid)
		}
	case *actor.Terminated:
		id, err := uuid.Parse(strings.TrimPrefix(msg.Who.Id, ctx.Self().Id+"/"))
		if err != nil {
			return
		}
		if f.removing[id] {
			delete(f.removing, id)
			return
		}
		if cur := f.children[id]; cur != nil && cur.Equal(msg.Who) {
			delete(f.children, id)
		}
		if rec, ok := f.records[id]; ok && f.children[id] == nil {
			f.deps.log.Warn("server actor stopped; respawning it", "server_id", id)
			if f.onEvent != nil {
				f.onEvent("server_actor_respawn")
			}
			f.spawn(ctx, rec)
		}
	case *permitMsg:
		ctx.Respond(&permitReply{granted: f.permit(ctx, msg.tenantID)})
	case *writeResult:
		if err := msg.err(); err != nil {
			f.deps.log.Error("fleet alert not written", "err", err)
		}
	case *respawnMsg:
		if rec, ok := f.records[msg.id]; ok && f.children[msg.id] == nil {
			f.spawn(ctx, rec)
		}
	}
}

func (f *fleetActor) spawn(ctx actor.Context, rec *serverRecord) {
	pid, err := ctx.SpawnNamed(newServerProps(rec, f.deps), rec.id.String())
	if err != nil {
		// The old process may not be unregistered yet: try again shortly.
		f.deps.log.Warn("spawn server actor failed; retrying", "server_id", rec.id, "err", err)
		self, system := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(50*time.Millisecond, func() { system.Root.Send(self, &respawnMsg{id: rec.id}) })
		return
	}
	f.children[rec.id] = pid
}

// tick does the fleet's part of a monitor tick before the fan-out: the self-health check (an automatic
// tick handled later than its period means the monitor stalled; the stall is credited to every deadline)
// and the mass-silence guard's per-period bookkeeping.
func (f *fleetActor) tick(ctx actor.Context, msg *monitorTick) {
	now := f.deps.clock.Now()
	if msg.auto {
		if !f.lastAuto.IsZero() {
			if late := now.Sub(f.lastAuto) - f.period; late > stallTolerance(f.period) {
				f.deps.stall.add(late)
				f.deps.log.Warn("monitor stalled: deadlines extended by the stall", "stall", late.String())
				if f.onEvent != nil {
					f.onEvent("monitor_stall")
				}
			}
		}
		f.lastAuto = now
	}
	if f.silence == nil {
		return
	}
	for t := range f.silence.episode {
		if f.refused[t] == 0 {
			f.deps.log.Warn("mass-silence guard released: no more servers held", "tenant_id", t, "held", f.silence.held[t])
			delete(f.silence.episode, t)
			delete(f.silence.held, t)
		}
	}
	clear(f.refused)
	clear(f.silence.used)
}

// permit grants a server of tenantID the right to turn unhealthy this monitor period, within the
// tenant's budget; the first refusal of an episode raises one fleet-level alert.
func (f *fleetActor) permit(ctx actor.Context, tenantID uuid.UUID) bool {
	ms := f.silence
	if ms == nil {
		return true
	}
	budget := ms.budget(f.tenants[tenantID])
	if ms.used[tenantID] < budget {
		ms.used[tenantID]++
		return true
	}
	f.refused[tenantID]++
	ms.held[tenantID]++
	if !ms.episode[tenantID] {
		ms.episode[tenantID] = true
		f.deps.log.Warn("mass-silence guard holding servers at degraded", "tenant_id", tenantID, "budget_per_period", budget)
		if f.onEvent != nil {
			f.onEvent("mass_silence_hold")
		}
		cmd := &persistence.FleetAlertCmd{Payload: persistence.FleetAlertPayload{
			EventID: uuid.New(), Kind: persistence.AlertMassSilence, TenantID: tenantID, Held: ms.held[tenantID], Budget: budget,
			Detail:     "more servers than the budget would turn unhealthy in one monitor period: they are held at degraded and released at the budget's rate unless they recover",
			OccurredAt: f.deps.clock.Now().UTC(),
		}}
		ctx.Request(f.deps.writer, &writeRequest{cmds: []persistence.Command{cmd}, deadline: time.Now().Add(f.deps.writeTimeout)})
		ctx.Send(f.deps.alerts, &alertQueued{})
	}
	return false
}
