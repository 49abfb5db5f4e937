package mcpendpoint

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// MetaRunID is the _meta key of tools/call by which a client without a session (MCP 2026-07-28) names
// its run. With a session, the session is the run and the key is ignored.
const MetaRunID = "dev.mcpfleet/run_id"

// MetaCallID is the _meta key of a tools/call result that names the gateway's call (the dashboard's).
const MetaCallID = "dev.mcpfleet/call_id"

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// runOf is the run of a call: "mcp-<session id>" in a session, else the client's MetaRunID.
func runOf(req *mcp.CallToolRequest) (string, error) {
	if req.Session != nil && req.Session.ID() != "" {
		return "mcp-" + req.Session.ID(), nil
	}
	v, _ := req.Params.Meta[MetaRunID].(string)
	if v == "" {
		return "", fmt.Errorf("this request has no session, so it must name its run: send _meta {%q: \"<run id>\"} with tools/call (1 to 128 letters, digits, '.', '_', ':' or '-')", MetaRunID)
	}
	if !runIDPattern.MatchString(v) {
		return "", fmt.Errorf("_meta %q must be 1 to 128 letters, digits, '.', '_', ':' or '-'", MetaRunID)
	}
	return v, nil
}

// handler is the SDK tool handler of the listed tool name: the call goes through the gateway.
func (h *hub) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p, ok := ctx.Value(principalKey{}).(persistence.Principal)
		if !ok || p.TenantID != h.tenant {
			return toolError("this request carries no key of this tenant", nil), nil
		}
		en, listed := h.lookup(name)
		if !listed {
			return toolError(fmt.Sprintf("tool %q is no longer listed; the server was not asked", name), nil), nil
		}
		run, err := runOf(req)
		if err != nil {
			return toolError(err.Error(), map[string]any{"status": "no_run"}), nil
		}
		greq := gateway.Request{TenantID: h.tenant, RunID: run, SkillID: en.skillID, Arguments: req.Params.Arguments,
			IdempotencyKey: "mcp-" + uuid.NewString(), RequestedBy: p.KeyID}
		return h.call(ctx, req, greq, en)
	}
}

type callOutcome struct {
	call persistence.Call
	err  error
}

// call makes the call through the gateway and waits for it to end: through approval (sending progress
// notifications) and execution. A cancelled ctx (notifications/cancelled, or the request's connection
// closing on 2026-07-28) cancels the call at whatever stage it is, including in flight at the server.
// The endpoint closing (the service stopping) ends the wait at once with a tool error naming the call,
// which is left to the gateway as it is: the SDK waits for its handlers before a session closes, so a
// call waiting for approval must not hold the shutdown. (The session closes right after, so the client
// may see the session end instead of that answer.)
func (h *hub) call(ctx context.Context, req *mcp.CallToolRequest, greq gateway.Request, en *entry) (*mcp.CallToolResult, error) {
	gw := h.e.deps.Gateway
	ch := make(chan callOutcome, 1)
	go func() {
		c, err := gw.Call(context.WithoutCancel(ctx), greq)
		ch <- callOutcome{c, err}
	}()
	var c persistence.Call
	select {
	case o := <-ch:
		if o.err != nil {
			return h.refused(o.err, en), nil
		}
		c = o.call
	case <-ctx.Done():
		h.cancelByKey(ctx, greq, ch)
		return nil, ctx.Err()
	case <-h.e.stop:
		return toolError("[mcpfleet: the service is shutting down; the call may or may not have been recorded: see GET /v1/mcp/calls?run_id="+greq.RunID+"]", map[string]any{"status": "stopping"}), nil
	}
	tick := time.NewTicker(h.e.cfg.WaitPoll)
	defer tick.Stop()
	var progressAt time.Time
	progress := 0.0
	for !terminal(c) {
		if token := req.Params.GetProgressToken(); token != nil && time.Since(progressAt) >= h.e.cfg.ProgressEvery {
			progressAt = time.Now()
			progress++
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: progress, Message: waiting(c)})
		}
		select {
		case <-ctx.Done():
			h.cancel(ctx, c.CallID, greq.RequestedBy)
			return nil, ctx.Err()
		case <-h.e.stop:
			// The session is closing with the service: answer now (the SDK waits for its handlers).
			// The call is left to the gateway, as it is; its outcome is at GET /v1/mcp/calls/{id}.
			r := toolError(fmt.Sprintf("[mcpfleet: the service is shutting down while call %s is %s; it was left as it is: see GET /v1/mcp/calls/%s]", c.CallID, c.State, c.CallID),
				map[string]any{"status": "stopping", "call_id": c.CallID, "state": string(c.State)})
			r.Meta = mcp.Meta{MetaCallID: c.CallID.String()}
			return r, nil
		case <-tick.C:
		}
		got, err := gw.Get(ctx, h.tenant, c.CallID)
		if err != nil {
			if ctx.Err() != nil {
				h.cancel(ctx, c.CallID, greq.RequestedBy)
				return nil, ctx.Err()
			}
			continue // read again at the next tick
		}
		c = got
	}
	return result(c), nil
}

// terminal reports whether c has ended.
func terminal(c persistence.Call) bool {
	switch string(c.State) {
	case "succeeded", "failed", "denied", "cancelled":
		return true
	}
	return false
}

