// Package mcpendpoint is mcpfleet as an MCP server: one Streamable HTTP endpoint (/mcp) on the official
// Go SDK's server side where an agent sees the tools of its tenant it may call, and calls them through the
// tool-call gateway, with the gateway's guard rails unchanged (docs/mcp-endpoint.md).
//
// It speaks what the SDK speaks: MCP 2026-07-28 (server/discover, no sessions, subscriptions/listen) on a
// stateless handler, and the earlier revisions (initialize, Mcp-Session-Id) on a stateful one; a request
// is routed by its MCP-Protocol-Version header.
//
// Each tenant has one SDK server holding the tenant's listed tools. A poller per tenant reads the tenant's
// skills at once when told of a committed change (Endpoint.Changed) and otherwise every PollInterval,
// assigns stable names to new ones (names.go), decides which are listed (enabled, server enabled, schema
// in the supported subset, not orphaned, and in Hide mode the server's liveness after a hold, listing.go)
// and applies the difference to the SDK server, which sends one notifications/tools/list_changed to every
// connected session per change.
//
// Every request is checked in this order, each refusal a JSON-RPC error with an HTTP status: Host and
// Origin (DNS rebinding), the bearer key, its role (administrator: remote tools always require one), the
// body size, the key's requests in flight and, for a new session, the key's sessions.
package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// Store is what the endpoint reads and writes.
type Store interface {
	EndpointTools(ctx context.Context, tenantID uuid.UUID, transitionsSince time.Time) ([]persistence.EndpointTool, error)
	AssignToolNames(ctx context.Context, tenantID uuid.UUID, names map[uuid.UUID]string, at time.Time) error
}

// Gateway is the tool-call gateway's public API the endpoint calls through.
type Gateway interface {
	Call(ctx context.Context, req gateway.Request) (persistence.Call, error)
	Get(ctx context.Context, tenantID, callID uuid.UUID) (persistence.Call, error)
	List(ctx context.Context, tenantID uuid.UUID, f persistence.CallFilter) ([]persistence.Call, error)
	Cancel(ctx context.Context, tenantID, callID, by uuid.UUID) (persistence.Call, error)
}

var (
	_ Store   = (*persistence.Store)(nil)
	_ Gateway = (*gateway.Gateway)(nil)
)

// AuthError is why a request's bearer key was not accepted, as the API answers it (status, problem
// slug, detail, and how long to wait for a 429 or 503).
type AuthError struct {
	Status     int
	Slug       string
	Detail     string
	RetryAfter time.Duration
}

// Authenticator resolves a request's bearer key to its principal (the API's key check, with its cache
// and throttling).
type Authenticator func(r *http.Request) (persistence.Principal, *AuthError)

// Config configures the endpoint. Zero values take the defaults.
type Config struct {
	// Unavailable is the listing of tools whose server is down (MCPFLEET_MCP_UNAVAILABLE_TOOLS); default Keep.
	Unavailable Mode
	// ListHold is how long a server must stay down (up) before Hide mode takes its tools off (puts them
	// back on) the list (MCPFLEET_MCP_LIST_HOLD); default MonitorPeriod.
	ListHold time.Duration
	// MonitorPeriod is the health monitor's period, the default hold; default 5 s.
	MonitorPeriod time.Duration
	// FlapWindow and FlapThreshold are the flap detector's (MCPFLEET_FLAP_WINDOW, MCPFLEET_FLAP_THRESHOLD):
	// in Hide mode a server with FlapThreshold status transitions within the last FlapWindow is flapping
	// and its tools stay off the list; defaults config.DefaultFlapWindow and config.DefaultFlapThreshold.
	FlapWindow    time.Duration
	FlapThreshold int
	// RetryAfter is what a call to a tool of an unhealthy server is told to wait; default the gateway's.
	RetryAfter time.Duration
	// PollInterval is how often each tenant's tools are read besides the reads Changed wakes: the bound
	// for changes this node is not told of (another node's, health, the Hide mode hold); default 250 ms.
	PollInterval time.Duration
	// AllowedHosts are the host names (and addresses) a request's Host and Origin may name, besides the
	// loopback names; a port is ignored (MCPFLEET_MCP_ALLOWED_HOSTS).
	AllowedHosts []string
	// MaxBodyBytes bounds a request body; default 1 MiB.
	MaxBodyBytes int64
	// MaxSessionsPerKey bounds the open sessions of one key; default 32.
	MaxSessionsPerKey int
	// MaxStreamsPerKey bounds one key's requests in flight (each an open response stream); default 64.
	MaxStreamsPerKey int
	// SessionIdle closes a session that sent nothing for this long; default 30 min.
	SessionIdle time.Duration
	// WaitPoll is how often a call awaiting approval (or still running) is read again; default 250 ms.
	WaitPoll time.Duration
	// ProgressEvery is how often a waiting call sends a progress notification; default 5 s.
	ProgressEvery time.Duration
}

