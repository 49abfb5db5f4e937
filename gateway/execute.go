package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
)

func (g *Gateway) isStopping() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopping
}

// register makes callID a call in flight of this process and returns its context: it keeps ctx's
// values (the trace) but not its cancellation, and ends only by the inflight's cancel (an
// administrator, or shutdown) or the call's own deadline. It returns a nil inflight once the gateway is
// stopping.
func (g *Gateway) register(ctx context.Context, callID uuid.UUID) (context.Context, *inflight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return nil, nil
	}
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &inflight{cancel: cancel, done: make(chan struct{})}
	g.inflight[callID] = f
	return cctx, f
}

// unregister ends f, the call in flight callID.
func (g *Gateway) unregister(callID uuid.UUID, f *inflight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[callID] == f {
		delete(g.inflight, callID)
	}
	f.cancel(nil)
}

func (g *Gateway) lookup(callID uuid.UUID) *inflight {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight[callID]
}

// slot returns the semaphore bounding the calls in flight to serverID.
func (g *Gateway) slot(serverID uuid.UUID) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.slots[serverID]
	if !ok {
		s = make(chan struct{}, g.cfg.CallsPerServer)
		g.slots[serverID] = s
	}
	return s
}

// launch executes call, in flight as f with context ctx (from register), in a goroutine of the gateway
// (never an actor's mailbox).
func (g *Gateway) launch(ctx context.Context, f *inflight, call persistence.Call, t persistence.CallTarget, args map[string]any) {
	g.calls.Add(1)
	go func() {
		defer g.calls.Done()
		defer close(f.done)
		defer g.unregister(call.CallID, f)
		f.call = g.execute(ctx, call, t, args)
	}()
}

// await waits for the call in flight f (nil: not in flight here) to end, for Config.Wait at most, and
// returns the call as it then stands.
func (g *Gateway) await(ctx context.Context, tenantID, callID uuid.UUID, f *inflight) (persistence.Call, error) {
	if f != nil {
		t := time.NewTimer(g.cfg.Wait)
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
	}
	c, err := g.store.GetCall(ctx, tenantID, callID)
	if errors.Is(err, persistence.ErrNotFound) {
		return persistence.Call{}, ErrNotFound
	}
	return c, err
}

// outcome is how a call ended.
type outcome struct {
	state         persistence.CallState
	class, reason string
	result        persistence.CallResult
	latencyMS     *int64
	kind          string
}

