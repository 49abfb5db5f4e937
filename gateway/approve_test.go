package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// memStore is the part of Store that deciding on a parked call uses, in memory: one tenant's calls and
// one target. Its TransitionCall applies the rules the mcp_calls table enforces (forward only, the
// expiry conditions), so a decision the gateway gets wrong shows up as ErrConflict here too. Any other
// method panics (the embedded nil Store): these tests must not reach it.
type memStore struct {
	Store
	mu          sync.Mutex
	calls       map[uuid.UUID]persistence.Call
	target      persistence.CallTarget
	transitions []persistence.CallTransition
	// refuse, if set, may refuse a transition with an error before it is applied.
	refuse func(persistence.CallTransition) error
}

func (s *memStore) GetCall(_ context.Context, _, id uuid.UUID) (persistence.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok {
		return persistence.Call{}, persistence.ErrNotFound
	}
	return c, nil
}

func (s *memStore) CallTargetBySkill(context.Context, uuid.UUID, uuid.UUID) (persistence.CallTarget, error) {
	return s.target, nil
}

func (s *memStore) StartCall(_ context.Context, _, id uuid.UUID, at time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[id]
	c.StartedAt = &at
	s.calls[id] = c
	return true, nil
}

func (s *memStore) TransitionCall(_ context.Context, _ uuid.UUID, t persistence.CallTransition) (persistence.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil {
		if err := s.refuse(t); err != nil {
			return persistence.Call{}, err
		}
	}
	c, ok := s.calls[t.CallID]
	switch {
	case !ok:
		return persistence.Call{}, persistence.ErrNotFound
	case c.State != t.From || !c.State.CanMoveTo(t.State),
		t.NotExpiredAt != nil && c.ApprovalExpiresAt != nil && !t.NotExpiredAt.Before(*c.ApprovalExpiresAt),
		t.ExpiredAt != nil && (c.ApprovalExpiresAt == nil || t.ExpiredAt.Before(*c.ApprovalExpiresAt)):
		return persistence.Call{}, fmt.Errorf("%w: call %s is %s", persistence.ErrConflict, c.CallID, c.State)
	}
	s.transitions = append(s.transitions, t)
	c.State, c.OutcomeClass, c.Reason, c.Result = t.State, t.OutcomeClass, t.Reason, t.Result
	if t.DecidedBy != nil {
		c.DecidedBy, c.DecidedAt = t.DecidedBy, &t.At
	}
	if t.State.Finished() {
		c.FinishedAt = &t.At
	}
	s.calls[c.CallID] = c
	return c, nil
}

// fakeCaller answers every call with its text, and counts what reached it.
type fakeCaller struct {
	mu   sync.Mutex
	sent int
}

func (f *fakeCaller) CheckCall(persistence.ServerConfig) error { return nil }

func (f *fakeCaller) CallTool(context.Context, persistence.Server, persistence.ServerConfig, string, map[string]any) (mcpclient.ToolResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	return mcpclient.ToolResult{Content: []mcpclient.Block{{Type: "text", Text: "done"}}}, nil
}

