package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

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

// queue adds delta to the calls of serverID waiting for a slot.
func (g *Gateway) queue(serverID uuid.UUID, delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queued[serverID] += delta; g.queued[serverID] == 0 {
		delete(g.queued, serverID)
	}
}

// Queued returns how many accepted calls to serverID are waiting for one of its Config.CallsPerServer
// slots (none of them has been sent). It is safe for concurrent use.
func (g *Gateway) Queued(serverID uuid.UUID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued[serverID]
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
	g.queue(call.ServerID, 1)
	select {
	case slot <- struct{}{}:
		wait.Stop()
		g.queue(call.ServerID, -1)
	case <-ctx.Done():
		wait.Stop()
		g.queue(call.ServerID, -1)
		return g.finish(ctx, call, unsent(call, context.Cause(ctx)))
	case <-wait.C:
		g.queue(call.ServerID, -1)
		return g.finish(ctx, call, busy(call, g.cfg.CallsPerServer, g.cfg.QueueTimeout))
	}
	defer func() { <-slot }()
	if ctx.Err() != nil {
		return g.finish(ctx, call, unsent(call, context.Cause(ctx)))
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
	o := classify(call, context.Cause(ctx), res, err)
	o.latencyMS = &ms
	return g.finish(ctx, call, o)
}

// finish records how the running call ended, retrying a transient failure for a few seconds. The
// transition only applies to a running call, so a retry after a commit whose answer was lost writes
// nothing twice. An outcome the database refuses for good (a value it cannot store) is replaced, once, by
// a failed one without the answer (outcome_unrecordable), so the call ends instead of staying running.
func (g *Gateway) finish(ctx context.Context, call persistence.Call, o outcome) persistence.Call {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	transition := func(o outcome) persistence.CallTransition {
		return persistence.CallTransition{
			CallID: call.CallID, From: persistence.CallRunning, State: o.state, OutcomeClass: o.class, Reason: o.reason,
			Result: &o.result, LatencyMS: o.latencyMS, At: g.now(), Kind: o.kind,
		}
	}
	tr := transition(o)
	replaced := false
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
		if !replaced && !persistence.IsTransient(err) && !errors.Is(err, persistence.ErrConflict) {
			g.log.ErrorContext(ctx, "the outcome of a call cannot be stored; recording the call as failed without it",
				"call_id", call.CallID, "state", o.state, "outcome_class", o.class, "err", err)
			latency := o.latencyMS
			o = failed(call, "outcome_unrecordable", "the call ended ("+o.class+"), but the service could not store its outcome, "+
				"so what the server answered, if anything, is lost; the call is never re-sent")
			o.latencyMS = latency
			tr, replaced = transition(o), true
			attempt = -1
			continue
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