// withDefaults returns c with every zero field at its default (package config).
func (c Config) withDefaults() Config {
	if c.Unavailable == "" {
		c.Unavailable = Keep
	}
	c.MonitorPeriod = config.Or(c.MonitorPeriod, config.DefaultMonitorInterval)
	c.ListHold = config.Or(c.ListHold, c.MonitorPeriod)
	c.RetryAfter = config.Or(c.RetryAfter, config.DefaultUnavailableRetryWait)
	c.PollInterval = config.Or(c.PollInterval, config.DefaultMCPPollInterval)
	c.SessionIdle = config.Or(c.SessionIdle, config.DefaultMCPSessionIdle)
	c.WaitPoll = config.Or(c.WaitPoll, config.DefaultMCPWaitPoll)
	c.ProgressEvery = config.Or(c.ProgressEvery, config.DefaultMCPProgressEvery)
	c.MaxBodyBytes = config.Or(c.MaxBodyBytes, config.DefaultMCPMaxBodyBytes)
	c.MaxSessionsPerKey = config.Or(c.MaxSessionsPerKey, config.DefaultMCPSessionsPerKey)
	c.MaxStreamsPerKey = config.Or(c.MaxStreamsPerKey, config.DefaultMCPStreamsPerKey)
	return c
}

// Deps are the endpoint's collaborators.
type Deps struct {
	Store        Store
	Gateway      Gateway
	Authenticate Authenticator
	Clock        health.Clock // judges the list hold; default the real clock
	Log          *slog.Logger
	Version      string // the server's version in its self-description
}

// Endpoint is the MCP endpoint. It is an http.Handler, safe for concurrent use.
type Endpoint struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	stateful  *mcp.StreamableHTTPHandler
	stateless *mcp.StreamableHTTPHandler

	mu       sync.Mutex
	closed   bool
	hubs     map[uuid.UUID]*hub
	inflight map[uuid.UUID]int       // requests in flight per key
	sessions map[string]sessionOwner // session id → the key that opened it
	opening  map[uuid.UUID]int       // initialize requests in flight per key (sessions about to open)
	seq      uint64                  // counts recorded sessions (sessionOwner.seq)
	// changes counts the calls of Changed, so a hub whose first read overlapped one reads again.
	changes atomic.Uint64
	stop    chan struct{}
	wg      sync.WaitGroup
}

type sessionOwner struct {
	key    uuid.UUID
	tenant uuid.UUID
	seq    uint64 // when it was recorded, in e.seq
}

// New returns the endpoint. Its pollers start with the first request of each tenant; Close stops them.
func New(cfg Config, deps Deps) *Endpoint {
	if deps.Clock == nil {
		deps.Clock = health.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	e := &Endpoint{cfg: cfg.withDefaults(), deps: deps, log: deps.Log, hubs: map[uuid.UUID]*hub{},
		inflight: map[uuid.UUID]int{}, sessions: map[string]sessionOwner{}, opening: map[uuid.UUID]int{}, stop: make(chan struct{})}
	getServer := func(r *http.Request) *mcp.Server {
		if h := e.hubOf(r.Context()); h != nil {
			return h.server
		}
		return nil
	}
	e.stateful = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		SessionTimeout: e.cfg.SessionIdle, MaxRequestBodyBytes: e.cfg.MaxBodyBytes, Logger: e.log,
	})
	e.stateless = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, PropagateRequestCancellation: true, MaxRequestBodyBytes: e.cfg.MaxBodyBytes, Logger: e.log,
	})
	return e
}

// Config returns the effective configuration.
func (e *Endpoint) Config() Config { return e.cfg }

// Close stops every tenant's poller and closes every session.
func (e *Endpoint) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	close(e.stop)
	hubs := make([]*hub, 0, len(e.hubs))
	for _, h := range e.hubs {
		hubs = append(hubs, h)
	}
	e.mu.Unlock()
	e.wg.Wait()
	for _, h := range hubs {
		var open []*mcp.ServerSession
		for s := range h.server.Sessions() {
			open = append(open, s)
		}
		for _, s := range open {
			_ = s.Close()
		}
	}
}

// The JSON-RPC error codes of the endpoint's refusals (the implementation-defined server range).
const (
	CodeUnauthorized = -32001
	CodeForbidden    = -32003
	CodeTooLarge     = -32004
	CodeTooMany      = -32005
	CodeUnavailable  = -32006
)

// refuse answers a request the endpoint will not serve: a JSON-RPC error (id null) with the HTTP status,
// whose data names the refusal (slug) as the API's problem types do.
func refuse(w http.ResponseWriter, status, code int, slug, msg string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpfleet"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": code, "message": msg, "data": map[string]any{"type": slug, "status": status}},
	})
}

