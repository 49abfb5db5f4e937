package actors

import (
	"time"

	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// ErrModuleExists: the tenant already has a server under this module name. The error is an
// *ExistsError when the existing server's id is known.
var ErrModuleExists = errors.New("a server with this module name already exists")

// ExistsError names the server that already holds a module name.
type ExistsError struct{ ServerID uuid.UUID }

func (e *ExistsError) Error() string { return fmt.Sprintf("%v: %s", ErrModuleExists, e.ServerID) }

// Is makes errors.Is(err, ErrModuleExists) hold.
func (e *ExistsError) Is(target error) bool { return target == ErrModuleExists }

// ConfigureRequest is an administrator's configuration of a new server (one that is reached by the
// service rather than registering itself first). ServerID is chosen by the caller, because the
// credential in Config is sealed to it; Config carries the editable fields to store.
type ConfigureRequest struct {
	ServerID   uuid.UUID
	TenantID   uuid.UUID
	ModuleName string
	Version    string
	Config     persistence.ServerConfig
	Trace      telemetry.Carrier
	// By is the administrator's key, recorded with the creation (server_config_changes).
	By uuid.UUID
}

type configureMsg struct {
	req      ConfigureRequest
	deadline time.Time
}

type configureReply struct {
	server persistence.Server
	err    error
}

// Configure creates a configured server: it becomes a server of the fleet like a registered one (its
// mcp_servers row, an mcp.server.registered audit event, its own actor and health state machine, with
// the same grace as a registration) and its configuration row is written in the same transaction. It
// returns after COMMIT. A module name the tenant already uses is an *ExistsError.
func (f *Fleet) Configure(ctx context.Context, req ConfigureRequest) (persistence.Server, error) {
	if req.ServerID == uuid.Nil || req.TenantID == uuid.Nil {
		return persistence.Server{}, errors.New("configure: server and tenant ids are required")
	}
	res, err := f.askForwarded(ctx, &configureMsg{req: req, deadline: f.writeDeadline()})
	if err != nil {
		return persistence.Server{}, err
	}
	r := res.(*configureReply)
	return r.server, r.err
}

// configure is the fleet's half: the module name is claimed here, serialised with registrations, so a
// configuration and a registration of one name can never create two servers.
func (f *fleetActor) configure(ctx actor.Context, msg *configureMsg) {
	key := moduleKey{tenantID: msg.req.TenantID, moduleName: msg.req.ModuleName}
	if !f.deps.own.ownsServer(msg.req.ServerID) {
		ctx.Respond(&configureReply{err: ErrNotOwner})
		return
	}
	if id, ok := f.byModule.get(key); ok {
		if e := f.entries[id]; e != nil && e.registered {
			ctx.Respond(&configureReply{err: &ExistsError{ServerID: id}})
			return
		}
		ctx.Respond(&configureReply{err: fmt.Errorf("%w: a registration of this module is in progress", ErrUnavailable)})
		return
	}
	id := msg.req.ServerID
	if _, taken := f.entries[id]; taken {
		ctx.Respond(&configureReply{err: fmt.Errorf("%w: server id in use", ErrUnavailable)})
		return
	}
	f.add(ctx, newServerRecord(id, key), false)
	pid := f.child(ctx, id)
	if pid == nil {
		// Forget it now: nobody else would ever register this record, and a retry brings a new id.
		delete(f.entries, id)
		f.byModule.remove(key, id)
		f.tenants[key.tenantID]--
		ctx.Respond(&configureReply{err: ErrUnavailable})
		return
	}
	ctx.Forward(pid)
}

// configure is the server actor's half: the durable create, through the writer.
func (a *serverActor) configure(ctx actor.Context, msg *configureMsg) {
	sender := ctx.Sender()
	bounce := func(ctx actor.Context) { ctx.RequestWithCustomSender(ctx.Parent(), msg, sender) }
	if a.retired || a.asleep {
		bounce(ctx)
		return
	}
	a.runBouncing(ctx, func(ctx actor.Context) { a.doConfigure(ctx, msg, sender) },
		func(ctx actor.Context) { ctx.Send(sender, &configureReply{err: ErrUnavailable}) }, bounce)
}

func (a *serverActor) doConfigure(ctx actor.Context, msg *configureMsg, sender *actor.PID) {
	if a.rec.life.Registered() {
		ctx.Send(sender, &configureReply{err: &ExistsError{ServerID: a.rec.id()}})
		return
	}
	now, stall := a.deps.clock.Now(), a.deps.stall.Total() // the evidence, and the stall at it
	_, span := a.deps.tracer.Start(msg.req.Trace.Context(), "server.configure", trace.WithAttributes(a.attrs()...))
	carrier := telemetry.Carrier{SpanContext: span.SpanContext()}
	cmd := &persistence.ConfigureCmd{
		EventID: uuid.New(), ServerID: a.rec.id(), TenantID: a.rec.tenantID(), ModuleName: msg.req.ModuleName,
		Version: msg.req.Version, Config: msg.req.Config, TraceID: carrier.TraceID(), At: now.UTC(),
		ChangeID: uuid.New(), By: persistence.ByKey(msg.req.By),
	}
	a.persist(ctx, cmd, carrier, msg.deadline, func(ctx actor.Context, err error) {
		defer span.End()
		if err != nil {
			if errors.Is(err, persistence.ErrConflict) {
				err = ErrModuleExists
			}
			ctx.Send(sender, &configureReply{err: mapWriteErr(err)})
			if !a.rec.life.Registered() {
				a.retire(ctx, &removeServer{serverID: a.rec.id(), key: a.rec.key()})
			}
			return
		}
		a.deps.metrics.ServerStatus("", cmd.Server.Status) // a configured server joins the servers gauge
		a.adopt(ctx, cmd.Server, now, stall, carrier)
		ctx.Send(sender, &configureReply{server: cmd.Server})
	})
}