// execute waits for a slot of the call's server, records the start, sends the call once, and records
// how it ended. It returns the call as recorded (or, if the database could not take the outcome, as it
// ended: the row then stays running until the next start marks it interrupted).
func (g *Gateway) execute(ctx context.Context, call persistence.Call, t persistence.CallTarget, args map[string]any) persistence.Call {
	slot := g.slot(call.ServerID)
	wait := time.NewTimer(g.cfg.QueueTimeout)
	select {
	case slot <- struct{}{}:
		wait.Stop()
	case <-ctx.Done():
		wait.Stop()
		return g.finish(ctx, call, g.unsent(ctx, call))
	case <-wait.C:
		reason := fmt.Sprintf("%d calls to server %q were already in flight and none ended within %s: this call was not sent, the server was not asked",
			g.cfg.CallsPerServer, call.ServerName, g.cfg.QueueTimeout)
		return g.finish(ctx, call, failed(call, "server_busy", reason))
	}
	defer func() { <-slot }()
	if ctx.Err() != nil {
		return g.finish(ctx, call, g.unsent(ctx, call))
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	started, err := g.store.StartCall(wctx, call.TenantID, call.CallID, g.now())
	cancel()
	if err != nil || !started {
		// A call whose start cannot be recorded is not sent: its outcome could not be recorded either.
		g.log.WarnContext(ctx, "call not started: its start could not be recorded", "call_id", call.CallID, "err", err)
		return g.finish(ctx, call, failed(call, "unavailable", "the service could not record the call's start, so it was not sent: the server was not asked"))
	}
	start := time.Now()
	res, err := g.caller.CallTool(ctx, t.Server, t.Config, call.Tool, args)
	ms := time.Since(start).Milliseconds()
	o := g.classify(ctx, call, res, err)
	o.latencyMS = &ms
	return g.finish(ctx, call, o)
}

// classify turns what the MCP client answered into the call's outcome.
func (g *Gateway) classify(ctx context.Context, call persistence.Call, res mcpclient.ToolResult, err error) outcome {
	if err == nil {
		shaped := mcpclient.ShapeResult(call.ServerName, res)
		r := persistence.CallResult{Content: shaped.Content, IsError: shaped.IsError, Dropped: shaped.Dropped, Truncated: shaped.Truncated}
		if !res.IsError {
			return outcome{state: persistence.CallSucceeded, class: "ok", result: r, kind: persistence.EventCallSucceeded}
		}
		note := fmt.Sprintf("[mcpfleet: server %q answered that tool %q failed]", call.ServerName, call.Tool)
		r.Content, r.Truncated = cut(note+"\n"+r.Content, r.Truncated)
		return outcome{state: persistence.CallFailed, class: "tool_error", reason: fmt.Sprintf("server %q answered that the tool failed (isError)", call.ServerName),
			result: r, kind: persistence.EventCallFailed}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		reason := "cancelled by an administrator while in flight: the server was told to cancel it (notifications/cancelled) and may already have acted on it; it is never re-sent"
		return outcome{state: persistence.CallCancelled, class: "cancelled", reason: reason, result: failedResult(call, "cancelled", reason), kind: persistence.EventCallCancelled}
	case errors.Is(cause, errShutdown):
		reason := "the service shut down while the call was in flight: the server was told to cancel it and may already have acted on it; it is never re-sent"
		return failed(call, "interrupted", reason)
	}
	var me *mcpclient.Error
	if errors.As(err, &me) {
		return failed(call, string(me.Class), me.Reason)
	}
	r := thisSideRefusal(persistence.Server{ServerID: call.ServerID, ModuleName: call.ServerName}, err)
	return failed(call, r.Type, r.Detail+"; the server was not asked")
}

// unsent is the outcome of a call cancelled before it was sent.
func (g *Gateway) unsent(ctx context.Context, call persistence.Call) outcome {
	if errors.Is(context.Cause(ctx), errShutdown) {
		return failed(call, "interrupted", "the service shut down before the call was sent: the server was not asked")
	}
	reason := "cancelled by an administrator before it was sent: the server was not asked"
	return outcome{state: persistence.CallCancelled, class: "cancelled", reason: reason, result: failedResult(call, "cancelled", reason), kind: persistence.EventCallCancelled}
}

func failed(call persistence.Call, class, reason string) outcome {
	return outcome{state: persistence.CallFailed, class: class, reason: reason, result: failedResult(call, class, reason), kind: persistence.EventCallFailed}
}

// finish records how the running call ended, retrying a transient failure for a few seconds. The
// transition only applies to a running call, so a retry after a commit whose answer was lost writes
// nothing twice.
func (g *Gateway) finish(ctx context.Context, call persistence.Call, o outcome) persistence.Call {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	tr := persistence.CallTransition{
		CallID: call.CallID, From: persistence.CallRunning, State: o.state, OutcomeClass: o.class, Reason: o.reason,
		Result: &o.result, LatencyMS: o.latencyMS, At: g.now(), Kind: o.kind,
	}
	for attempt := 0; ; attempt++ {
		done, err := g.store.TransitionCall(wctx, call.TenantID, tr)
		if err == nil {
			g.log.InfoContext(ctx, "call ended", "call_id", call.CallID, "run_id", call.RunID, "server_id", call.ServerID,
				"tool", call.Tool, "state", done.State, "outcome_class", done.OutcomeClass, "latency_ms", o.latencyMS)
			return done
		}
		if errors.Is(err, persistence.ErrConflict) {
			if c, gerr := g.store.GetCall(wctx, call.TenantID, call.CallID); gerr == nil {
				return c
			}
		}
		if !persistence.IsTransient(err) || attempt >= 4 || wctx.Err() != nil {
			g.log.ErrorContext(ctx, "the outcome of a call could not be recorded; it stays running until the next start marks it interrupted",
				"call_id", call.CallID, "state", o.state, "outcome_class", o.class, "err", err)
			break
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 300 * time.Millisecond):
		case <-wctx.Done():
		}
	}
	// Answer with the outcome as it happened, though it is not recorded.
	out := call
	now := g.now()
	out.State, out.OutcomeClass, out.Reason, out.Result, out.LatencyMS, out.FinishedAt = o.state, o.class, o.reason, &o.result, o.latencyMS, &now
	return out
}