func waiting(c persistence.Call) string {
	if string(c.State) == "awaiting_approval" {
		until := ""
		if c.ApprovalExpiresAt != nil {
			until = " until " + c.ApprovalExpiresAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("awaiting an administrator's approval in the mcpfleet dashboard (call %s)%s", c.CallID, until)
	}
	return fmt.Sprintf("running at the server (call %s)", c.CallID)
}

// cancel cancels a call of this tenant, detached from the request that is going away.
func (h *hub) cancel(ctx context.Context, callID, by uuid.UUID) {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer stop()
	if _, err := h.e.deps.Gateway.Cancel(cctx, h.tenant, callID, by); err != nil {
		var se *gateway.StateError
		if !errors.As(err, &se) {
			h.e.log.WarnContext(ctx, "mcp endpoint: a cancelled call could not be cancelled", "call_id", callID, "err", err)
		}
	}
}

// cancelByKey cancels the call greq is making before its id is known: it is found by its idempotency
// key in its run (or the gateway answers first).
func (h *hub) cancelByKey(ctx context.Context, greq gateway.Request, ch <-chan callOutcome) {
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lctx := context.WithoutCancel(ctx)
	for {
		select {
		case o := <-ch:
			if o.err == nil && !terminal(o.call) {
				h.cancel(ctx, o.call.CallID, greq.RequestedBy)
			}
			return
		case <-deadline.C:
			h.e.log.WarnContext(ctx, "mcp endpoint: a cancelled call was not found to cancel", "run_id", greq.RunID)
			return
		case <-tick.C:
		}
		calls, err := h.e.deps.Gateway.List(lctx, h.tenant, persistence.CallFilter{RunID: greq.RunID, Limit: 20})
		if err != nil {
			continue
		}
		for _, c := range calls {
			if c.IdempotencyKey == greq.IdempotencyKey {
				if !terminal(c) {
					h.cancel(ctx, c.CallID, greq.RequestedBy)
				}
				return
			}
		}
	}
}

// result is the tool result of an ended call: the gateway's shaped text (notes first), an error unless
// it succeeded.
func result(c persistence.Call) *mcp.CallToolResult {
	text := c.Reason
	isError := string(c.State) != "succeeded"
	if c.Result != nil {
		text = c.Result.Content
		isError = isError || c.Result.IsError
	}
	if text == "" {
		text = fmt.Sprintf("[mcpfleet: the call ended %s]", c.State)
	}
	r := &mcp.CallToolResult{IsError: isError, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	r.Meta = mcp.Meta{MetaCallID: c.CallID.String()}
	if isError {
		r.StructuredContent = map[string]any{"call_id": c.CallID, "state": string(c.State), "outcome_class": c.OutcomeClass}
	}
	return r
}

// refused is the tool result of a call the gateway did not make. A tool whose server is down says so,
// since when, when to try again, and on what evidence.
func (h *hub) refused(err error, en *entry) *mcp.CallToolResult {
	var r *gateway.Refusal
	switch {
	case errors.As(err, &r):
	case errors.Is(err, gateway.ErrStopping):
		return toolError("[mcpfleet: the service is shutting down; the call was not made]", map[string]any{"status": "stopping"})
	default:
		h.e.log.Warn("mcp endpoint: a call could not be made", "tenant_id", h.tenant, "tool", en.name, "err", err)
		return toolError("[mcpfleet: the call could not be recorded, so it was not made; try again shortly]", map[string]any{"status": "unavailable", "retry_after_seconds": 2})
	}
	text := fmt.Sprintf("[mcpfleet: the call to tool %q was refused (%s): %s]", en.name, r.Type, r.Detail)
	sc := map[string]any{"status": r.Type, "refusal": r.Type, "server_asked": false, "event_id": r.EventID}
	if r.Type == gateway.RefusedSkillUnavailable {
		return unavailableResult(en, r)
	}
	if r.Type == gateway.RefusedBudgetExhausted {
		sc["limit"], sc["used"] = r.Limit, r.Used
	}
	return toolError(text, sc)
}

// unavailableResult is the tool error of a call to a tool whose server is down, answered without asking
// it: its text says so (and when to try again), its structured content is {status, unavailable_since,
// retry_after_seconds, evidence, server, server_asked: false}:
//   - status is the server's status as the gateway read it for this call: "unhealthy" or
//     "deregistered", or "unavailable" when the server is up but the tool is not (orphaned, or its
//     availability not yet restored);
//   - unavailable_since is when the server went unhealthy, deregistered, or the tool was orphaned;
//   - retry_after_seconds is the soonest waiting may help (the heartbeat interval) for an unhealthy
//     server, and null when waiting alone does not: a deregistered server must register again, an
//     orphaned tool must be imported again;
//   - evidence is the last liveness evidence the service holds (liveness mode, last heartbeat, last
//     completed round trip): for an unhealthy server what its status was decided on, for a
//     deregistered one what was seen before it left.
func unavailableResult(en *entry, r *gateway.Refusal) *mcp.CallToolResult {
	status := string(r.ServerStatus)
	if !down(r.ServerStatus) {
		status = "unavailable"
	}
	var since any
	if r.Since != nil {
		since = r.Since.UTC().Format(time.RFC3339Nano)
	} else if en.since != nil {
		since = en.since.UTC().Format(time.RFC3339Nano)
	}
	var retry any
	if r.RetryAfter > 0 {
		retry = int(math.Ceil(r.RetryAfter.Seconds()))
	}
	ev := map[string]any{"liveness": en.liveness, "last_heartbeat_at": en.lastBeat.UTC().Format(time.RFC3339Nano), "last_contact": nil}
	if en.lastContact != nil {
		ev["last_contact"] = en.lastContact.UTC().Format(time.RFC3339Nano)
	}
	sc := map[string]any{"status": status, "unavailable_since": since, "retry_after_seconds": retry, "evidence": ev,
		"server": en.module, "server_asked": false, "event_id": r.EventID}
	text := fmt.Sprintf("[mcpfleet: tool %q is unavailable: %s", en.name, r.Detail)
	if retry != nil {
		text += fmt.Sprintf("; try again in %d s", retry)
	}
	return toolError(text+"; the server was not asked]", sc)
}
