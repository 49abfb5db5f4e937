package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// entry is one named skill of the tenant as the endpoint last read it.
type entry struct {
	name        string
	skillID     uuid.UUID
	serverID    uuid.UUID
	module      string
	tool        string // its own name on its server
	description string
	schema      json.RawMessage // normalised; nil when outside the subset
	status      health.Status
	since       *time.Time // when the server went down, if it is down
	liveness    string
	lastBeat    time.Time
	lastContact *time.Time
	listed      bool
	why         string // why it is not listed
}

// hub is one tenant's SDK server and the poller that keeps its tool list.
type hub struct {
	e      *Endpoint
	tenant uuid.UUID
	server *mcp.Server
	holds  *holds // Hide mode only

	schemas map[uuid.UUID]normalizedSchema // by skill: the last schema normalised (sync's alone)
	// wake asks the poller to read the tenant's tools now (Endpoint.Changed); one pending request
	// stands for any number.
	wake chan struct{}

	mu      sync.Mutex
	entries map[string]*entry // every named skill, by name
	listed  map[string]*entry // what the SDK server lists
}

func newHub(e *Endpoint, tenant uuid.UUID) *hub {
	h := &hub{e: e, tenant: tenant, holds: newHolds(e.cfg.ListHold), entries: map[string]*entry{}, listed: map[string]*entry{},
		schemas: map[uuid.UUID]normalizedSchema{}, wake: make(chan struct{}, 1)}
	h.server = mcp.NewServer(&mcp.Implementation{Name: "mcpfleet", Title: "mcpfleet", Version: e.deps.Version}, &mcp.ServerOptions{
		Instructions: "The tools of this mcpfleet tenant that an agent may call. Every call goes through mcpfleet's gateway: " +
			"approval, a budget per run (this session), text-only results. A tool whose server is down answers at once with an error saying since when and when to retry.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		Logger:       e.log,
	})
	h.server.AddReceivingMiddleware(h.unlisted)
	return h
}

// run reads the tenant's tools every poll interval, and at once when woken (Endpoint.Changed), until
// the endpoint closes. A wake during a read makes one more read after it, so a change committed while a
// read was under way is never missed.
func (h *hub) run() {
	defer h.e.wg.Done()
	t := time.NewTicker(h.e.cfg.PollInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-h.e.stop:
			return
		case <-t.C:
		case <-h.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.sync(ctx)
		cancel()
		if err != nil && !failing {
			h.e.log.Warn("mcp endpoint: the tenant's tools could not be read; the list stays as it was", "tenant_id", h.tenant, "err", err)
		}
		failing = err != nil
	}
}

