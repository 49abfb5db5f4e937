package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// GET /v1/mcp/events is the fleet's event stream (server-sent events), for any role, with a bearer key
// or a dashboard session: one event per registration, transition, deregistration and catalogue import
// of the caller's tenant, one per recorded tool change (mcp.tool.changed: a definition changed or an
// endpoint moved, which disables the tool until an operator enables it again), and one per recorded
// configuration change and per decision of a pending one (mcp.server.configured), each
//
//	id: t<audit seq>-<import seq>-<tool change seq>[-<configuration change seq>]
//	data: {"kind", "server_id", "module_name", "from", "status", "at", "trace_id"[, "skill_id", "tool", "cause"]
//	       [, "change_id", "changes", "by"]}
//
// A module key's stream leaves out mcp.tool.changed and mcp.server.configured: what they say (which key
// changed what, where a server moved) is the operators' and administrators' to read, as
// GET /v1/mcp/skills/{id}/changes and GET /v1/mcp/servers/{id}/config-changes are.
// The events are read from the tenant's audit log, import log and tool changes (durable and
// append-only), by the tenant's own sequence numbers, which have no gaps and follow commit order: a stream sends each event
// at the first poll after its commit, whatever other tenants do, and never waits for a number. A
// client that reconnects with Last-Event-ID (or ?last_event_id=, for a client that cannot set the
// header) gets every event after the one it saw, exactly once, up to MaxReplay of them; a client that
// was away longer, or sends an id of another database or of the numbering before tenant sequences, is
// sent "event: reset" and continues from the newest. Without an id the stream starts at the newest
// event. A comment line is sent every KeepAlive so proxies keep the connection open.
//
// With ?watch=<server_id>,… (at most MaxWatch ids of the caller's tenant; another tenant's are never
// sent) the stream also sends `event: heartbeat` frames without an id, data {"server_id",
// "last_heartbeat_at"}, whenever a watched server's committed last heartbeat moves: the dashboard's
// overview keeps its "last heartbeat" column live with them.
//
// Each stream is one goroutine and one database poll per PollInterval, with a write deadline on every
// write. At most MaxStreamsPerKey are open at once for one key (a dashboard session counts against the
// key that signed in) and MaxStreamsPerTenant for one tenant, both refused with 429 and Retry-After (the
// caller's own streams are the ones to close: too_many_streams_per_key, too_many_streams_per_tenant),
// and MaxStreams in all, refused with 503 and Retry-After (the service is full: too_many_streams); with
// the per-tenant limit below the total (the defaults), one tenant cannot take every stream. A stream
// ends when the client goes away, when its key or session stops being valid (checked every Recheck),
// and when the service shuts down (CloseStreams, and the readiness flag as a backstop).

// EventStreamConfig tunes GET /v1/mcp/events; zero values take the defaults.
type EventStreamConfig struct {
	PollInterval        time.Duration // how often a stream looks for new events; default 1 s
	KeepAlive           time.Duration // comment line interval; default 15 s
	MaxStreams          int           // streams open at once, all tenants together; default 256
	MaxStreamsPerTenant int           // streams one tenant may have open at once; default 32
	MaxStreamsPerKey    int           // streams one key (with its dashboard sessions) may have open at once; default 8
	MaxReplay           int           // events a reconnecting client may be sent; default 10,000
	Recheck             time.Duration // how often the key or session is checked again; default 1 min
	WriteWait           time.Duration // deadline of each write; default 10 s
}

// withDefaults returns c with every zero field at its default (package config).
func (c EventStreamConfig) withDefaults() EventStreamConfig {
	c.PollInterval = config.Or(c.PollInterval, config.DefaultEventPollInterval)
	c.KeepAlive = config.Or(c.KeepAlive, config.DefaultEventKeepAlive)
	c.Recheck = config.Or(c.Recheck, config.DefaultEventRecheck)
	c.WriteWait = config.Or(c.WriteWait, config.DefaultEventWriteWait)
	c.MaxStreams = config.Or(c.MaxStreams, config.DefaultEventStreams)
	c.MaxStreamsPerTenant = config.Or(c.MaxStreamsPerTenant, config.DefaultEventStreamsPerTenant)
	c.MaxStreamsPerKey = config.Or(c.MaxStreamsPerKey, config.DefaultEventStreamsPerKey)
	c.MaxReplay = config.Or(c.MaxReplay, config.DefaultEventMaxReplay)
	return c
}

