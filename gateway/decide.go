package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// Get returns one call of tenantID (ErrNotFound for none). A parked call whose approval window has
// closed is failed first (approval_expired), so a reader never sees a call that can no longer be
// approved as awaiting approval.
func (g *Gateway) Get(ctx context.Context, tenantID, callID uuid.UUID) (persistence.Call, error) {
	c, err := g.store.GetCall(ctx, tenantID, callID)
	if errors.Is(err, persistence.ErrNotFound) {
		return persistence.Call{}, ErrNotFound
	}
	if err != nil {
		return persistence.Call{}, err
	}
	if g.due(c) {
		if done, err := g.expire(ctx, c); err == nil {
			return done, nil
		}
	}
	return c, nil
}

// List returns calls of tenantID matching f, newest first (parked ones past their window are expired
// first when f asks for parked calls).
func (g *Gateway) List(ctx context.Context, tenantID uuid.UUID, f persistence.CallFilter) ([]persistence.Call, error) {
	calls, err := g.store.ListCalls(ctx, tenantID, f)
	if err != nil {
		return nil, err
	}
	out := calls[:0]
	for _, c := range calls {
		if g.due(c) {
			done, err := g.expire(ctx, c)
			if err != nil {
				return nil, err
			}
			if f.State != "" && done.State != f.State {
				continue
			}
			c = done
		}
		out = append(out, c)
	}
	return out, nil
}

// due reports whether c is parked past its approval window now.
func (g *Gateway) due(c persistence.Call) bool { return approvalDue(c, g.now()) }

// expire fails the parked call c whose window closed, and returns it as it then stands.
func (g *Gateway) expire(ctx context.Context, c persistence.Call) (persistence.Call, error) {
	now := g.now()
	reason, r := expiredResult(g.cfg.ApprovalWindow)(c)
	done, err := g.store.TransitionCall(ctx, c.TenantID, persistence.CallTransition{
		CallID: c.CallID, From: persistence.CallAwaitingApproval, State: persistence.CallFailed, OutcomeClass: "approval_expired",
		Reason: reason, Result: &r, At: now, Kind: persistence.EventCallFailed, ExpiredAt: &now,
	})
	if errors.Is(err, persistence.ErrConflict) {
		return g.store.GetCall(ctx, c.TenantID, c.CallID)
	}
	return done, err
}

// parked reads callID for a decision: it must be awaiting approval with its window open. A closed window
// fails the call and is ErrApprovalExpired; another state is a *StateError.
func (g *Gateway) parked(ctx context.Context, tenantID, callID uuid.UUID, op string) (persistence.Call, error) {
	c, err := g.Get(ctx, tenantID, callID)
	if err != nil {
		return persistence.Call{}, err
	}
	return c, decidable(c, op)
}

// decided re-reads a call a concurrent decision changed and returns the error that explains it.
func (g *Gateway) decided(ctx context.Context, c persistence.Call, op string) (persistence.Call, error) {
	now, err := g.store.GetCall(ctx, c.TenantID, c.CallID)
	if err != nil {
		return persistence.Call{}, err
	}
	if approvalExpired(now) || g.due(now) {
		if g.due(now) {
			if now, err = g.expire(ctx, now); err != nil {
				return persistence.Call{}, err
			}
		}
		return now, ErrApprovalExpired
	}
	return now, &StateError{Call: now, Op: op}
}