// sync reads the tenant's tools, names the new ones and applies the listing to the SDK server: one
// burst of changes, which the SDK sends as one list_changed.
func (h *hub) sync(ctx context.Context) error {
	var flapSince time.Time // Hide mode counts each server's transitions in the flapping window
	if h.e.cfg.Unavailable == Hide {
		flapSince = h.e.deps.Clock.Now().Add(-h.e.cfg.FlapWindow)
	}
	rows, err := h.e.deps.Store.EndpointTools(ctx, h.tenant, flapSince)
	if err != nil {
		return err
	}
	var cands []candidate
	taken := map[string]bool{}
	for _, r := range rows {
		if r.ListedName == "" {
			cands = append(cands, candidate{SkillID: r.Skill.SkillID, Module: r.ModuleName, Tool: r.Skill.Name,
				SelfRegistered: r.Origin != persistence.OriginAdmin})
		} else {
			taken[r.ListedName] = true
		}
	}
	if len(cands) > 0 {
		names := assignNames(cands, taken)
		if err := h.e.deps.Store.AssignToolNames(ctx, h.tenant, names, time.Now().UTC()); err != nil {
			return err
		}
		if rows, err = h.e.deps.Store.EndpointTools(ctx, h.tenant, flapSince); err != nil {
			return err
		}
	}
	now := h.e.deps.Clock.Now()
	seen := map[uuid.UUID]bool{}
	entries := make(map[string]*entry, len(rows))
	for _, r := range rows {
		if r.ListedName == "" {
			continue // lost a race for its name: named on the next poll
		}
		seen[r.Skill.ServerID] = true
		en := &entry{name: r.ListedName, skillID: r.Skill.SkillID, serverID: r.Skill.ServerID, module: r.ModuleName, tool: r.Skill.Name,
			description: r.Skill.Description, status: r.Status, liveness: r.Liveness, lastBeat: r.LastHeartbeatAt, lastContact: r.LastContact}
		if down(r.Status) {
			en.since = r.StatusSince
		}

		en.schema = h.normalized(r.Skill.SkillID, r.Skill.InputSchema)
		alive, flapping := true, false
		if h.e.cfg.Unavailable == Hide {
			flapping = r.Transitions >= h.e.cfg.FlapThreshold
			alive = h.holds.observe(r.Skill.ServerID, r.Status, r.StatusSince, flapping, now)
		}
		switch {
		case r.Skill.OrphanedAt != nil:
			en.why = fmt.Sprintf("tool %q is no longer in the catalogue of server %q", r.Skill.Name, r.ModuleName)
		case !r.Skill.Enabled:
			en.why = fmt.Sprintf("tool %q of server %q is disabled: an operator must enable it", r.Skill.Name, r.ModuleName)
		case !r.ServerEnabled:
			en.why = fmt.Sprintf("server %q is disabled: an administrator must enable it", r.ModuleName)
		case en.schema == nil:
			en.why = fmt.Sprintf("tool %q of server %q has an input schema outside the supported subset", r.Skill.Name, r.ModuleName)
		case !alive && flapping:
			en.why = fmt.Sprintf("server %q is flapping (%d status changes in the last %s), so its tools are off the list until it is stable: fewer than %d changes in that window, then healthy for %s",
				r.ModuleName, r.Transitions, h.e.cfg.FlapWindow, h.e.cfg.FlapThreshold, h.e.cfg.ListHold)
		case !alive:
			en.why = fmt.Sprintf("server %q is %s, so its tools are off the list until it has been healthy for %s", r.ModuleName, r.Status, h.e.cfg.ListHold)
		default:
			en.listed = true
		}
		entries[en.name] = en
	}
	if h.e.cfg.Unavailable == Hide {
		h.holds.forget(seen)
	}
	if len(h.schemas) > len(rows) { // skills gone: forget their schemas
		keep := make(map[uuid.UUID]bool, len(rows))
		for _, r := range rows {
			keep[r.Skill.SkillID] = true
		}
		for id := range h.schemas {
			if !keep[id] {
				delete(h.schemas, id)
			}
		}
	}
	h.apply(entries)
	return nil
}

// normalizedSchema is a skill's input schema as stored and as normalised (nil: outside the subset).
type normalizedSchema struct {
	raw, norm json.RawMessage
}

// normalized is raw normalised (nil when outside the supported subset), from the cache while the
// skill's stored schema is unchanged: a poll normalises only what changed.
func (h *hub) normalized(skill uuid.UUID, raw json.RawMessage) json.RawMessage {
	if c, ok := h.schemas[skill]; ok && bytes.Equal(c.raw, raw) {
		return c.norm
	}
	var norm json.RawMessage
	if s, err := toolschema.Normalize(raw); err == nil {
		norm = s
	}
	h.schemas[skill] = normalizedSchema{raw: raw, norm: norm}
	return norm
}

// apply makes the SDK server list exactly the listed entries, touching only what changed.
func (h *hub) apply(entries map[string]*entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = entries
	var gone []string
	for name := range h.listed {
		if en := entries[name]; en == nil || !en.listed {
			gone = append(gone, name)
			delete(h.listed, name)
		}
	}
	if len(gone) > 0 {
		h.server.RemoveTools(gone...)
	}
	for name, en := range entries {
		if !en.listed {
			continue
		}
		old := h.listed[name]
		h.listed[name] = en
		if old != nil && old.description == en.description && bytes.Equal(old.schema, en.schema) && old.skillID == en.skillID {
			continue
		}
		h.server.AddTool(&mcp.Tool{Name: name, Description: en.description, InputSchema: en.schema}, h.handler(name))
	}
}

// lookup returns the current entry named name (nil for none) and whether it is listed.
func (h *hub) lookup(name string) (*entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	en := h.entries[name]
	return en, en != nil && en.listed && h.listed[name] != nil
}

// unlisted answers a tools/call for a tool that is not (or no longer) listed with a tool error naming
// why, instead of the SDK's "unknown tool" protocol error.
func (h *hub) unlisted(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		en, listed := h.lookup(call.Params.Name)
		if listed {
			return next(ctx, method, req)
		}
		why := fmt.Sprintf("there is no tool %q in this tenant: tools/list names the tools you may call", call.Params.Name)
		if en != nil {
			why = fmt.Sprintf("tool %q is not listed: %s; the server was not asked", call.Params.Name, en.why)
		}
		return toolError(why, map[string]any{"status": "not_listed", "reason": why}), nil
	}
}

// toolError is a failed tool result with text and, if given, structured content.
func toolError(text string, structured any) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if structured != nil {
		r.StructuredContent = structured
	}
	return r
}