type principalKey struct{}

// ServeHTTP serves /mcp: the checks of the package comment, then the SDK's handler.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !e.hostAllowed(r.Host) {
		refuse(w, http.StatusForbidden, CodeForbidden, "host_refused", fmt.Sprintf("the Host %q is not one this endpoint answers to (MCPFLEET_MCP_ALLOWED_HOSTS)", r.Host), 0)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !e.originAllowed(o) {
		refuse(w, http.StatusForbidden, CodeForbidden, "origin_refused", fmt.Sprintf("requests from the origin %q are refused (DNS rebinding protection; MCPFLEET_MCP_ALLOWED_HOSTS)", o), 0)
		return
	}
	p, aerr := e.deps.Authenticate(r)
	if aerr != nil {
		code := CodeUnauthorized
		switch aerr.Status {
		case http.StatusTooManyRequests:
			code = CodeTooMany
		case http.StatusServiceUnavailable:
			code = CodeUnavailable
		}
		refuse(w, aerr.Status, code, aerr.Slug, aerr.Detail, aerr.RetryAfter)
		return
	}
	if p.Role != persistence.RoleAdmin {
		refuse(w, http.StatusForbidden, CodeForbidden, "forbidden", "this API key's role ("+string(p.Role)+") may not call remote tools: the MCP endpoint needs an administrator's key", 0)
		return
	}
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, e.cfg.MaxBodyBytes+1))
		if err != nil {
			refuse(w, http.StatusBadRequest, jsonrpcInvalidRequest, "invalid_request", "the request body could not be read", 0)
			return
		}
		if int64(len(body)) > e.cfg.MaxBodyBytes {
			refuse(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "body_too_large", fmt.Sprintf("the request body exceeds %d bytes", e.cfg.MaxBodyBytes), 0)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	release, ok := e.acquire(p.KeyID)
	if !ok {
		refuse(w, http.StatusTooManyRequests, CodeTooMany, "mcp_streams_per_key", fmt.Sprintf("this key has %d requests in flight on the MCP endpoint, the most it may", e.cfg.MaxStreamsPerKey), time.Second)
		return
	}
	defer release()
	h, err := e.hub(r.Context(), p.TenantID)
	if err != nil {
		e.log.WarnContext(r.Context(), "mcp endpoint: the tenant's tools could not be read", "tenant_id", p.TenantID, "err", err)
		refuse(w, http.StatusServiceUnavailable, CodeUnavailable, "unavailable", "the tenant's tools could not be read right now", 2*time.Second)
		return
	}
	// Long requests (an approval wait, a standalone stream) outlive the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	ctx := context.WithValue(r.Context(), principalKey{}, p)
	sid := r.Header.Get("Mcp-Session-Id")
	if sid != "" {
		e.mu.Lock()
		owner, known := e.sessions[sid]
		e.mu.Unlock()
		if known && owner.key != p.KeyID {
			refuse(w, http.StatusNotFound, CodeForbidden, "session_not_found", "there is no such session for this key", 0)
			return
		}
	}
	// The SDK binds a session to the key that opened it (TokenInfo.UserID): another key's request for
	// it is refused.
	ti := &auth.TokenInfo{UserID: p.KeyID.String(), Expiration: time.Now().Add(24 * time.Hour)}
	r = r.WithContext(ctx)
	next := auth.RequireBearerToken(func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return ti, nil }, nil)
	if modern(r) {
		next(e.stateless).ServeHTTP(w, r)
		return
	}
	if sid == "" && r.Method == http.MethodPost {
		done, n, ok := e.openSession(h, p.KeyID)
		if !ok {
			refuse(w, http.StatusTooManyRequests, CodeTooMany, "too_many_sessions", fmt.Sprintf("this key has %d open sessions, the most it may: close one (DELETE /mcp) or let it idle out", n), time.Second)
			return
		}
		cw := &sessionCapture{ResponseWriter: w, opened: func(id string) { done(id) }}
		next(e.stateful).ServeHTTP(cw, r)
		cw.capture()
		done("")
		return
	}
	next(e.stateful).ServeHTTP(w, r)
}

const jsonrpcInvalidRequest = -32600

// modern reports whether r speaks MCP 2026-07-28 or later (served without sessions).
func modern(r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	return v != "" && v >= "2026-07-28"
}

// sessionCapture records the session id the SDK assigns before the first byte of the answer leaves
// (so the client cannot open another session before this one counts); it passes Flush and Unwrap on.
type sessionCapture struct {
	http.ResponseWriter
	opened   func(id string)
	captured bool
}