// Approve runs a parked call, by (the approving key), which must not be the key that requested it
// (four eyes): its preconditions are checked again — the skill, the server and the arguments may have
// changed while it waited — and a call that no longer meets them fails without being sent (outcome the
// refusal's type). It returns like Call. Errors: ErrNotFound, ErrApprovalExpired (the call is now
// failed), *StateError, ErrSelfApproval (nothing changed: the call stays parked), ErrStopping.
func (g *Gateway) Approve(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error) {
	c, err := g.parked(ctx, tenantID, callID, "approve")
	if err != nil {
		return c, err
	}
	if err := mayApprove(c, by); err != nil {
		g.log.WarnContext(ctx, "self-approval refused: the call stays parked for another administrator's key",
			"call_id", c.CallID, "run_id", c.RunID, "key_id", by)
		return c, err
	}
	var t persistence.CallTarget
	if c.SkillID != nil {
		t, err = g.store.CallTargetBySkill(ctx, tenantID, *c.SkillID)
	} else {
		t, err = g.store.CallTargetByName(ctx, tenantID, c.ServerID, c.Tool)
	}
	var ref *Refusal
	var args map[string]any
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		ref = &Refusal{Type: RefusedSkillNotFound, Detail: "the skill is gone from this tenant"}
	case err != nil:
		return persistence.Call{}, err
	default:
		args, ref = preconditions(t, c.Arguments, g.caller.CheckCall, g.cfg.RetryAfter)
	}
	now := g.now()
	if ref != nil {
		reason := "approved, but no longer callable: " + ref.Detail + "; the server was not asked"
		r := failedResult(c, ref.Type, reason)
		done, err := g.store.TransitionCall(ctx, tenantID, persistence.CallTransition{
			CallID: c.CallID, From: persistence.CallAwaitingApproval, State: persistence.CallFailed, OutcomeClass: ref.Type,
			Reason: reason, Result: &r, DecidedBy: &by, At: now, Kind: persistence.EventCallFailed, NotExpiredAt: &now,
		})
		if errors.Is(err, persistence.ErrConflict) {
			return g.decided(ctx, c, "approve")
		}
		return done, err
	}
	cctx, f := g.register(ctx, c.CallID)
	if f == nil {
		return persistence.Call{}, ErrStopping
	}
	running, err := g.store.TransitionCall(ctx, tenantID, persistence.CallTransition{
		CallID: c.CallID, From: persistence.CallAwaitingApproval, State: persistence.CallRunning, DecidedBy: &by, At: now,
		NotExpiredAt: &now,
	})
	if err != nil {
		g.unregister(c.CallID, f)
		if errors.Is(err, persistence.ErrConflict) {
			return g.decided(ctx, c, "approve")
		}
		return persistence.Call{}, err
	}
	g.log.InfoContext(ctx, "call approved", "call_id", c.CallID, "run_id", c.RunID, "approved_by", by)
	g.launch(cctx, f, running, t, args)
	return g.await(ctx, tenantID, c.CallID, f)
}

// Deny refuses a parked call, by (the denying key): it ends as denied, a failed tool result, never
// sent. The requesting key may deny its own call: withdrawing a call needs no second pair of eyes.
// Errors: ErrNotFound, ErrApprovalExpired, *StateError.
func (g *Gateway) Deny(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error) {
	c, err := g.parked(ctx, tenantID, callID, "deny")
	if err != nil {
		return c, err
	}
	now := g.now()
	reason := "denied by an administrator: the call was not sent, the server was not asked"
	r := failedResult(c, "denied", reason)
	done, err := g.store.TransitionCall(ctx, tenantID, persistence.CallTransition{
		CallID: c.CallID, From: persistence.CallAwaitingApproval, State: persistence.CallDenied, OutcomeClass: "denied",
		Reason: reason, Result: &r, DecidedBy: &by, At: now, Kind: persistence.EventCallFailed, NotExpiredAt: &now,
	})
	if errors.Is(err, persistence.ErrConflict) {
		return g.decided(ctx, c, "deny")
	}
	if err == nil {
		g.log.InfoContext(ctx, "call denied", "call_id", c.CallID, "run_id", c.RunID, "denied_by", by)
	}
	return done, err
}

// cancelWait bounds how long Cancel waits for a cancelled call to end: the MCP client ends it promptly
// and waits at most two seconds for notifications/cancelled to go out.
const cancelWait = 10 * time.Second

