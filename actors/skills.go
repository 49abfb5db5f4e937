package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// skillsActor is the skill registry actor: it keeps every skill's availability agreeing with its
// server's committed status. A transition cascades to its server's skills in its own statement
// (persistence.TransitionCmd.Skills: the skill_unavailable cascade, seed §11.2, and its reverse on
// recovery, committed with the transition), so the actor's work is the level-triggered repair:
// reconcile runs at start and every reconcile interval, making every skill agree with its server's
// committed status, so whatever else drifts (a skill written by hand, a write rolled back around a
// skipped row) is repaired rather than remembered.
type skillsActor struct {
	store       reconcileStore
	log         *slog.Logger
	reconciling bool
}

type reconcileStore interface {
	TenantIDs(ctx context.Context) ([]uuid.UUID, error)
	ReconcileTenants(ctx context.Context, tenants []uuid.UUID) (int64, error)
}

type reconcileTick struct{}

type reconciled struct{}

func newSkillsProps(store reconcileStore, log *slog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &skillsActor{store: store, log: log}
	}, actor.WithMailbox(unboundedMailbox()))
}

func (s *skillsActor) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch ctx.Message().(type) {
	case *reconcileTick:
		if s.reconciling {
			return
		}
		s.reconciling = true
		system, self, store, log := ctx.ActorSystem(), ctx.Self(), s.store, s.log
		go func() {
			c, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if n, err := ReconcileSkills(c, store); err != nil {
				log.Warn("skill reconciliation failed", "err", err)
			} else if n > 0 {
				log.Warn("skill reconciliation repaired skills", "skills", n)
			}
			system.Root.Send(self, &reconciled{})
		}()
	case *reconciled:
		s.reconciling = false
	}
}

// ReconcileSkills makes every tenant's skills agree with their servers' committed status and returns
// how many skills it changed.
func ReconcileSkills(ctx context.Context, store reconcileStore) (int64, error) {
	tenants, err := store.TenantIDs(ctx)
	if err != nil {
		return 0, err
	}
	return store.ReconcileTenants(ctx, tenants)
}
