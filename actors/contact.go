package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// contactMsg reports a completed MCP round trip with the server (a connection test, an import, a
// probe): liveness evidence, like a heartbeat (ADR-154; design "Liveness evidence").
type contactMsg struct {
	tenantID uuid.UUID
	trace    telemetry.Carrier
	deadline time.Time
}

type contactReply struct {
	status health.Status
	err    error
}

// Contact tells serverID's actor that a round trip with the server just completed. It is liveness
// evidence measured on the service's clock when the actor receives it: it moves the server's deadline
// and recovers a degraded or unhealthy server to healthy, durably (with its audit event and skill
// cascade), before it returns. It does not touch last_heartbeat_at — a contact is not a heartbeat — and
// it never revives a deregistered server (ErrDeregistered). It returns the server's status.
func (f *Fleet) Contact(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (health.Status, error) {
	res, err := f.askServer(ctx, tenantID, serverID, &contactMsg{tenantID: tenantID, trace: trc, deadline: f.writeDeadline()})
	if err != nil {
		return "", err
	}
	r := res.(*contactReply)
	return r.status, r.err
}

func (a *serverActor) receiveContact(ctx actor.Context, msg *contactMsg) {
	sender := ctx.Sender()
	now := a.deps.clock.Now()
	if msg.tenantID != a.rec.tenantID() || !a.rec.life.Registered() {
		ctx.Send(sender, &contactReply{err: ErrNotFound})
		return
	}
	a.arrivedEvidence(ctx, now)
	a.run(ctx, func(ctx actor.Context) { a.contact(ctx, msg, sender, now) },
		func(ctx actor.Context) { ctx.Send(sender, &contactReply{err: ErrUnavailable}) })
}

func (a *serverActor) contact(ctx actor.Context, msg *contactMsg, sender *actor.PID, now time.Time) {
	rec := a.rec
	a.heldEvidence(ctx)
	t, err := rec.life.Recover(a.deps.life, now)
	if err != nil {
		ctx.Send(sender, &contactReply{err: ErrDeregistered})
		return
	}
	if t == nil {
		ctx.Send(sender, &contactReply{status: health.Healthy})
		return
	}
	span := a.startStatusSpan(msg.trace.Context(), "server.recover", t.From, t.To, attribute.String("mcpfleet.evidence", "contact"))
	t.TraceID = carrierOf(span).TraceID()
	cmd := a.transitionCmd(t)
	a.persist(ctx, cmd, msg.trace, msg.deadline, func(ctx actor.Context, err error) {
		defer span.End()
		a.heldEvidence(ctx)
		if err != nil {
			rec.life.Failed(t)
			ctx.Send(sender, &contactReply{err: mapWriteErr(err)})
			return
		}
		a.applyTransition(ctx, t, cmd)
		ctx.Send(sender, &contactReply{status: health.Healthy})
	})
}
