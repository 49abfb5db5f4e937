package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// skillsActor is the skill registry actor. Server actors tell it when their server's skills must
// become unavailable (unhealthy, deregistered) or available again (recovery); it batches those into
// set-based UPDATEs (UPDATE skill_registry SET available = … WHERE server_id = ANY(…), seed §11.2)
// committed through the writer, and answers each server after COMMIT.
//
// The cascade is level-triggered: reconcile runs at start and every reconcile interval, making every
// skill agree with its server's committed status, so a crash between a transition and its cascade is
// repaired rather than remembered.
type skillsActor struct {
	writer       *actor.PID
	store        reconcileStore
	log          *slog.Logger
	writeTimeout time.Duration
	tel          tel
	waiting      []cascadeWaiter
	inflight     bool
	reconciling  bool
}

type reconcileStore interface {
	TenantIDs(ctx context.Context) ([]uuid.UUID, error)
	ReconcileSkills(ctx context.Context, tenantID uuid.UUID) (int64, error)
}

type cascadeWaiter struct {
	msg    *cascadeMsg
	sender *actor.PID
}

type reconcileTick struct{}

type reconciled struct{}

func newSkillsProps(writer *actor.PID, store reconcileStore, log *slog.Logger, writeTimeout time.Duration, t tel) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &skillsActor{writer: writer, store: store, log: log, writeTimeout: writeTimeout, tel: t}
	}, actor.WithMailbox(unboundedMailbox()))
}

func (s *skillsActor) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch msg := ctx.Message().(type) {
	case *cascadeMsg:
		s.waiting = append(s.waiting, cascadeWaiter{msg: msg, sender: ctx.Sender()})
		s.flush(ctx)
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

type cascadeGroup struct {
	tenantID  uuid.UUID
	available bool
}

func (s *skillsActor) flush(ctx actor.Context) {
	if s.inflight || len(s.waiting) == 0 {
		return
	}
	batch := s.waiting
	s.waiting = nil
	groups := map[cascadeGroup]*persistence.SkillAvailabilityCmd{}
	var cmds []persistence.Command
	index := make([]int, len(batch)) // batch[i] is answered by cmds[index[i]]
	for i, w := range batch {
		g := cascadeGroup{tenantID: w.msg.tenantID, available: w.msg.available}
		cmd, ok := groups[g]
		if !ok {
			cmd = &persistence.SkillAvailabilityCmd{TenantID: g.tenantID, Available: g.available}
			groups[g] = cmd
			cmds = append(cmds, cmd)
		}
		cmd.ServerIDs = append(cmd.ServerIDs, w.msg.serverID)
		cmd.Fences = append(cmd.Fences, w.msg.fence)
		for j, c := range cmds {
			if c == cmd {
				index[i] = j
			}
		}
	}
	s.inflight = true
	span := s.tel.startCascade(batch)
	fut := ctx.RequestFuture(s.writer, &writeRequest{cmds: cmds, deadline: time.Now().Add(s.writeTimeout), trace: carrierOf(span)}, s.writeTimeout+time.Second)
	ctx.ReenterAfter(fut, func(res any, err error) {
		endSpan(span, err)
		s.inflight = false
		for i, w := range batch {
			e := err
			if e == nil {
				if wr, ok := res.(*writeResult); ok {
					e = wr.errs[index[i]]
				}
			}
			ctx.Send(w.sender, &cascadeReply{err: e})
		}
		s.flush(ctx)
	})
}

// ReconcileSkills makes every tenant's skills agree with their servers' committed status and returns
// how many skills it changed.
func ReconcileSkills(ctx context.Context, store reconcileStore) (int64, error) {
	tenants, err := store.TenantIDs(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tenants {
		n, err := store.ReconcileSkills(ctx, t)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
