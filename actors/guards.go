package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/lifecycle"
)

// Guards against false alarms (issue 7). Their rules live in package lifecycle (the monitor's stall
// clock, flapping, the mass-silence permit); the actors make each visible when it acts: a log line, an
// OnEvent event (counted as a metric) and, for the mass-silence guard, one fleet-level alert.

// FlapConfig configures flapping detection (lifecycle.FlapConfig).
type FlapConfig = lifecycle.FlapConfig

// MassSilenceConfig configures the mass-silence guard (lifecycle.MassSilenceConfig); it is off unless
// Fraction > 0.
type MassSilenceConfig = lifecycle.MassSilenceConfig

// permitMsg asks the fleet whether a server may turn unhealthy this monitor period.
type permitMsg struct{ tenantID uuid.UUID }

type permitReply struct{ granted bool }

// silenceStore keeps a tenant's mass-silence count for every node (cluster mode):
// persistence.Store.TakeSilencePermits.
type silenceStore interface {
	TakeSilencePermits(ctx context.Context, tenantID uuid.UUID,
		take func(c lifecycle.SilenceCount, servers int) lifecycle.SilenceCount) error
}

// sharedPermits is the answer of the tenant's shared count to the requests in waiting: the first
// granted of them may turn unhealthy, the rest are held. err: the count was not reached (every waiting
// server keeps the seed's rule, as when the fleet does not answer at all).
type sharedPermits struct {
	tenantID uuid.UUID
	period   time.Time // the period asked for
	waiting  []*actor.PID
	granted  int
	hold     *lifecycle.Hold
	err      error
}

// askShared sends the permit requests waiting for tenantID to the tenant's shared count in one call,
// unless a call of the tenant is in flight (its answer asks again for what waited meanwhile): one
// transaction per tenant per batch, not per server, and none once a call found the period's budget
// spent (fleetActor.spent). The call runs off the fleet's goroutine, bounded by the write timeout; its
// answer comes back as sharedPermits.
func (f *fleetActor) askShared(ctx actor.Context, tenantID uuid.UUID) {
	waiting := f.waiting[tenantID]
	if f.asking[tenantID] || len(waiting) == 0 {
		return
	}
	delete(f.waiting, tenantID)
	f.asking[tenantID] = true
	system, self, store, guard := ctx.ActorSystem(), ctx.Self(), f.shared, f.silence
	period, interval, timeout := f.periodStart, f.period, f.deps.writeTimeout
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res := &sharedPermits{tenantID: tenantID, period: period, waiting: waiting}
		res.err = store.TakeSilencePermits(c, tenantID, func(c lifecycle.SilenceCount, servers int) lifecycle.SilenceCount {
			budget := guard.Budget(servers)
			c, _, _ = c.At(period, interval)
			c, granted, announce := c.Take(len(waiting), budget)
			res.granted, res.hold = granted, nil
			if announce {
				res.hold = &lifecycle.Hold{TenantID: tenantID, Held: c.Held, Budget: budget}
			}
			return c
		})
		system.Root.Send(self, res)
	}()
}

// answerShared answers the servers that waited for res, raises the episode's alert if res announced
// it, and asks for what waited meanwhile.
func (f *fleetActor) answerShared(ctx actor.Context, res *sharedPermits) {
	delete(f.asking, res.tenantID)
	granted := res.granted
	if res.err != nil {
		f.deps.log.Warn("mass-silence guard: the tenant's count is unreachable; the seed's rule holds", "tenant_id", res.tenantID, "err", res.err)
		granted = len(res.waiting)
	}
	for i, pid := range res.waiting {
		ctx.Send(pid, &permitReply{granted: i < granted})
	}
	f.silence.Refused(res.tenantID, len(res.waiting)-granted)
	if res.err == nil && granted < len(res.waiting) && res.period.Equal(f.periodStart) {
		// The period's budget is spent (it is fixed for the period): the rest of it is refused here,
		// and the tenant's count already has the refusal that keeps its episode going.
		f.spent[res.tenantID] = true
	}
	if res.err == nil && res.hold != nil {
		f.hold(ctx, res.hold)
	}
	f.askShared(ctx, res.tenantID)
}

// periodOf is the wall-clock monitor period now falls in, the same on every node: the tenant's shared
// count is per period.
func periodOf(now time.Time, interval time.Duration) time.Time { return now.Truncate(interval) }
