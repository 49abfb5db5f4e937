package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// serverRecord is one server's state. The fleet creates it and hands it to every incarnation of the
// server's actor (through the handover, handover.go), so a restarted or respawned actor resumes with its status and
// its last evidence — its deadline — intact. After creation only the server actor reads or writes it,
// except its identity (id, tenantID, key), which never changes after the fleet made the record: the
// fleet reads it (its fleetEntry does not copy it) and keeps what changes (registered) in its
// fleetEntry, told by message — and except dueHint, atomic, which only the actor writes (its deadline,
// published) and the fleet reads when a bound pops (deadlines.go).
//
// The identity lives in row (serverID, tenantID, moduleName), set by newServerRecord or from the loaded
// row; a later row is always this server's (adopt: doRegister checked the id, (tenant_id, module_name)
// is unique), and adopt keeps the record's module name string. The record holds each id once: it is
// held 100,000 times and more (memory_test.go).
type serverRecord struct {
	life lifecycle.Server // the health state machine: status, evidence, pending transition, flaps
	row  serverRow        // the committed view of the row, for answers, but for its status

	registrationTrace  link
	lastHeartbeatTrace link

	// status is the row's status, as its code (statusCodes; status == life.Status() once committed). It
	// is kept here rather than in row, whose padding it would round up by a word: the record is 240
	// bytes, in that size class, not 256 (memory_test.go).
	status uint8

	// dueHint is the server's exact deadline as the actor last computed it, in whole seconds (rounded
	// down) on the monitor's clock; 0: none. Written by the actor, read by the fleet (deadlines.go). Four
	// bytes, in what was the struct's padding: the record stays in its size class (memory_test.go).
	dueHint atomic.Uint32
}

// setRow takes a committed row as the record's (its row and status).
func (r *serverRecord) setRow(s persistence.Server) { r.row, r.status = rowOf(s), statusCode(s.Status) }

// statusOf is the row's status ("": nothing committed yet).
func (r *serverRecord) statusOf() health.Status { return statusCodes[r.status] }

// server gives the row back: equal to the one it was made from but for the advertisement and the
// times' location, UTC (every answer writes them in UTC).
func (r *serverRecord) server() persistence.Server { return r.row.server(r.statusOf()) }

// newServerRecord is the record of a server the fleet starts (registration, configuration): nothing
// committed yet but its identity.
func newServerRecord(id uuid.UUID, key moduleKey) *serverRecord {
	return &serverRecord{row: serverRow{serverID: id, tenantID: key.tenantID, moduleName: key.moduleName}}
}

func (r *serverRecord) id() uuid.UUID       { return r.row.serverID }
func (r *serverRecord) tenantID() uuid.UUID { return r.row.tenantID }
func (r *serverRecord) key() moduleKey {
	return moduleKey{tenantID: r.row.tenantID, moduleName: r.row.moduleName}
}

// serverRow is what a record keeps of its server's committed row, for answers: persistence.Server's
// 200 bytes in 112 — without the capability advertisement (kilobytes; an answer that carries it takes
// it from its commit) or the status (serverRecord.status), the trace id as its 16 bytes instead
// of a 32-byte hex string of its own, the times as Unix nanoseconds (0: none) instead of time.Time's
// 24 bytes, and the version and the protocol list (behind a pointer) shared with every record that has
// the same (interned).
type serverRow struct {
	serverID, tenantID  uuid.UUID
	moduleName, version string
	protocols           *[]string // interned: shared, never written through; nil: none
	traceID             trace.TraceID
	lastHeartbeat       int64 // Unix ns; 0: none
	registered          int64 // Unix ns; 0: none
	deregistered        int64 // Unix ns; 0: not deregistered
}

// statusCodes are the statuses a row can have ("": not yet committed, then health.Statuses, which
// the table's CHECK allows), by code; a status outside them would be kept as "".
var statusCodes = append([]health.Status{""}, health.Statuses()...)

func statusCode(s health.Status) uint8 {
	for i, c := range statusCodes {
		if c == s {
			return uint8(i)
		}
	}
	return 0
}