func (c *sessionCapture) capture() {
	if c.captured {
		return
	}
	c.captured = true
	if id := c.Header().Get("Mcp-Session-Id"); id != "" {
		c.opened(id)
	}
}

func (c *sessionCapture) WriteHeader(code int) {
	c.capture()
	c.ResponseWriter.WriteHeader(code)
}

func (c *sessionCapture) Write(b []byte) (int, error) {
	c.capture()
	return c.ResponseWriter.Write(b)
}

func (c *sessionCapture) Flush() {
	c.capture()
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *sessionCapture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// openSession reserves, for an initialize request of key, one of its MaxSessionsPerKey sessions: its
// open sessions and its initialize requests in flight count, so a burst of them cannot pass the limit.
// It returns done, which turns the reservation into the recorded session id (done(id), before the answer
// leaves) or gives it back (done(""), once the request is answered; later calls do nothing), or, when
// the key has no session left, its count and false. Recorded sessions the SDK no longer has are forgotten.
func (e *Endpoint) openSession(h *hub, key uuid.UUID) (done func(id string), n int, ok bool) {
	e.mu.Lock()
	seen := e.seq
	e.mu.Unlock()
	open := map[string]bool{}
	for s := range h.server.Sessions() {
		open[s.ID()] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n = e.opening[key]
	for id, o := range e.sessions {
		switch {
		case o.tenant != h.tenant:
			continue
		case !open[id] && o.seq <= seen: // closed (one recorded after the snapshot may not show in it yet)
			delete(e.sessions, id)
			continue
		}
		if o.key == key {
			n++
		}
	}
	if n >= e.cfg.MaxSessionsPerKey {
		return nil, n, false
	}
	e.opening[key]++
	held := true
	return func(id string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !held {
			return
		}
		held = false
		if e.opening[key]--; e.opening[key] <= 0 {
			delete(e.opening, key)
		}
		if id != "" {
			e.seq++
			e.sessions[id] = sessionOwner{key: key, tenant: h.tenant, seq: e.seq}
		}
	}, n, true
}

// acquire takes one of key's request slots.
func (e *Endpoint) acquire(key uuid.UUID) (func(), bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight[key] >= e.cfg.MaxStreamsPerKey {
		return nil, false
	}
	e.inflight[key]++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.inflight[key]--; e.inflight[key] <= 0 {
			delete(e.inflight, key)
		}
	}, true
}

// hostAllowed reports whether host (a Host header) names this endpoint: a loopback name or address, or
// one of AllowedHosts.
func (e *Endpoint) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.ToLower(strings.Trim(name, "[]"))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.ContainsFunc(e.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(a, name) })
}

// originAllowed reports whether a browser page of origin may call the endpoint: its host must be one the
// endpoint answers to (so a page on another site, or a rebound DNS name, is refused).
func (e *Endpoint) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return e.hostAllowed(u.Host)
}

// hubOf is the hub of the request's principal (set by ServeHTTP).
func (e *Endpoint) hubOf(ctx context.Context) *hub {
	p, ok := ctx.Value(principalKey{}).(persistence.Principal)
	if !ok {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hubs[p.TenantID]
}

// Changed tells the endpoint that tenantID's tools may have changed, in a transaction already committed:
// the tenant's poller reads them at once instead of at its next poll, and the sessions get their
// list_changed as soon as that read is applied. It never blocks and is safe for concurrent use; any number
// of calls before the read starts make one read. A tenant with no hub (no session has connected) has
// nothing to update. Changes Changed is not told of (another node's, health, the Hide mode hold) are
// picked up by the poll, every PollInterval.
func (e *Endpoint) Changed(tenantID uuid.UUID) {
	e.changes.Add(1)
	e.mu.Lock()
	h := e.hubs[tenantID]
	e.mu.Unlock()
	if h == nil {
		return
	}
	select {
	case h.wake <- struct{}{}:
	default: // a read is already pending
	}
}

// hub returns tenantID's hub, creating it (and reading its tools once) on first use.
func (e *Endpoint) hub(ctx context.Context, tenantID uuid.UUID) (*hub, error) {
	e.mu.Lock()
	h := e.hubs[tenantID]
	closed := e.closed
	e.mu.Unlock()
	if h != nil {
		return h, nil
	}
	if closed {
		return nil, errors.New("the endpoint is closed")
	}
	h = newHub(e, tenantID)
	changes := e.changes.Load()
	if err := h.sync(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if got := e.hubs[tenantID]; got != nil {
		return got, nil
	}
	if e.closed {
		return nil, errors.New("the endpoint is closed")
	}
	e.hubs[tenantID] = h
	if e.changes.Load() != changes { // a change (of some tenant) was committed during the first read
		h.wake <- struct{}{}
	}
	e.wg.Add(1)
	go h.run()
	return h, nil
}
