package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/ui"
)

// uiCalls is the tool-call gateway as the dashboard uses it (ui.Calls): the gateway decides, the store
// lists the recent run events.
type uiCalls struct {
	gw    *gateway.Gateway
	store *persistence.Store
}

var _ ui.Calls = uiCalls{}

// AwaitingApproval implements ui.Calls. The gateway lists newest first and expires parked calls past
// their window on the way; the dashboard shows the oldest first.
func (c uiCalls) AwaitingApproval(ctx context.Context, tenantID, serverID uuid.UUID, limit int) ([]ui.ParkedCall, error) {
	calls, err := c.gw.List(ctx, tenantID, persistence.CallFilter{State: persistence.CallAwaitingApproval, Limit: 500})
	if err != nil {
		return nil, err
	}
	var out []ui.ParkedCall
	for i := len(calls) - 1; i >= 0 && len(out) < limit; i-- {
		k := calls[i]
		if serverID != uuid.Nil && k.ServerID != serverID {
			continue
		}
		out = append(out, ui.ParkedCall{CallID: k.CallID, RunID: k.RunID, ServerID: k.ServerID, ModuleName: k.ServerName,
			Tool: k.Tool, Arguments: k.Arguments, RequestedBy: k.RequestedBy, RequestedAt: k.CreatedAt, ExpiresAt: k.ApprovalExpiresAt,
			TraceID: k.TraceID})
	}
	return out, nil
}

// Decide implements ui.Calls: an approval runs the call (within its deadline) before it returns.
func (c uiCalls) Decide(ctx context.Context, p persistence.Principal, callID uuid.UUID, approve bool) (string, error) {
	var call persistence.Call
	var err error
	if approve {
		call, err = c.gw.Approve(ctx, p.TenantID, callID, p.KeyID)
	} else {
		call, err = c.gw.Deny(ctx, p.TenantID, callID, p.KeyID)
	}
	var se *gateway.StateError
	switch {
	case err == nil:
		return string(call.State), nil
	case errors.Is(err, gateway.ErrSelfApproval):
		return "", fmt.Errorf("%w: %v", ui.ErrSelfApproval, err)
	case errors.As(err, &se), errors.Is(err, gateway.ErrApprovalExpired):
		return "", fmt.Errorf("%w: %v", ui.ErrNotParked, err)
	case errors.Is(err, gateway.ErrNotFound):
		return "", persistence.ErrNotFound
	case errors.Is(err, gateway.ErrStopping), errors.Is(err, gateway.ErrUnavailable):
		return "", fmt.Errorf("%w: %v", actors.ErrUnavailable, err)
	}
	return "", err
}

// RecentEvents implements ui.Calls.
func (c uiCalls) RecentEvents(ctx context.Context, tenantID, serverID uuid.UUID, limit int) ([]ui.CallEvent, error) {
	evs, err := c.store.RecentRunEvents(ctx, tenantID, serverID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]ui.CallEvent, len(evs))
	for i, e := range evs {
		out[i] = ui.CallEvent{EventID: fmt.Sprint(e.EventID), Kind: e.Kind, RunID: e.RunID, Tool: e.Tool, State: string(e.State),
			OutcomeClass: e.OutcomeClass, LatencyMS: e.LatencyMS, At: e.At, TraceID: e.TraceID}
		if e.CallID != nil {
			out[i].CallID = *e.CallID
		}
		if e.ServerID != nil {
			out[i].ServerID = *e.ServerID
		}
		out[i].RequestedBy, out[i].DecidedBy = e.RequestedBy, e.DecidedBy
	}
	return out, nil
}
