package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/lifecycle"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// fakeStore is the actors' Store without a database: it keeps the servers in memory and records every
// committed command in commit order. hook, if set, is called (in the writer's goroutine, outside any
// actor) for each command before it is applied; a non-nil error fails that command, and a hook that
// blocks holds the commit in flight.
type fakeStore struct {
	mu        sync.Mutex
	servers   map[uuid.UUID]persistence.Server
	committed []persistence.Command
	hook      func(persistence.Command) error
	// reconcileErr, if set, fails ReconcileSkills (the last step of Start).
	reconcileErr error
	silence      map[uuid.UUID]lifecycle.SilenceCount // TakeSilencePermits
	silenceErr   error                                // if set, fails TakeSilencePermits
}

func newFakeStore() *fakeStore { return &fakeStore{servers: map[uuid.UUID]persistence.Server{}} }

// errLost fails a command for good (the writer does not retry it: not transient). errAnswerLost
// commits the command but answers as errLost: a commit whose answer was lost.
var (
	errLost       error = &pgconn.PgError{Code: "XX000", Message: "fake: commit failed"}
	errAnswerLost       = errors.New("fake: committed, answer lost")
)

func (s *fakeStore) setHook(h func(persistence.Command) error) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

func (s *fakeStore) Commit(_ context.Context, cmds []persistence.Command) []error {
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		s.mu.Lock()
		h := s.hook
		s.mu.Unlock()
		if h != nil {
			if errs[i] = h(c); errs[i] == errAnswerLost {
				errs[i] = errLost
			} else if errs[i] != nil {
				continue
			}
		}
		s.mu.Lock()
		if s.apply(c) {
			s.committed = append(s.committed, c)
		}
		s.mu.Unlock()
	}
	return errs
}

// apply applies c and reports whether it changed anything: a transition whose event id was already
// applied is not applied again (the event id makes the real command idempotent too).
func (s *fakeStore) apply(c persistence.Command) bool {
	switch c := c.(type) {
	case *persistence.RegisterCmd:
		for _, sv := range s.servers {
			if sv.TenantID == c.TenantID && sv.ModuleName == c.ModuleName {
				c.From = sv.Status
				sv.Status, sv.Version, sv.DeregisteredAt = health.Healthy, c.Version, nil
				s.servers[sv.ServerID] = sv
				c.Server = sv
				return true
			}
		}
		sv := persistence.Server{ServerID: c.ServerID, TenantID: c.TenantID, ModuleName: c.ModuleName, Version: c.Version,
			Status: health.Healthy, LastHeartbeatAt: c.At, RegisteredAt: c.At, TraceID: c.TraceID}
		s.servers[sv.ServerID] = sv
		c.Server, c.Created = sv, true
	case *persistence.ConfigureCmd:
		sv := persistence.Server{ServerID: c.ServerID, TenantID: c.TenantID, ModuleName: c.ModuleName, Version: c.Version,
			Status: health.Healthy, LastHeartbeatAt: c.At, RegisteredAt: c.At, TraceID: c.TraceID}
		s.servers[sv.ServerID] = sv
		c.Server = sv
	case *persistence.TransitionCmd:
		for _, done := range s.committed {
			if t, ok := done.(*persistence.TransitionCmd); ok && t.EventID == c.EventID {
				return false
			}
		}
		sv := s.servers[c.ServerID]
		sv.Status = c.To
		s.servers[c.ServerID] = sv
		c.Applied = true
	}
	return true
}

// transitions returns the committed transitions of serverID, in commit order.
func (s *fakeStore) transitions(serverID uuid.UUID) []*persistence.TransitionCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*persistence.TransitionCmd
	for _, c := range s.committed {
		if t, ok := c.(*persistence.TransitionCmd); ok && t.ServerID == serverID {
			out = append(out, t)
		}
	}
	return out
}

// count returns how many committed commands satisfy match.
func (s *fakeStore) count(match func(persistence.Command) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.committed {
		if match(c) {
			n++
		}
	}
	return n
}

func (s *fakeStore) StampHeartbeatsFenced(context.Context, []persistence.Stamp) ([]persistence.Fence, error) {
	return nil, nil
}

func (s *fakeStore) TenantIDs(context.Context) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[uuid.UUID]bool{}
	var out []uuid.UUID
	for _, sv := range s.servers {
		if !seen[sv.TenantID] {
			seen[sv.TenantID] = true
			out = append(out, sv.TenantID)
		}
	}
	return out, nil
}

func (s *fakeStore) ReconcileTenants(context.Context, []uuid.UUID) (int64, error) {
	return 0, s.reconcileErr
}

func (s *fakeStore) ClaimAlerts(context.Context, uuid.UUID, time.Time, int) ([]persistence.Alert, error) {
	return nil, nil
}

func (s *fakeStore) MarkAlertDelivered(context.Context, persistence.Alert, int, time.Time) (bool, error) {
	return true, nil
}

func (s *fakeStore) MarkAlertFailed(context.Context, persistence.Alert, int, time.Time, string) (bool, error) {
	return true, nil
}

func (s *fakeStore) LoadFleet(_ context.Context, tenants []uuid.UUID, _ []int, fn func(persistence.Server) error) error {
	for _, t := range tenants {
		s.mu.Lock()
		var list []persistence.Server
		for _, sv := range s.servers {
			if sv.TenantID == t {
				list = append(list, sv)
			}
		}
		s.mu.Unlock()
		for _, sv := range list {
			if err := fn(sv); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *fakeStore) ServerTotals(_ context.Context, tenants []uuid.UUID) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	totals := make([]int, len(tenants))
	for i, t := range tenants {
		for _, sv := range s.servers {
			if sv.TenantID == t {
				totals[i]++
			}
		}
	}
	return totals, nil
}

var _ Store = (*fakeStore)(nil)

// TakeSilencePermits keeps each tenant's mass-silence count in memory, applied one call at a time as
// PostgreSQL does under its row lock; servers is the tenant's servers the store holds.
func (s *fakeStore) TakeSilencePermits(_ context.Context, tenantID uuid.UUID,
	take func(c lifecycle.SilenceCount, servers int) lifecycle.SilenceCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.silenceErr != nil {
		return s.silenceErr
	}
	if s.silence == nil {
		s.silence = map[uuid.UUID]lifecycle.SilenceCount{}
	}
	servers := 0
	for _, srv := range s.servers {
		if srv.TenantID == tenantID {
			servers++
		}
	}
	s.silence[tenantID] = take(s.silence[tenantID], servers)
	return nil
}