// Cancel cancels a call: a parked one ends as cancelled, never sent; one in flight has its context
// cancelled — the server is told with notifications/cancelled — and Cancel returns once it has ended
// (as cancelled, or as whatever it reached first). Errors: ErrNotFound, *StateError for a call that has
// already ended (or that no process is running).
func (g *Gateway) Cancel(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error) {
	c, err := g.Get(ctx, tenantID, callID)
	if err != nil {
		return c, err
	}
	switch c.State {
	case persistence.CallAwaitingApproval:
		now := g.now()
		reason := "cancelled by an administrator while awaiting approval: the call was not sent, the server was not asked"
		r := failedResult(c, "cancelled", reason)
		done, err := g.store.TransitionCall(ctx, tenantID, persistence.CallTransition{
			CallID: c.CallID, From: persistence.CallAwaitingApproval, State: persistence.CallCancelled, OutcomeClass: "cancelled",
			Reason: reason, Result: &r, DecidedBy: &by, At: now, Kind: persistence.EventCallCancelled,
		})
		if errors.Is(err, persistence.ErrConflict) {
			// Approved meanwhile: cancel it in flight.
			return g.Cancel(ctx, tenantID, callID, by)
		}
		return done, err
	case persistence.CallRunning:
		f := g.lookup(callID)
		if f == nil {
			// It ended meanwhile (or no process is running it: the next start marks it interrupted).
			if now, err := g.store.GetCall(ctx, tenantID, callID); err == nil {
				c = now
			}
			return c, &StateError{Call: c, Op: "cancel"}
		}
		f.cancel(errCancelled)
		g.log.InfoContext(ctx, "call cancelled in flight", "call_id", c.CallID, "run_id", c.RunID, "cancelled_by", by)
		t := time.NewTimer(cancelWait)
		defer t.Stop()
		select {
		case <-f.done:
			if f.call.CallID == callID {
				return f.call, nil
			}
		case <-t.C:
		case <-ctx.Done():
			return persistence.Call{}, ctx.Err()
		}
		return g.store.GetCall(ctx, tenantID, callID)
	}
	return c, &StateError{Call: c, Op: "cancel"}
}

// RunEvents returns up to limit events of run runID of tenantID after event after, oldest first.
func (g *Gateway) RunEvents(ctx context.Context, tenantID uuid.UUID, runID string, after int64, limit int) ([]persistence.RunEvent, error) {
	return g.store.RunEvents(ctx, tenantID, runID, after, limit)
}

// Budget is a run's call budget.
type Budget struct {
	Limit, Used int
}

// RunBudget returns the budget of run runID of tenantID and how much of it is used.
func (g *Gateway) RunBudget(ctx context.Context, tenantID uuid.UUID, runID string) (Budget, error) {
	s, err := g.Settings(ctx, tenantID)
	if err != nil {
		return Budget{}, err
	}
	used, err := g.store.RunBudgetUsed(ctx, tenantID, runID)
	if err != nil {
		return Budget{}, err
	}
	return Budget{Limit: s.MaxCallsPerRun, Used: used}, nil
}

// Settings are a tenant's effective gateway settings.
type Settings struct {
	// MaxCallsPerRun is the budget of each run; Default is the service's, which applies when the tenant
	// set none (TenantSet false).
	MaxCallsPerRun int
	Default        int
	TenantSet      bool
	UpdatedAt      *time.Time
}

// Settings returns tenantID's effective settings.
func (g *Gateway) Settings(ctx context.Context, tenantID uuid.UUID) (Settings, error) {
	ts, err := g.store.GetTenantSettings(ctx, tenantID)
	if err != nil {
		return Settings{}, err
	}
	return effectiveSettings(ts, g.cfg.MaxCallsPerRun), nil
}

// SetMaxCallsPerRun sets tenantID's budget of calls per run (1 to MaxCallsPerRunLimit), or with nil
// returns it to the service's default. It applies to the next call of every run, including runs under
// way.
func (g *Gateway) SetMaxCallsPerRun(ctx context.Context, tenantID uuid.UUID, n *int) (Settings, error) {
	if err := validBudget(n); err != nil {
		return Settings{}, err
	}
	ts, err := g.store.SetMaxCallsPerRun(ctx, tenantID, n, g.now())
	if err != nil {
		return Settings{}, err
	}
	return effectiveSettings(ts, g.cfg.MaxCallsPerRun), nil
}
