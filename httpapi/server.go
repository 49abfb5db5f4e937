// Package httpapi is mcpfleet's JSON HTTP API on gin: module registration, heartbeat and
// deregistration, and the read side (servers, skills, audit), plus /healthz and /readyz.
//
// Handlers are methods on Server that return errors; one wrapper maps every error to an RFC 9457
// problem+json answer exactly once, keeping the client's message apart from the logged cause.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Fleet is what the API needs of the actor system.
type Fleet interface {
	Register(ctx context.Context, req actors.RegisterRequest) (actors.RegisterResult, error)
	Heartbeat(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (actors.HeartbeatResult, error)
	Deregister(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (persistence.Server, error)
}

// FleetWrapper is a Fleet that decorates another (the service wraps the fleet to signal the MCP endpoint
// of registrations). Unwrap returns the decorated Fleet, so the optional hooks of the one underneath (the
// chaos hooks) stay reachable through any number of wrappers.
type FleetWrapper interface {
	Fleet
	Unwrap() Fleet
}

// Store is what the API reads from PostgreSQL.
type Store interface {
	keyLookup
	ownerLookup
	GetServer(ctx context.Context, tenantID, serverID uuid.UUID) (persistence.Server, error)
	ListServers(ctx context.Context, tenantID uuid.UUID, f persistence.ServerFilter) ([]persistence.Server, error)
	ListSkills(ctx context.Context, tenantID, serverID uuid.UUID) ([]persistence.Skill, error)
	ListAudit(ctx context.Context, tenantID uuid.UUID, f persistence.AuditFilter) ([]persistence.AuditEvent, error)
	ToolChanges(ctx context.Context, tenantID, skillID uuid.UUID, after int64, limit int) ([]persistence.ToolChange, error)
	ConfigChangeLog(ctx context.Context, tenantID, serverID uuid.UUID, after int64, limit int) ([]persistence.ConfigChangeRecord, error)
	Ping(ctx context.Context) error
}

var (
	_ Fleet = (*actors.Fleet)(nil)
	_ Store = (*persistence.Store)(nil)
)

// Config configures the API.
type Config struct {
	HeartbeatInterval time.Duration // told to modules at registration
	Events            EventStreamConfig
	Auth              AuthConfig // key cache and failed-authentication throttle
	// ListAdvertisementLimit is the largest page of GET /v1/mcp/servers that may include capability
	// advertisements (?include=capability_advertisement); default config.DefaultListAdvertisementLimit.
	ListAdvertisementLimit int
	// ListPageBytes bounds the capability advertisements of one such page, in stored bytes: the page
	// ends early, with a next_cursor, before the server that would cross it (the first server of a
	// page is always in it); default config.DefaultListPageBytes.
	ListPageBytes int
	// MaxToolsPerServer caps the tools one registration may advertise (config.DefaultMaxToolsPerServer when
	// zero); MaxAdvertisementBytes the size of its capability_advertisement (config.DefaultMaxAdvertisementBytes
	// when zero). Past either the registration is refused whole, never trimmed.
	MaxToolsPerServer     int
	MaxAdvertisementBytes int
}

// Deps are the API's collaborators.
type Deps struct {
	Fleet          Fleet
	Store          Store
	Log            *slog.Logger
	TracerProvider trace.TracerProvider          // optional
	Propagator     propagation.TextMapPropagator // optional
	Metrics        *telemetry.Metrics            // optional: request and heartbeat metrics
	MetricsHandler http.Handler                  // optional: served at GET /metrics (Prometheus)
	// Ready reports whether the service is ready; until it is, /v1 answers 503 and /readyz fails.
	Ready func() bool
	// Remote is the MCP client side (configured servers, connection tests, imports, skill switches).
	Remote Remote
	// Events feeds GET /v1/mcp/events; UI is the dashboard under /ui/ (both optional).
	Events EventStore
	UI     UI
	// Gateway is the tool-call gateway (/v1/mcp/calls, /v1/mcp/runs, /v1/mcp/settings); optional.
	Gateway Gateway
	// MCP is the MCP endpoint for agents, served at /mcp (mcp.go); optional.
	MCP http.Handler
	// Cluster, in cluster mode, reports what this node sees of the cluster for /readyz (nil: single node).
	Cluster func() ClusterStatus
}

// ClusterStatus is the cluster part of /readyz: this node, the members it sees and what it owns.
type ClusterStatus struct {
	Node    string   `json:"node"`
	Members []string `json:"members"`
	Shards  []int    `json:"shards"` // the shards this node owns

	ServersOwned int `json:"servers_owned"`
	// Rejoins counts the times the node joined again after its membership key vanished from etcd.
	Rejoins int `json:"rejoins"`
	// Ready is false while the node is not a member owning its share (joining, rejoining after its
	// etcd lease expired, leaving): /readyz then answers 503 so a balancer sends traffic elsewhere.
	Ready bool `json:"ready"`
}

// Server is the HTTP API.
type Server struct {
	cfg   Config
	fleet Fleet
	store Store
	log   *slog.Logger
	auth  *authenticator
	deps  Deps
	// streams are the open event streams (events.go).
	streams *streams
	// owners caches who owns each server, for module keys' heartbeats (ownership.go).
	owners *owners
	limits registrationLimits
	// refusals logs the 5xx answers that carry a Retry-After (fail).
	refusals *telemetry.BurstLog
}

// maxCachedOwners bounds the owner cache: a little more than the 250,000 servers of the largest tenant
// this service is sized for.
const maxCachedOwners = 300_000

// New returns the API.
func New(cfg Config, deps Deps) *Server {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Ready == nil {
		deps.Ready = func() bool { return true }
	}
	lim := registrationLimits{maxTools: config.Or(cfg.MaxToolsPerServer, config.DefaultMaxToolsPerServer),
		maxAdvertisementBytes: config.Or(cfg.MaxAdvertisementBytes, config.DefaultMaxAdvertisementBytes)}
	return &Server{cfg: cfg, fleet: deps.Fleet, store: deps.Store, log: deps.Log, auth: newAuthenticator(deps.Store, cfg.Auth), deps: deps,
		streams: newStreams(), owners: newOwners(deps.Store, maxCachedOwners), limits: lim,
		refusals: telemetry.NewBurstLog(deps.Log, time.Now, telemetry.BurstLogInterval)}
}

// newEngine is the gin engine Handler routes, before its middleware and routes. Its client-address
// settings (trusted proxies, platform, forwarding headers) are gin.New()'s, which spanClientAddress
// relies on; the tests build their engines here too.
func newEngine() *gin.Engine {
	r := gin.New()
	r.ContextWithFallback = true
	r.HandleMethodNotAllowed = true
	return r
}

// Handler returns the routed gin engine. It leaves gin's process-wide mode alone: that is main's to set.
func (s *Server) Handler() http.Handler {
	r := newEngine()
	r.Use(s.observe(), s.recoverer())
	names := &spanNames{}
	if s.deps.TracerProvider != nil {
		r.Use(tracing(s.deps.TracerProvider, s.deps.Propagator, names))
		r.Use(s.traceparentOut())
	}
	r.NoRoute(func(c *gin.Context) {
		writeProblem(c.Writer, problem(http.StatusNotFound, "no_route", "there is no such endpoint: the API is described at /openapi.json"))
	})
	r.NoMethod(func(c *gin.Context) {
		writeProblem(c.Writer, problem(http.StatusMethodNotAllowed, "method_not_allowed", "this endpoint does not take "+c.Request.Method))
	})
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)
	r.GET("/openapi.json", openAPI)
	if s.deps.MetricsHandler != nil {
		r.GET("/metrics", gin.WrapH(s.deps.MetricsHandler))
	}

	all := []persistence.Role{persistence.RoleModule, persistence.RoleOperator, persistence.RoleAdmin}
	readers := all
	ops := []persistence.Role{persistence.RoleOperator, persistence.RoleAdmin}
	modules := []persistence.Role{persistence.RoleModule, persistence.RoleAdmin}

	v1 := r.Group("/v1", s.requireReady())
	v1.POST("/mcp/servers/register", s.handle(modules, s.register))
	v1.POST("/mcp/servers/heartbeat", s.handle(modules, s.heartbeat))
	v1.POST("/mcp/servers/deregister", s.handle(modules, s.deregister))
	v1.GET("/mcp/servers", s.handle(readers, s.listServers))
	v1.GET("/mcp/servers/:server_id", s.handle(readers, s.getServer))
	v1.GET("/mcp/servers/:server_id/skills", s.handle(readers, s.listSkills))
	v1.GET("/mcp/audit", s.handle(ops, s.listAudit))
	s.configRoutes(v1)
	s.eventRoutes(v1)
	s.callRoutes(v1)
	s.mcpRoutes(r)
	if s.deps.UI != nil {
		s.deps.UI.Mount(r)
	}
	s.registerChaos(r) // POST /chaos/crash, only in binaries built with -tags chaos
	names.add(r.Routes())
	return r
}

// handle authenticates, checks the role, runs h and maps its error to a problem.
// handle authenticates the request and, if its key's role is one of roles, runs h with the key's
// principal; a failure from either is answered as problem+json.
func (s *Server) handle(roles []persistence.Role, h func(*gin.Context, persistence.Principal) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := s.auth.authenticate(c.Request)
		if err == nil && !allowed(p.Role, roles) {
			err = problem(http.StatusForbidden, "forbidden", "this API key's role ("+string(p.Role)+") may not do this")
		}
		if err == nil {
			err = h(c, p) // passed, not c.Set: the context's map would be one more allocation per request
		}
		if err != nil {
			s.fail(c, err)
		}
	}
}