func rowOf(s persistence.Server) serverRow {
	r := serverRow{
		serverID: s.ServerID, tenantID: s.TenantID, moduleName: s.ModuleName, version: interned.string(s.Version),
		protocols: interned.list(s.SupportedProtocols), lastHeartbeat: unixNano(s.LastHeartbeatAt),
		registered: unixNano(s.RegisteredAt),
	}
	if s.DeregisteredAt != nil {
		r.deregistered = unixNano(*s.DeregisteredAt)
	}
	r.traceID, _ = trace.TraceIDFromHex(s.TraceID) // "" (none): the zero id, which server gives back as ""
	return r
}

// protocolList is the row's supported protocols (shared: the caller must not change them).
func (r *serverRow) protocolList() []string {
	if r.protocols == nil {
		return nil
	}
	return *r.protocols
}

// server is the row again, with status (which rowOf leaves out: the record keeps it).
func (r *serverRow) server(status health.Status) persistence.Server {
	s := persistence.Server{
		ServerID: r.serverID, TenantID: r.tenantID, ModuleName: r.moduleName, Version: r.version,
		SupportedProtocols: r.protocolList(), Status: status, LastHeartbeatAt: fromUnixNano(r.lastHeartbeat),
		RegisteredAt: fromUnixNano(r.registered),
	}
	if r.deregistered != 0 {
		at := fromUnixNano(r.deregistered)
		s.DeregisteredAt = &at
	}
	if r.traceID.IsValid() {
		s.TraceID = r.traceID.String()
	}
	return s
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano is unixNano's inverse, in UTC.
func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// serverDeps is what every server actor needs.
type serverDeps struct {
	clock        health.Clock
	life         *lifecycle.Config
	writeTimeout time.Duration
	log          *slog.Logger
	bursts       *telemetry.BurstLog // the warnings every server may raise at once, by message
	tracer       trace.Tracer
	metrics      *telemetry.Metrics
	writer       *actor.PID
	writeQueue   *writeQueue // the writer's queue length, to refuse at the door what it would refuse
	load         *saturation // whether the node is saturated: first registrations wait
	stamper      *actor.PID
	stamps       *stampTable // where heartbeats leave their stamps for the stamper
	alerts       *actor.PID
	stall        *lifecycle.Stall
	own          *ownership    // the shards this node holds, and their fences
	count        *atomic.Int64 // registered servers the fleet runs (OwnedServers)
	stats        *MonitorStats // the monitor's counters (the fleet actor writes them)
	// confirmed reports whether this node's cluster membership is confirmed (Fleet.SetMembership);
	// nil: always (single-node mode).
	confirmed atomic.Pointer[func() bool]

	serverProps *actor.Props  // every server actor's (newServerProps)
	workers     *workers      // the server and fleet actors' dispatcher
	handover    *handover     // records on their way to a new incarnation
	pids        *pidCache     // the PIDs callers send to server actors with
	sleepAfter  time.Duration // Config.DormantAfter
}

// stashed is work a busy server actor keeps until it is idle (serverActor.run).
type stashed struct {
	fn      func(actor.Context)
	abandon func(actor.Context) // answers the waiting caller if the work will never run
	// bounce, if not nil, hands the work back to the fleet instead of abandoning it when this server is
	// retired (a registration or configuration: the fleet starts it afresh on a server of its own).
	bounce func(actor.Context)
	check  bool // a monitor check: it runs after the stashed evidence and commands
}

// serverActor owns one server's health state machine. Durable work (registration, transitions,
// deregistration) is done one operation at a time, in order, through the writer; anything that needs
// a decision while an operation is in flight waits in a stash and runs, in arrival order, once the
// server is idle — so decisions are always made on committed state and never doubled.
//
// Its flags come last, in one word: the actor is held once per server, in 64 bytes rather than 80
// (memory_test.go).
type serverActor struct {
	rec   *serverRecord
	deps  *serverDeps
	stash []stashed
	armed int64 // the deadline bound this incarnation last sent the fleet (armMsg); 0: none, or checked since
	// inflight is the write or permit this incarnation awaits (busy): its continuation runs when the answer
	// comes, or in place if the incarnation is stopped first (finishInFlight).
	inflight *inFlight
	busy     bool
	dead     bool // set when this incarnation is being replaced; its continuations only finish their own work
	// retired: the server's first registration or configuration failed and the fleet was told to forget
	// it (removeServer). Nothing more is written under its id: a registration or configuration that
	// reaches it afterwards (stashed behind the failed one, or forwarded by the fleet before it handled
	// removeServer) is bounced back to the fleet, which handles it after removeServer, on a new server.
	// Without this, a registration stashed behind a failed one committed the server after the fleet had
	// forgotten it: a server in PostgreSQL that no actor ran.
	retired bool
	// quiet: no message has reached this incarnation since its sleep timer was set (sleep.go); asleep: it
	// has gone asleep and is stopping — it writes nothing more and hands registrations back to the fleet.
	quiet, asleep bool
}

func (a *serverActor) Receive(ctx actor.Context) {
	handleChaos(ctx)
	quiet := a.quiet
	a.quiet = false // any message keeps a deregistered server's actor awake (sleep.go)
	switch msg := ctx.Message().(type) {
	case *sleepCheck:
		a.quiet = quiet
		a.checkSleep(ctx)
	case *actor.Started:
		a.claimRecord(ctx)
		a.arm(ctx) // a new incarnation: the fleet's bound of the old one may be gone with it
		if a.rec.statusOf() == health.Deregistered {
			a.sleepLater(ctx) // woken by a stray request: dormant again once it is quiet
		}
	case *registerMsg:
		a.register(ctx, msg)
	case *configureMsg:
		a.configure(ctx, msg)
	case *contactMsg:
		a.receiveContact(ctx, msg)
	case *heartbeatMsg:
		now := a.deps.clock.Now()
		span := startSpan(a.deps.tracer, msg.trace, "server.heartbeat")
		if msg.tenantID != a.rec.tenantID() || !a.rec.life.Registered() {
			endSpan(span, ErrNotFound)
			msg.answer(heartbeatReply{err: ErrNotFound})
			return
		}
		a.arrivedEvidence(ctx, now)
		if !a.busy { // as run does, without making the closures a stash needs: once per heartbeat
			a.heartbeat(ctx, msg, now, span)
			return
		}
		a.run(ctx, func(ctx actor.Context) { a.heartbeat(ctx, msg, now, span) },
			func(ctx actor.Context) {
				endSpan(span, ErrUnavailable)
				msg.answer(heartbeatReply{err: ErrUnavailable})
			})
	case *deregisterMsg:
		sender := ctx.Sender()
		if msg.tenantID != a.rec.tenantID() || !a.rec.life.Registered() {
			ctx.Send(sender, &deregisterReply{err: ErrNotFound})
			return
		}
		a.run(ctx, func(ctx actor.Context) { a.deregister(ctx, msg, sender) },
			func(ctx actor.Context) { ctx.Send(sender, &deregisterReply{err: ErrUnavailable}) })
	case *evaluateMsg:
		a.armed = 0 // the fleet popped the bound it sends this for
		a.runCheck(ctx, func(ctx actor.Context) { a.evaluate(ctx, msg.round) },
			func(actor.Context) { msg.round.done() })
	case *handOff:
		// Another node owns the server now: finish what is in flight, then stop.
		a.run(ctx, func(ctx actor.Context) {
			if st := a.rec.statusOf(); st != "" {
				a.deps.metrics.ServerStatus(st, "")
			}
			ctx.Poison(ctx.Self())
		}, func(actor.Context) {})
	case *actor.Restarting, *actor.Stopping:
		_, restarting := msg.(*actor.Restarting)
		if restarting {
			a.deps.handover.put(ctx.Self().Id, a.rec) // the next incarnation, made in place, resumes with it
		}
		a.dead = true
		for _, st := range a.stash {
			st.abandon(ctx)
		}
		a.stash = nil
		if !restarting {
			a.finishInFlight()
		}
	}
}

// run calls fn now if the server is idle, or stashes it until it is.
func (a *serverActor) run(ctx actor.Context, fn, abandon func(actor.Context)) {
	if a.busy {
		a.stash = append(a.stash, stashed{fn: fn, abandon: abandon})
		return
	}
	fn(ctx)
}

// runCheck is run for a monitor check. A stashed check runs only after every stashed registration,
// heartbeat, deregistration or contact, even one that arrived after it: a check judges the server on
// the newest evidence, so a registration that waited behind a slow write (a database outage) is
// never overtaken by a verdict of the silence before it.
func (a *serverActor) runCheck(ctx actor.Context, fn, abandon func(actor.Context)) {
	if a.busy {
		a.stash = append(a.stash, stashed{fn: fn, abandon: abandon, check: true})
		return
	}
	fn(ctx)
}

// idle runs stashed work until something makes the server busy again: first the stashed work that
// is not a monitor check, in arrival order, then the checks.
func (a *serverActor) idle(ctx actor.Context) {
	a.busy = false
	for !a.busy && len(a.stash) > 0 && !a.dead {
		i := slices.IndexFunc(a.stash, func(st stashed) bool { return !st.check })
		if i < 0 {
			i = 0
		}
		st := a.stash[i]
		a.stash = slices.Delete(a.stash, i, i+1)
		st.fn(ctx)
	}
}

// isAdmission reports whether cmd, persisted by a server whose state is life, is new work that the writer
// sheds first under back-pressure (writeRequest.admission): a server's first registration. A registered
// server's re-registration is evidence of a live module, like a heartbeat.
func isAdmission(cmd persistence.Command, life *lifecycle.Server) bool {
	_, reg := cmd.(*persistence.RegisterCmd)
	return reg && !life.Registered()
}

// persist sends one command to the writer and, after COMMIT (or failure), calls done in the actor. A
// transition's skill cascade is part of its command (TransitionCmd.Skills): one commit, no second round trip.
//
// deadline is the caller's (zero for the monitor's own writes: now + the write timeout). A write whose
// deadline has passed is not started: its caller was already told nothing was recorded.
func (a *serverActor) persist(ctx actor.Context, cmd persistence.Command, trc telemetry.Carrier, deadline time.Time, done func(ctx actor.Context, err error)) {
	if deadline.IsZero() {
		deadline = time.Now().Add(a.deps.writeTimeout)
	}
	if err := pastDeadline(deadline); err != nil {
		done(ctx, err)
		return
	}
	fence, held := a.deps.own.fence(a.rec.id())
	if !held {
		done(ctx, errNotHeld(fence.Shard))
		return
	}
	admission := isAdmission(cmd, &a.rec.life)
	if err := a.deps.writeQueue.refusal(admission); err != nil {
		done(ctx, err) // what the writer would answer, without the round trip (see writeQueue)
		return
	}
	a.busy = true
	req := &writeRequest{cmds: []persistence.Command{persistence.WithFence(cmd, fence)}, deadline: deadline, trace: trc, admission: admission}
	fut := ctx.RequestFuture(a.deps.writer, req, time.Until(deadline)+2*time.Second)
	a.reenterAfter(ctx, fut, func(res any, err error) {
		if err == nil {
			if wr, ok := res.(*writeResult); ok {
				err = wr.err()
			} else {
				err = fmt.Errorf("writer answered %T", res)
			}
		}
		if errors.Is(err, persistence.ErrFenced) && fence.Fenced() {
			ctx.Send(ctx.Parent(), &shardFenced{fence: fence})
		}
		done(ctx, err)
		a.idle(ctx)
	})
}

// inFlight is a future the server actor awaits and what it does with the answer.
type inFlight struct {
	fut  *actor.Future
	cont func(res any, err error)
}

// reenterAfter is ctx.ReenterAfter for the one write or permit a busy server actor awaits: cont runs in
// the actor when fut completes — or in place, before the actor terminates, if it is stopped first
// (finishInFlight). cont runs once either way.
func (a *serverActor) reenterAfter(ctx actor.Context, fut *actor.Future, cont func(res any, err error)) {
	a.inflight = &inFlight{fut: fut, cont: cont}
	ctx.ReenterAfter(fut, func(res any, err error) { a.finish(fut, res, err) })
}

// finish runs the continuation of fut if the actor still awaits it; once it has run (in place, by
// finishInFlight while this incarnation stopped), the actor awaits another future or none.
func (a *serverActor) finish(fut *actor.Future, res any, err error) {
	w := a.inflight
	if w == nil || w.fut != fut {
		return
	}
	a.inflight = nil
	w.cont(res, err)
}

// finishInFlight is a stopping incarnation's last duty: it waits for the write or permit in flight (and
// for the write a permit's answer starts) and applies the answer to the record, in place, bounded by the
// futures' own timeouts. protoactor would deliver the answer after the actor's Terminated — to the
// incarnation the fleet respawns over the same record, or to this one's mailbox still running beside it
// (a data race on the record), or to no one once the name is free (a committed transition the record
// never learnt). Waiting blocks only this actor's goroutine (workers). A restart needs none of this:
// the next incarnation is made in the same mailbox, behind the answer.
func (a *serverActor) finishInFlight() {
	for a.inflight != nil {
		fut := a.inflight.fut
		res, err := fut.Result()
		a.finish(fut, res, err)
	}
}

// pastDeadline is the answer to durable work that reaches an actor at or past its caller's deadline
// (zero: none): that caller has been, or is about to be, told 503 "nothing was recorded", so nothing is
// started for it — no write, and in the fleet no actor spawned either.
func pastDeadline(deadline time.Time) error {
	if deadline.IsZero() || time.Now().Before(deadline) {
		return nil
	}
	return fmt.Errorf("%w: the caller's deadline passed before the write could start", ErrUnavailable)
}

func (a *serverActor) register(ctx actor.Context, msg *registerMsg) {
	sender := ctx.Sender()
	bounce := func(ctx actor.Context) { ctx.RequestWithCustomSender(ctx.Parent(), msg, sender) }
	if a.retired || a.asleep {
		bounce(ctx)
		return
	}
	a.runBouncing(ctx, func(ctx actor.Context) { a.doRegister(ctx, msg, sender) },
		func(ctx actor.Context) { ctx.Send(sender, &registerReply{err: ErrUnavailable}) }, bounce)
}

// runBouncing is run for work the fleet can start afresh on another server (bounce) if this one is
// retired while the work waits in the stash.
func (a *serverActor) runBouncing(ctx actor.Context, fn, abandon, bounce func(actor.Context)) {
	if a.busy {
		a.stash = append(a.stash, stashed{fn: fn, abandon: abandon, bounce: bounce})
		return
	}
	fn(ctx)
}

// retire makes the fleet forget this server, whose first registration or configuration failed (or
// committed on another server, row: see removeServer), and hands what waits in the stash back to the
// fleet or answers it. It is called only while the server is not registered.
func (a *serverActor) retire(ctx actor.Context, msg *removeServer) {
	a.retired = true
	ctx.Send(ctx.Parent(), msg)
	stash := a.stash
	a.stash = nil
	for _, st := range stash {
		if st.bounce != nil {
			st.bounce(ctx)
		} else {
			st.abandon(ctx)
		}
	}
}

func (a *serverActor) doRegister(ctx actor.Context, msg *registerMsg, sender *actor.PID) {
	{
		now, stall := a.deps.clock.Now(), a.deps.stall.Total() // the evidence, and the stall at it
		_, span := a.deps.tracer.Start(msg.req.Trace.Context(), "server.register", trace.WithAttributes(a.attrs()...))
		traceID := telemetry.Carrier{SpanContext: span.SpanContext()}.TraceID()
		cmd := &persistence.RegisterCmd{
			EventID: uuid.New(), ServerID: a.rec.id(), TenantID: a.rec.tenantID(), ModuleName: msg.req.ModuleName,
			Version: msg.req.Version, Protocols: msg.req.Protocols, Capabilities: msg.req.Capabilities,
			Tools: msg.req.Tools, Endpoint: msg.req.Endpoint, TraceID: traceID, At: now.UTC(),
			ByKey: msg.req.ByKey, ByAdmin: msg.req.ByAdmin,
		}
		carrier := telemetry.Carrier{SpanContext: span.SpanContext()}
		a.persist(ctx, cmd, carrier, msg.deadline, func(ctx actor.Context, err error) {
			defer endSpan(span, err)
			if err != nil {
				ctx.Send(sender, &registerReply{err: mapWriteErr(err)})
				if !a.rec.life.Registered() {
					a.retire(ctx, &removeServer{serverID: a.rec.id(), key: a.rec.key()})
				}
				return
			}
			if cmd.Server.ServerID != a.rec.id() {
				// The registration committed on the module's existing server, which PostgreSQL holds under
				// another id (its earlier registration committed after its caller was told it failed, or
				// the fleet never loaded it): the fleet forgets this one and runs that one, if it may.
				if a.rec.life.Registered() {
					ctx.Send(sender, &registerReply{err: fmt.Errorf("%w: module registered under another id", ErrUnavailable)})
					return
				}
				row := cmd.Server
				a.retire(ctx, &removeServer{serverID: a.rec.id(), key: a.rec.key(), row: &row, created: cmd.Created, reply: sender})
				return
			}
			from := a.rec.statusOf()
			if !a.rec.life.Registered() {
				from = ""
			}
			a.deps.metrics.ServerStatus(from, cmd.Server.Status)
			a.adopt(ctx, cmd.Server, now, stall, carrier)
			ctx.Send(sender, &registerReply{res: RegisterResult{Server: cmd.Server, Created: cmd.Created}})
		})
	}
}

// heartbeat handles an accepted heartbeat under hb, its server.heartbeat span, and ends hb once it
// has answered.
func (a *serverActor) heartbeat(ctx actor.Context, msg *heartbeatMsg, now time.Time, hb trace.Span) {
	rec := a.rec
	a.heldEvidence(ctx)
	setServerAttrs(hb, rec.tenantID(), rec.id(), rec.row.moduleName)
	if hb.IsRecording() {
		hb.SetAttributes(statusAttrs[rec.status])
	}
	t, err := rec.life.Recover(a.deps.life, now)
	if err != nil {
		endSpan(hb, ErrDeregistered)
		msg.answer(heartbeatReply{err: ErrDeregistered})
		return
	}
	hbc := carrierOf(hb)
	rec.lastHeartbeatTrace = linkOf(hbc)
	wall := now.UTC()
	if t == nil { // healthy: the stamp is coalesced, the answer does not wait on PostgreSQL
		if n := wall.UnixNano(); n > rec.row.lastHeartbeat {
			rec.row.lastHeartbeat = n
		}
		if fence, held := a.deps.own.fence(rec.id()); held { // not held: the actor is being stopped (shardFenced)
			if a.deps.stamps.put(persistence.Stamp{TenantID: rec.tenantID(), ServerID: rec.id(), At: wall, Fence: fence}, hbc) {
				ctx.Send(a.deps.stamper, stampFullMsg)
			}
		}
		msg.answer(heartbeatReply{res: HeartbeatResult{ServerID: rec.id(), Status: health.Healthy, LastHeartbeatAt: wall}})
		hb.End()
		return
	}
	// Recovery on heartbeat (DEC-2353): durable before it is acknowledged.
	span := a.startStatusSpan(hbc.Context(), "server.recover", t.From, t.To)
	t.TraceID = carrierOf(span).TraceID()
	cmd := a.transitionCmd(t)
	cmd.Evidence = &wall
	a.persist(ctx, cmd, carrierOf(span), msg.deadline, func(ctx actor.Context, err error) {
		endSpan(span, err)
		defer endSpan(hb, err)
		a.heldEvidence(ctx)
		if err != nil {
			rec.life.Failed(t)
			msg.answer(heartbeatReply{err: mapWriteErr(err)})
			return
		}
		a.applyTransition(ctx, t, cmd)
		rec.row.lastHeartbeat = wall.UnixNano()
		msg.answer(heartbeatReply{res: HeartbeatResult{ServerID: rec.id(), Status: health.Healthy, LastHeartbeatAt: wall}})
	})
}

func (a *serverActor) deregister(ctx actor.Context, msg *deregisterMsg, sender *actor.PID) {
	rec := a.rec
	now := a.deps.clock.Now()
	t := rec.life.Deregister(a.deps.life, now)
	if t == nil {
		ctx.Send(sender, &deregisterReply{server: rec.server()}) // idempotent
		return
	}
	span := a.startStatusSpan(msg.trace.Context(), "server.deregister", t.From, t.To)
	t.TraceID = carrierOf(span).TraceID()
	cmd := a.transitionCmd(t)
	a.persist(ctx, cmd, carrierOf(span), msg.deadline, func(ctx actor.Context, err error) {
		defer endSpan(span, err)
		if err != nil {
			rec.life.Failed(t)
			ctx.Send(sender, &deregisterReply{err: mapWriteErr(err)})
			return
		}
		a.applyTransition(ctx, t, cmd)
		row := rec.server() // the record's has no advertisement; the answer carries what the commit returned
		row.CapabilityAdvertisement = cmd.Advertisement
		ctx.Send(sender, &deregisterReply{server: row})
		a.sleepLater(ctx)
	})
}

// evaluate is the monitor's check of this server (lifecycle.Server.Check: the lag of the last evidence,
// net of the monitor's stall since, against 2H and 3H). With the mass-silence guard on, a transition
// to unhealthy first asks the fleet for a permit; if the fleet does not answer, the seed's rule holds.
func (a *serverActor) evaluate(ctx actor.Context, round *monitorRound) {
	rec := a.rec
	now := a.deps.clock.Now()
	v := rec.life.Check(a.deps.life, now, a.deps.stall.Total())
	if !v.Change {
		a.arm(ctx)
		round.done()
		return
	}
	if !v.NeedsPermit {
		a.transition(ctx, rec.life.Decide(a.deps.life, v, now), round)
		return
	}
	a.busy = true
	fut := ctx.RequestFuture(ctx.Parent(), &permitMsg{tenantID: rec.tenantID()}, a.deps.writeTimeout)
	a.reenterAfter(ctx, fut, func(res any, err error) {
		a.busy = false
		granted := true
		if r, ok := res.(*permitReply); ok && err == nil {
			granted = r.granted
		}
		if t := rec.life.Permitted(a.deps.life, v, granted, now); t != nil {
			a.transition(ctx, t, round)
			return
		}
		a.arm(ctx) // held: checked again at the next tick
		round.done()
		a.idle(ctx)
	})
}

// transition persists a monitor-driven transition t (nil: nothing to do).
func (a *serverActor) transition(ctx actor.Context, t *lifecycle.Transition, round *monitorRound) {
	if t == nil {
		a.arm(ctx)
		round.done()
		return
	}
	rec := a.rec
	// A monitor-driven transition has no request behind it: it starts its own trace, linked to the
	// server's last heartbeat and its registration.
	span := a.startTransitionSpan(t)
	carrier := telemetry.Carrier{SpanContext: span.SpanContext()}
	if !t.Retry {
		t.TraceID = carrier.TraceID()
	}
	cmd := a.transitionCmd(t)
	a.persist(ctx, cmd, carrier, time.Time{}, func(ctx actor.Context, err error) {
		defer span.End()
		defer round.done()
		if err != nil {
			rec.life.Failed(t)
			a.arm(ctx) // its deadline has passed: the next tick pops it
			const msg = "transition not persisted; the next monitor tick retries it"
			a.deps.bursts.Warn(carrier.Context(), msg, msg, "server_id", rec.id(), "from", t.From, "to", t.To, "err", err)
			return
		}
		a.applyTransition(ctx, t, cmd)
		if t.To == health.Unhealthy {
			a.deps.metrics.DetectionLag(context.Background(), t.Lag)
		}
		if cmd.AlertKind != "" {
			ctx.Send(a.deps.alerts, &alertQueued{trace: carrier})
		}
	})
}

// alertKinds names each lifecycle alert as the outbox does.
var alertKinds = map[lifecycle.Alert]string{
	lifecycle.NoAlert: "", lifecycle.AlertUnhealthy: persistence.AlertUnhealthy, lifecycle.AlertFlapping: persistence.AlertFlapping,
}

// transitionCmd is the durable command of a decided transition.
func (a *serverActor) transitionCmd(t *lifecycle.Transition) *persistence.TransitionCmd {
	rec := a.rec
	return &persistence.TransitionCmd{
		EventID: t.EventID, TenantID: rec.tenantID(), ServerID: rec.id(), ModuleName: rec.row.moduleName,
		Version: rec.row.version, From: t.From, To: t.To, TraceID: t.TraceID, At: t.At.UTC(),
		LastEvidence: t.EvidenceWall(), AlertKind: alertKinds[t.Alert], FlapCount: t.FlapCount, Skills: cascadeOf(t),
	}
}

// applyTransition takes back a committed transition: the state machine applies it, the row and the
// metrics follow, and the fleet gets the new status's deadline bound before the caller is answered.
func (a *serverActor) applyTransition(ctx actor.Context, t *lifecycle.Transition, cmd *persistence.TransitionCmd) {
	rec := a.rec
	a.deps.metrics.ServerStatus(rec.statusOf(), t.To)
	a.deps.metrics.Transition(context.Background(), t.From, t.To)
	if rec.life.Committed(a.deps.life, t) {
		a.deps.log.WarnContext(telemetry.EventCarrier(cmd.TraceID, cmd.EventID).Context(), "server is flapping: one alert for the episode", "server_id", rec.id(), "transitions", t.FlapCount)
	}
	rec.status = statusCode(t.To)
	if t.To == health.Deregistered {
		rec.row.deregistered = unixNano(cmd.At)
	}
	a.arm(ctx)
}

// arrivedEvidence counts a heartbeat or a completed round trip as evidence the moment its message arrives,
// even if answering it must wait behind a write in flight: a monitor check queued meanwhile must not
// judge the server on older evidence (lifecycle.Server.Evidence).
func (a *serverActor) arrivedEvidence(ctx actor.Context, now time.Time) {
	a.rec.life.Evidence(now, a.deps.stall.Total())
	a.arm(ctx)
}

// heldEvidence counts evidence the actor holds — a heartbeat or round trip that arrived and is not yet
// answered — as evidence again now, when it is acted on or answered. Until its answer a closed-loop
// module cannot send its next heartbeat, so the time the service held the request (stashed behind a
// slow write, or waiting on its own recovery's write during a database outage) is the service's stall,
// not the module's silence: without this, a module that kept heartbeating through an outage would be
// judged on the arrival of a heartbeat the service sat on for longer than 3H.
func (a *serverActor) heldEvidence(ctx actor.Context) {
	a.rec.life.Evidence(a.deps.clock.Now(), a.deps.stall.Total())
	a.arm(ctx)
}

// adopt takes a committed registration or configuration as the server's state: registered, its row, fresh
// evidence (taken at now, when the operation arrived, with the monitor's stall at that moment — not at
// the commit: a stall while the write was in flight must extend the deadline), no pending transition, and the operation's trace as the one transitions link back to. The
// first one tells the fleet, which keeps its own view of who is registered.
func (a *serverActor) adopt(ctx actor.Context, row persistence.Server, now time.Time, stall time.Duration, carrier telemetry.Carrier) {
	first := !a.rec.life.Registered()
	// This server's row (doRegister checked the id): the same identity as the record's, whose module
	// name is kept — the string the request brought, which the API's owner cache holds too — rather
	// than the commit's copy of it.
	row.ModuleName = a.rec.row.moduleName
	a.rec.setRow(row)
	a.rec.life.Adopt(row.Status, now, stall)
	a.rec.registrationTrace = linkOf(carrier)
	a.rec.lastHeartbeatTrace = a.rec.registrationTrace
	a.arm(ctx)
	if first {
		ctx.Send(ctx.Parent(), &serverRegistered{serverID: a.rec.id()})
	}
}

// cascadeOf returns the skill availability t leaves its server's skills at. Every transition states it,
// even one that changes no availability (healthy ↔ degraded): the commit moves the row from the status
// it has, not from the decider's From (TransitionCmd), so a decider whose view is stale still leaves the
// skills agreeing with the status it commits.
func cascadeOf(t *lifecycle.Transition) *bool {
	available, _ := t.Cascade()
	return &available
}

func (a *serverActor) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("mcpfleet.tenant_id", a.rec.tenantID().String()),
		attribute.String("mcpfleet.server_id", a.rec.id().String()),
		attribute.String("mcpfleet.module_name", a.rec.key().moduleName),
	}
}

func (a *serverActor) transitionAttrs(from, to health.Status) []attribute.KeyValue {
	return append(a.attrs(), attribute.String("mcpfleet.status.from", string(from)), attribute.String("mcpfleet.status.to", string(to)))
}

// mapWriteErr turns a writer failure into what the caller is told: transient and fenced failures are
// ErrUnavailable (503, retry), anything else is returned wrapped.
func mapWriteErr(err error) error {
	// Fenced: the server belongs to another process now; the caller retries (elsewhere, behind a balancer).
	if errors.Is(err, ErrUnavailable) || errors.Is(err, persistence.ErrFenced) || persistence.IsTransient(err) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}