func (f *fakeCaller) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// parkedGateway is a gateway over a memStore holding one call parked by requester, with a window of 15
// minutes from t0.
func parkedGateway(t *testing.T, requester uuid.UUID) (*Gateway, *memStore, *fakeCaller, *health.FakeClock, persistence.Call) {
	t.Helper()
	target := callable()
	end := t0.Add(15 * time.Minute)
	c := persistence.Call{CallID: uuid.New(), TenantID: uuid.New(), RunID: "run-1", ServerID: target.Server.ServerID, ServerName: "weather",
		SkillID: &target.Skill.SkillID, Tool: "forecast", Arguments: []byte(`{"city":"Oslo"}`), State: persistence.CallAwaitingApproval,
		RequestedBy: requester, CreatedAt: t0, ApprovalExpiresAt: &end}
	store := &memStore{calls: map[uuid.UUID]persistence.Call{c.CallID: c}, target: target}
	caller := &fakeCaller{}
	clock := health.NewFakeClock(t0)
	g := New(Config{}, Deps{Store: store, Caller: caller, Clock: clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return g, store, caller, clock, c
}

// Four eyes, without a database: the requesting key's approval changes nothing and sends nothing;
// another key's runs the call once and is recorded as its decider.
func TestApproveFourEyes(t *testing.T) {
	requester, other := uuid.New(), uuid.New()
	g, store, caller, _, c := parkedGateway(t, requester)
	ctx := context.Background()
	got, err := g.Approve(ctx, c.TenantID, c.CallID, requester)
	if !errors.Is(err, ErrSelfApproval) || got.State != persistence.CallAwaitingApproval {
		t.Fatalf("self-approval: %v, %s", err, got.State)
	}
	if len(store.transitions) != 0 || caller.count() != 0 {
		t.Fatalf("a refused self-approval wrote %d transitions and sent %d calls", len(store.transitions), caller.count())
	}
	done, err := g.Approve(ctx, c.TenantID, c.CallID, other)
	if err != nil || done.State != persistence.CallSucceeded || done.DecidedBy == nil || *done.DecidedBy != other || done.RequestedBy != requester {
		t.Fatalf("approved by another key: %v %+v", err, done)
	}
	if caller.count() != 1 {
		t.Fatalf("sent %d times", caller.count())
	}
	if _, err := g.Approve(ctx, c.TenantID, c.CallID, other); !errors.As(err, new(*StateError)) {
		t.Fatalf("approving twice: %v", err)
	}
	if caller.count() != 1 {
		t.Fatalf("a second approval sent the call again")
	}
}

// The requester may deny its own call: it ends denied, unsent, with the requester as its decider.
func TestDenyOwnCall(t *testing.T) {
	requester := uuid.New()
	g, _, caller, _, c := parkedGateway(t, requester)
	d, err := g.Deny(context.Background(), c.TenantID, c.CallID, requester)
	if err != nil || d.State != persistence.CallDenied || d.OutcomeClass != "denied" || d.Result == nil || !d.Result.IsError ||
		d.DecidedBy == nil || *d.DecidedBy != requester {
		t.Fatalf("deny own call: %v %+v", err, d)
	}
	if caller.count() != 0 {
		t.Fatal("a denied call was sent")
	}
}

// Approval re-checks the preconditions: a call whose skill was disabled while it waited fails with the
// refusal's type, unsent, and the approver is recorded.
func TestApproveRechecks(t *testing.T) {
	g, store, caller, _, c := parkedGateway(t, uuid.New())
	store.target.Skill.Enabled = false
	approver := uuid.New()
	got, err := g.Approve(context.Background(), c.TenantID, c.CallID, approver)
	if err != nil || got.State != persistence.CallFailed || got.OutcomeClass != RefusedSkillDisabled || *got.DecidedBy != approver {
		t.Fatalf("approve after the skill was disabled: %v %+v", err, got)
	}
	if caller.count() != 0 {
		t.Fatal("a call that no longer meets its preconditions was sent")
	}
}

// A window that closed fails the call on the way (approval_expired), and a decision on it is
// ErrApprovalExpired, never a send — also for the key that could otherwise approve it.
func TestApproveAfterTheWindow(t *testing.T) {
	g, _, caller, clock, c := parkedGateway(t, uuid.New())
	clock.Advance(15 * time.Minute)
	got, err := g.Approve(context.Background(), c.TenantID, c.CallID, uuid.New())
	if !errors.Is(err, ErrApprovalExpired) || got.State != persistence.CallFailed || got.OutcomeClass != "approval_expired" {
		t.Fatalf("approve at the window's end: %v %+v", err, got)
	}
	if _, err := g.Deny(context.Background(), c.TenantID, c.CallID, c.RequestedBy); !errors.Is(err, ErrApprovalExpired) {
		t.Fatalf("deny after expiry: %v", err)
	}
	if caller.count() != 0 {
		t.Fatal("an expired call was sent")
	}
}

// An outcome the database refuses for good (here: a character it cannot store, SQLSTATE 22P05) does not
// leave the call running: it is recorded as failed (outcome_unrecordable) without the answer, once, and
// the call was sent once.
func TestUnrecordableOutcomeEndsTheCall(t *testing.T) {
	g, store, caller, _, c := parkedGateway(t, uuid.New())
	store.refuse = func(tr persistence.CallTransition) error {
		if tr.State == persistence.CallSucceeded {
			return fmt.Errorf("transition call: %w", &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence"})
		}
		return nil
	}
	got, err := g.Approve(context.Background(), c.TenantID, c.CallID, uuid.New())
	if err != nil || got.State != persistence.CallFailed || got.OutcomeClass != "outcome_unrecordable" || got.Result == nil || !got.Result.IsError {
		t.Fatalf("approve: %v %+v", err, got)
	}
	if stored, _ := store.GetCall(context.Background(), c.TenantID, c.CallID); stored.State != persistence.CallFailed {
		t.Fatalf("the call as stored is %s", stored.State)
	}
	if caller.count() != 1 {
		t.Fatalf("sent %d times", caller.count())
	}
}