// EventStore is what the event stream reads.
type EventStore interface {
	FleetEvents(ctx context.Context, tenantID uuid.UUID, c persistence.EventCursor, limit int) ([]persistence.FleetEvent, error)
	LatestEventCursor(ctx context.Context, tenantID uuid.UUID) (persistence.EventCursor, error)
	// LastHeartbeats returns the committed last_heartbeat_at of those of ids that are tenantID's.
	LastHeartbeats(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]time.Time, error)
}

// MaxWatch is the most servers one event stream may watch the heartbeats of (?watch=): a page of the
// dashboard's overview, with room.
const MaxWatch = 200

// HeartbeatEventJSON is the data of an `event: heartbeat` frame: a watched server's last heartbeat
// moved. It carries no id: heartbeats are not events of the log, and a resumed stream sends the
// current ones again.
type HeartbeatEventJSON struct {
	ServerID        uuid.UUID `json:"server_id"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// parseWatch reads ?watch=: comma-separated server ids, at most MaxWatch.
func parseWatch(v string) ([]uuid.UUID, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > MaxWatch {
		return nil, badRequest("invalid_field", "watch", fmt.Sprintf("watch takes at most %d server ids", MaxWatch))
	}
	seen := map[uuid.UUID]bool{}
	var out []uuid.UUID
	for _, p := range parts {
		id, err := uuid.Parse(p)
		if err != nil || len(p) != 36 {
			return nil, badRequest("invalid_field", "watch", "watch is a comma-separated list of server ids (UUIDs)")
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

var _ EventStore = (*persistence.Store)(nil)

// UI is the operator dashboard: it mounts its pages under /ui/ and vouches for its sessions, so that a
// signed-in browser can open the event stream without a bearer key.
type UI interface {
	Mount(r gin.IRouter)
	// SessionPrincipal returns the principal of r's dashboard session; ok is false when r carries none
	// or one that is not valid, and err is set when it cannot be checked right now.
	SessionPrincipal(r *http.Request) (p persistence.Principal, ok bool, err error)
}

// EventJSON is one event of the stream.
type EventJSON struct {
	Kind       string    `json:"kind"`
	ServerID   uuid.UUID `json:"server_id"`
	ModuleName string    `json:"module_name"`
	// From is the status before (a health status, or for an import the previous import status); null
	// for a first registration.
	From    *string   `json:"from"`
	Status  string    `json:"status"`
	At      time.Time `json:"at"`
	TraceID *string   `json:"trace_id"`
	// A tool change (kind mcp.tool.changed; from and status are then "enabled"/"disabled", the tool's
	// state before and after) names the skill, the tool and the cause: definition or endpoint. Absent
	// for every other kind.
	SkillID *uuid.UUID `json:"skill_id,omitempty"`
	Tool    *string    `json:"tool,omitempty"`
	Cause   *string    `json:"cause,omitempty"`
	// A configuration change (kind mcp.server.configured; from is null and status applied or pending for
	// its request, from pending and status confirmed or cancelled for its decision) names the change, its
	// fields old → new (never a credential's value) and who: the requesting key for a request, the deciding
	// one for a decision (a key id, or "cli"). Absent for every other kind.
	ChangeID *uuid.UUID                 `json:"change_id,omitempty"`
	Changes  []persistence.ConfigChange `json:"changes,omitempty"`
	By       *string                    `json:"by,omitempty"`
}

// streams counts and stops the open event streams: in all, by tenant and by key.
type streams struct {
	mu       sync.Mutex
	open     int
	byTenant map[uuid.UUID]int
	byKey    map[uuid.UUID]int
	closed   bool
	done     chan struct{}
}

func newStreams() *streams {
	return &streams{byTenant: map[uuid.UUID]int{}, byKey: map[uuid.UUID]int{}, done: make(chan struct{})}
}

// streamRetry is the Retry-After of a refused stream.
const streamRetry = 5 * time.Second

// acquire counts a new stream of p, or returns the problem that refuses it: the key's limit first,
// then the tenant's (both the caller's own doing: 429), then the total (the service is full: 503). A
// refused stream counts nowhere.
func (st *streams) acquire(p persistence.Principal, cfg EventStreamConfig) *Problem {
	st.mu.Lock()
	defer st.mu.Unlock()
	var refused *Problem
	switch {
	case st.closed:
		refused = unavailable("the service is shutting down", streamRetry, nil)
	case st.byKey[p.KeyID] >= cfg.MaxStreamsPerKey:
		refused = problem(http.StatusTooManyRequests, "too_many_streams_per_key",
			fmt.Sprintf("this key already has %d event streams open, its limit: close one", cfg.MaxStreamsPerKey))
	case st.byTenant[p.TenantID] >= cfg.MaxStreamsPerTenant:
		refused = problem(http.StatusTooManyRequests, "too_many_streams_per_tenant",
			fmt.Sprintf("this tenant already has %d event streams open, its limit: close one", cfg.MaxStreamsPerTenant))
	case st.open >= cfg.MaxStreams:
		refused = problem(http.StatusServiceUnavailable, "too_many_streams", "too many event streams are open: retry later")
	default:
		st.open++
		st.byTenant[p.TenantID]++
		st.byKey[p.KeyID]++
		return nil
	}
	refused.RetryAfter = streamRetry
	return refused
}

// release uncounts a stream acquire counted.
func (st *streams) release(p persistence.Principal) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.open--
	uncount(st.byTenant, p.TenantID)
	uncount(st.byKey, p.KeyID)
}

func uncount(m map[uuid.UUID]int, id uuid.UUID) {
	if m[id]--; m[id] <= 0 {
		delete(m, id) // the maps hold only what is open
	}
}

// CloseStreams ends every open event stream and refuses new ones. Register it with
// http.Server.RegisterOnShutdown: Shutdown waits for handlers, and a stream's handler would not return
// by itself.
func (s *Server) CloseStreams() {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	if !s.streams.closed {
		s.streams.closed = true
		close(s.streams.done)
	}
}

func (s *Server) eventRoutes(v1 *gin.RouterGroup) {
	v1.GET("/mcp/events", s.events)
}

// streamPrincipal authenticates an event stream: the bearer key if one is sent, else the dashboard
// session.
func (s *Server) streamPrincipal(r *http.Request) (persistence.Principal, error) {
	if r.Header.Get("Authorization") != "" || s.deps.UI == nil {
		return s.auth.authenticate(r)
	}
	p, ok, err := s.deps.UI.SessionPrincipal(r)
	var throttled *Problem
	switch {
	case errors.As(err, &throttled):
		return p, throttled // the session check of a throttled address (Guard)
	case err != nil:
		return p, unavailable("the session could not be checked right now", 2*time.Second, err)
	case !ok:
		return p, unauthorized("send an API key as Authorization: Bearer <api_key>, or sign in to the dashboard at /ui/")
	}
	return p, nil
}

func (s *Server) events(c *gin.Context) {
	cfg := s.cfg.Events.withDefaults()
	r := c.Request
	p, err := s.streamPrincipal(r)
	if err != nil {
		s.fail(c, err)
		return
	}
	if s.deps.Events == nil {
		s.fail(c, problem(http.StatusNotFound, "no_route", "this service has no event stream"))
		return
	}
	id := r.Header.Get("Last-Event-ID")
	if id == "" {
		id = c.Query("last_event_id")
	}
	var resume *persistence.EventCursor
	old := false // an id of the numbering before tenant sequences: reset
	if id != "" {
		cur, err := persistence.ParseEventCursor(id)
		switch {
		case errors.Is(err, persistence.ErrOldEventCursor):
			old = true
		case err != nil:
			s.fail(c, badRequest("invalid_field", "Last-Event-ID", "the event id is not one this stream sent (want t<audit seq>-<import seq>-<tool change seq>)"))
			return
		default:
			resume = &cur
		}
	}
	watch, err := parseWatch(c.Query("watch"))
	if err != nil {
		s.fail(c, err)
		return
	}
	if refused := s.streams.acquire(p, cfg); refused != nil {
		s.fail(c, refused)
		return
	}
	defer s.streams.release(p)

	ctx := r.Context()
	latest, err := s.deps.Events.LatestEventCursor(ctx, p.TenantID)
	if err != nil {
		s.fail(c, storeError(err))
		return
	}
	st := &eventStream{s: s, cfg: cfg, tenant: p.TenantID, module: p.Role == persistence.RoleModule, w: c.Writer, rc: http.NewResponseController(c.Writer),
		watch: watch, beats: map[uuid.UUID]time.Time{}}
	// The server's read and write timeouts were set for a request that ends: clear the read deadline (a
	// stream has nothing more to read, only a disconnect to notice) and give each write its own.
	_ = st.rc.SetReadDeadline(time.Time{})
	st.cur = latest
	reset := old
	if resume != nil {
		// A cursor ahead of the log is from another database; one too far behind would replay too much.
		reset = resume.Audit > latest.Audit || resume.Import > latest.Import || resume.Tool > latest.Tool ||
			resume.Config > latest.Config ||
			latest.Audit-resume.Audit > int64(cfg.MaxReplay) || latest.Import-resume.Import > int64(cfg.MaxReplay) ||
			latest.Tool-resume.Tool > int64(cfg.MaxReplay) || latest.Config-resume.Config > int64(cfg.MaxReplay)
		if !reset {
			st.cur = *resume
		}
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	c.Status(http.StatusOK)
	if err := st.write("retry: 2000\n: mcpfleet fleet events\n\n"); err != nil {
		return
	}
	if reset {
		if err := st.write(fmt.Sprintf("event: reset\nid: %s\ndata: {\"reason\":\"the stream cannot resume from the given event id: reload what you show\"}\n\n", st.cur)); err != nil {
			return
		}
	}
	st.run(ctx, func() error {
		_, err := s.streamPrincipal(r)
		return err
	})
}

// eventStream is one open stream.
type eventStream struct {
	s      *Server
	cfg    EventStreamConfig
	tenant uuid.UUID
	// module is a module key's stream: tool and configuration changes are not sent on it (their positions
	// still advance the cursor).
	module bool
	w      http.ResponseWriter
	rc     *http.ResponseController
	cur    persistence.EventCursor // the position after the last event sent
	// watch are the servers whose heartbeats the stream sends (?watch=), beats the last sent of each.
	watch []uuid.UUID
	beats map[uuid.UUID]time.Time
}

func (st *eventStream) write(s string) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.cfg.WriteWait))
	if _, err := st.w.Write([]byte(s)); err != nil {
		return err
	}
	return st.rc.Flush()
}

// run polls and writes until the client leaves, the service shuts down, a write fails or recheck says
// the caller is no longer allowed.
func (st *eventStream) run(ctx context.Context, recheck func() error) {
	poll := time.NewTicker(st.cfg.PollInterval)
	defer poll.Stop()
	keep := time.NewTicker(st.cfg.KeepAlive)
	defer keep.Stop()
	auth := time.NewTicker(st.cfg.Recheck)
	defer auth.Stop()
	log := st.s.log
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.s.streams.done:
			return
		case <-keep.C:
			if st.write(": keep-alive\n\n") != nil {
				return
			}
		case <-auth.C:
			var pr *Problem
			if err := recheck(); errors.As(err, &pr) && pr.Status == http.StatusUnauthorized {
				return
			}
		case <-poll.C:
			if !st.s.deps.Ready() {
				return // shutting down
			}
			if err := st.poll(ctx); err != nil {
				if ctx.Err() != nil || errors.Is(err, errWrite) {
					return
				}
				log.WarnContext(ctx, "event stream: poll failed; retrying", "tenant_id", st.tenant, "err", err)
			}
			if err := st.pollHeartbeats(ctx); err != nil {
				if ctx.Err() != nil || errors.Is(err, errWrite) {
					return
				}
				log.WarnContext(ctx, "event stream: heartbeat poll failed; retrying", "tenant_id", st.tenant, "err", err)
			}
		}
	}
}

var errWrite = errors.New("write to the event stream failed")

const eventBatch = 500

// poll writes the events after the cursor, batch after batch while batches come back full. Both
// sequences are gapless and in commit order, so every event returned is sent, now: none can commit
// later with a number below it.
func (st *eventStream) poll(ctx context.Context) error {
	for {
		evs, err := st.s.deps.Events.FleetEvents(ctx, st.tenant, st.cur, eventBatch)
		if err != nil {
			return err
		}
		var audit, imports, changes, configs int
		for _, e := range evs {
			// The id written with each event is the position after it, so a client resuming from any
			// id it saw gets exactly what follows.
			switch {
			case e.Import:
				st.cur.Import = e.Seq
				imports++
			case e.ToolChange:
				st.cur.Tool = e.Seq
				changes++
			case e.Config:
				st.cur.Config = e.Seq
				configs++
			default:
				st.cur.Audit = e.Seq
				audit++
			}
			if st.module && (e.ToolChange || e.Config) {
				continue
			}
			if err := st.write(eventFrame(st.cur, e)); err != nil {
				return fmt.Errorf("%w: %v", errWrite, err)
			}
		}
		if audit < eventBatch && imports < eventBatch && changes < eventBatch && configs < eventBatch {
			return nil
		}
	}
}

// pollHeartbeats sends an `event: heartbeat` frame for each watched server whose committed last
// heartbeat differs from the one last sent (every watched server of the tenant on the first poll). One
// query per poll, for at most MaxWatch servers; heartbeat stamps are committed within the stamp flush
// interval, so a frame is at most that plus a poll interval behind the heartbeat.
func (st *eventStream) pollHeartbeats(ctx context.Context) error {
	if len(st.watch) == 0 {
		return nil
	}
	beats, err := st.s.deps.Events.LastHeartbeats(ctx, st.tenant, st.watch)
	if err != nil {
		return err
	}
	for _, id := range st.watch {
		at, ok := beats[id]
		if !ok || at.Equal(st.beats[id]) {
			continue
		}
		b, _ := json.Marshal(HeartbeatEventJSON{ServerID: id, LastHeartbeatAt: at.UTC()}) // cannot fail
		if err := st.write("event: heartbeat\ndata: " + string(b) + "\n\n"); err != nil {
			return fmt.Errorf("%w: %v", errWrite, err)
		}
		st.beats[id] = at
	}
	return nil
}

func eventFrame(cur persistence.EventCursor, e persistence.FleetEvent) string {
	out := EventJSON{Kind: e.Kind, ServerID: e.ServerID, ModuleName: e.ModuleName, Status: e.Status, At: e.At.UTC()}
	if e.ToolChange {
		skill, tool, cause := e.SkillID, e.Tool, e.Cause
		out.SkillID, out.Tool, out.Cause = &skill, &tool, &cause
	}
	if e.Config {
		id := e.ChangeID
		out.ChangeID, out.Changes, out.By = &id, e.Changes, actorJSON(e.By)
		if out.Changes == nil {
			out.Changes = []persistence.ConfigChange{}
		}
	}
	if e.From != "" {
		from := e.From
		out.From = &from
	}
	if e.TraceID != "" {
		tr := e.TraceID
		out.TraceID = &tr
	}
	b, _ := json.Marshal(out) // cannot fail: strings, a UUID and a time
	return "id: " + cur.String() + "\ndata: " + string(b) + "\n\n"
}