// fail answers err as its problem. A 5xx is logged: one that carries a Retry-After is a refusal the
// service chose — a saturated node shedding registrations, a write it could not make durable in time
// — which comes in bursts (every request of a fleet re-registering at once), so it is logged at WARN
// once per interval per problem type, with how many of that type were not logged since (BurstLog);
// any other 5xx is a failure, one ERROR line each.
func (s *Server) fail(c *gin.Context, err error) {
	p := asProblem(err)
	ctx := c.Request.Context()
	p.TraceID = telemetry.TraceID(ctx)
	switch {
	case p.Status >= 500 && p.RetryAfter > 0:
		s.refusals.Warn(ctx, p.Type, "request refused", "method", c.Request.Method, "route", c.FullPath(), "status", p.Status, "type", p.Type, "err", p.Err)
	case p.Status >= 500:
		s.log.ErrorContext(ctx, "request failed", "method", c.Request.Method, "route", c.FullPath(), "status", p.Status, "err", p.Err)
	}
	writeProblem(c.Writer, p)
}

func (s *Server) recoverer() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if rec := recover(); rec != nil {
				s.log.ErrorContext(c.Request.Context(), "handler panicked", "panic", rec, "route", c.FullPath())
				if !c.Writer.Written() {
					writeProblem(c.Writer, internalError(nil))
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}

// traceparentOut writes the request's trace context into the response headers.
func (s *Server) traceparentOut() gin.HandlerFunc {
	return func(c *gin.Context) {
		s.deps.Propagator.Inject(c.Request.Context(), canonicalCarrier(c.Writer.Header()))
		c.Next()
	}
}

func (s *Server) requireReady() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.deps.Ready() {
			writeProblem(c.Writer, unavailable("the service is starting: retry shortly", 2*time.Second, nil))
			c.Abort()
			return
		}
		c.Next()
	}
}

func (s *Server) readyz(c *gin.Context) {
	if !s.deps.Ready() {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "starting"})
		return
	}
	body := gin.H{"status": "ready", "database": "ok"}
	if s.deps.Cluster != nil {
		cs := s.deps.Cluster()
		body["cluster"] = cs
		if !cs.Ready {
			body["status"] = "not_a_member"
			c.JSON(http.StatusServiceUnavailable, body)
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		// Still ready: heartbeats are accepted and the health state machine runs in memory while the
		// database is away; taking the instance out of rotation would turn an outage into false alarms.
		body["status"], body["database"] = "degraded", "unreachable"
	}
	c.JSON(http.StatusOK, body)
}
