// Package ui is mcpfleet's operator dashboard, served by the service itself under /ui/: Go html/template
// pages and a small embedded script, no build step.
//
// Everything works as plain HTML forms; the script adds what a form cannot do — the live fleet view,
// fed by the event stream GET /v1/mcp/events, and the connection test, whose report is written into
// the server's card without a reload (ADR-154 §5: three of the five things it reports are stored
// nowhere, so a reload would destroy them). Every other action posts and redirects back.
//
// Sign-in takes an operator or admin API key (module keys are refused) and opens a session: an opaque
// random id in an HttpOnly, SameSite=Strict cookie (Secure over TLS), stored server-side as its SHA-256
// with the key it was opened with and an expiry, so sessions survive a restart of the service, end at
// sign-out, and end when their key is revoked. Every state-changing request carries a CSRF token
// derived from the session id (HMAC-SHA256 keyed with it), checked in constant time, and must come from
// this origin when the browser says where it came from. Each page is scoped to the key's tenant by the
// same row-level security as the API.
//
// Text a remote server wrote (its self-description, tool names and descriptions, errors) is only ever
// set as text: html/template escapes it in pages and the script writes it with textContent. The pages
// are served with a Content-Security-Policy that allows no inline script, as a second line.
package ui

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Store is what the dashboard reads and writes in PostgreSQL.
type Store interface {
	CreateSession(ctx context.Context, p persistence.Principal, hash []byte, at, expires time.Time) error
	LookupSession(ctx context.Context, hash []byte, now time.Time) (persistence.Principal, time.Time, error)
	RevokeSession(ctx context.Context, tenantID uuid.UUID, hash []byte, at time.Time) error
	FleetSnapshot(ctx context.Context, tenantID uuid.UUID, f persistence.ServerFilter) (persistence.FleetSnapshot, error)
	GetServer(ctx context.Context, tenantID, serverID uuid.UUID) (persistence.Server, error)
	ListSkills(ctx context.Context, tenantID, serverID uuid.UUID) ([]persistence.Skill, error)
	ServerHistory(ctx context.Context, tenantID, serverID uuid.UUID, limit int, since time.Time) (persistence.ServerHistory, error)
	ServerStatusWindow(ctx context.Context, tenantID, serverID uuid.UUID, from time.Time, limit int) (persistence.StatusWindow, error)
	FleetStatusFlows(ctx context.Context, tenantID uuid.UUID, from time.Time, width time.Duration) ([]persistence.StatusFlow, error)
	LastImportEvent(ctx context.Context, tenantID, serverID uuid.UUID) (persistence.LastImport, bool, error)
	LatestEventCursor(ctx context.Context, tenantID uuid.UUID) (persistence.EventCursor, error)
	// ClusterNodes and ShardOwners are the cluster's live nodes and each shard's owner, for the fleet
	// page's nodes panel and the servers' owner node (shown only when some node is live: cluster mode).
	ClusterNodes(ctx context.Context) ([]persistence.ClusterNode, error)
	ShardOwners(ctx context.Context) ([]persistence.ShardOwner, error)
}

// Remote is what the dashboard needs of the MCP client side.
type Remote interface {
	Describe(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]remote.Description, error)
	TestConnection(ctx context.Context, tenantID, serverID uuid.UUID) (remote.ConnectionReport, error)
	Import(ctx context.Context, tenantID, serverID, by uuid.UUID) (remote.ImportReport, error)
	SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool) (remote.SkillState, error)
	Update(ctx context.Context, tenantID, serverID uuid.UUID, in remote.PatchInput) (remote.Server, error)
}

var (
	_ Store  = (*persistence.Store)(nil)
	_ Remote = (*remote.Service)(nil)
)

// Calls is the tool-call gateway (issue 4) as the dashboard uses it: the calls parked for approval, the
// administrator's verdict on one, and the recent call events. The dashboard shows its approvals and
// call sections only when Deps.Calls is set, and only to administrators: an operator's page says calls
// are for administrators and asks Calls nothing (the API keeps every call endpoint admin only).
//
// service/uicalls.go implements it over the gateway (package gateway).
type Calls interface {
	// AwaitingApproval lists calls of tenantID parked for approval, oldest first: of one server, or of
	// every server when serverID is uuid.Nil.
	AwaitingApproval(ctx context.Context, tenantID, serverID uuid.UUID, limit int) ([]ParkedCall, error)
	// Decide approves (approve true) or denies a parked call on behalf of p, an administrator, and
	// returns the call's state after it (an approved call runs: its state may already be final). It
	// returns persistence.ErrNotFound for a call of another tenant or none, ErrNotParked for one that
	// is no longer awaiting approval (decided, cancelled, or its approval window closed), and
	// ErrSelfApproval when p's key requested the call it would approve (four eyes; it stays parked).
	Decide(ctx context.Context, p persistence.Principal, callID uuid.UUID, approve bool) (string, error)
	// RecentEvents lists the newest call events of tenantID, newest first: of one server, or of every
	// server when serverID is uuid.Nil.
	RecentEvents(ctx context.Context, tenantID, serverID uuid.UUID, limit int) ([]CallEvent, error)
}

// ErrNotParked is a verdict on a call that is no longer awaiting approval.
var ErrNotParked = errors.New("the call is not awaiting approval")

// ErrSelfApproval is an approval by the key that requested the call: another administrator's key
// must approve it.
var ErrSelfApproval = errors.New("a call cannot be approved with the key that requested it")

// ParkedCall is a call awaiting an administrator's approval.
type ParkedCall struct {
	CallID      uuid.UUID
	RunID       string
	ServerID    uuid.UUID
	ModuleName  string
	Tool        string
	Arguments   json.RawMessage // shown as text
	RequestedBy uuid.UUID       // the key that asked for the call: it may deny it, never approve it
	RequestedAt time.Time
	ExpiresAt   *time.Time // when the approval window closes, if it does
	TraceID     string     // the trace of the request that made the call ("" for none)
}

// CallEvent is one event of a run's call stream.
type CallEvent struct {
	EventID      string
	Kind         string // call.requested, call.awaiting_approval, call.started, call.succeeded, ...
	CallID       uuid.UUID
	RunID        string
	ServerID     uuid.UUID
	Tool         string
	State        string
	OutcomeClass string
	LatencyMS    *int64
	// RequestedBy and DecidedBy are the keys of the event's call (nil for a refusal, which made none;
	// DecidedBy nil while nobody decided it).
	RequestedBy, DecidedBy *uuid.UUID
	At                     time.Time
	TraceID                string // the trace of the request that made the event's call ("" for none)
}

// Config configures the dashboard. Zero values take the documented defaults.
type Config struct {
	// SessionTTL is how long a session lasts from sign-in; default 12 h.
	SessionTTL time.Duration
	// SecureCookies marks cookies Secure even on plain HTTP requests (set it behind a proxy that
	// terminates TLS; MCPFLEET_UI_SECURE_COOKIES) and names them with the __Host- prefix (Path=/, no
	// Domain); only the __Host- session cookie is then read. Cookies on a TLS request are always so.
	SecureCookies bool
	// PageSize is the number of servers on an overview page; default 50.
	PageSize int
	// HeartbeatInterval H and the flap settings explain the status on the card.
	HeartbeatInterval time.Duration
	FlapWindow        time.Duration
	FlapThreshold     int
	// TraceURL is the tracing UI's page of a trace, a template holding {trace_id} (ParseTraceURL;
	// MCPFLEET_TRACE_URL): every trace id the dashboard shows links there. Empty: shown as text.
	TraceURL string
}

// Auth is the API's authentication (httpapi.Server), so that a sign-in with a key and every session
// cookie are checked under the same per-address failed-authentication throttle as the API's keys.
type Auth interface {
	// Authenticate resolves r's bearer key as every /v1 endpoint does, or the problem refusing it.
	Authenticate(r *http.Request) (persistence.Principal, *httpapi.Problem)
	// Guard runs lookup of the credential whose hash is hash within r's address's failure budget; it
	// returns lookup's error, or a *httpapi.Problem (429) without running it.
	Guard(r *http.Request, hash []byte, lookup func(context.Context) error) error
}

// Deps are the dashboard's collaborators.
type Deps struct {
	Store  Store
	Auth   Auth // required
	Remote Remote
	Calls  Calls // nil until the call gateway exists
	Log    *slog.Logger
	// Clock is the clock the health model runs on (audit times are on it); default the real clock.
	Clock health.Clock
	// Wall is the wall clock sessions expire on and freshness is measured on (the times it is compared
	// with were stamped on the wall, not on Clock); default the real clock. It is the same abstraction
	// as Clock so tests can move either.
	Wall health.Clock
}

// UI is the dashboard. It is safe for concurrent use.
type UI struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	pages   map[string]*template.Template
	static  fs.FS
	hashes  map[string]string // asset name → short content hash, for cache-busting URLs
	flashes *flashes
	traces  TraceLinks // Config.TraceURL, parsed
}

// New returns the dashboard, or an error if its templates do not parse or cfg.TraceURL is not a trace
// URL template.
func New(cfg Config, deps Deps) (*UI, error) {
	if deps.Store == nil || deps.Remote == nil || deps.Auth == nil {
		return nil, errors.New("ui: a store, the API's authentication and the MCP client side are required")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = config.DefaultHeartbeatInterval
	}
	if cfg.FlapWindow <= 0 {
		cfg.FlapWindow = config.DefaultFlapWindow
	}
	if cfg.FlapThreshold <= 0 {
		cfg.FlapThreshold = config.DefaultFlapThreshold
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = health.RealClock{}
	}
	if deps.Wall == nil {
		deps.Wall = health.RealClock{}
	}
	u := &UI{cfg: cfg, deps: deps, log: deps.Log, hashes: map[string]string{}, flashes: newFlashes(10000, 2*time.Minute)}
	var err error
	if u.traces, err = ParseTraceURL(cfg.TraceURL); err != nil {
		return nil, fmt.Errorf("ui: trace URL %q: %w", cfg.TraceURL, err)
	}
	if u.static, err = fs.Sub(assets, "static"); err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	entries, err := fs.ReadDir(u.static, ".")
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(u.static, e.Name())
		if err != nil {
			return nil, fmt.Errorf("ui: %w", err)
		}
		sum := sha256.Sum256(b)
		u.hashes[e.Name()] = hex.EncodeToString(sum[:6])
	}
	if err := u.parseTemplates(); err != nil {
		return nil, err
	}
	return u, nil
}

func (u *UI) parseTemplates() error {
	funcs := template.FuncMap{
		"asset": func(name string) string { return "/ui/static/" + name + "?v=" + u.hashes[name] },
	}
	u.pages = map[string]*template.Template{}
	for _, page := range []string{"signin", "overview", "card", "error"} {
		t, err := template.New(page).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return fmt.Errorf("ui: parse %s: %w", page, err)
		}
		u.pages[page] = t
	}
	return nil
}

// Mount registers the dashboard's routes under /ui/.
func (u *UI) Mount(r gin.IRouter) {
	g := r.Group("/ui", u.headers())
	r.GET("/ui", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/ui/") })
	g.GET("/", u.index)
	g.POST("/sign-in", u.signIn)
	g.POST("/sign-out", u.withSession(anyRole, u.signOut))
	g.GET("/session", u.sessionState)
	g.GET("/servers/:server_id", u.withSession(anyRole, u.card))
	g.POST("/servers/:server_id/test-connection", u.withSession(adminOnly, u.testConnection))
	g.POST("/servers/:server_id/import", u.withSession(adminOnly, u.importCatalogue))
	g.POST("/servers/:server_id/enable", u.withSession(adminOnly, u.setServerEnabled(true)))
	g.POST("/servers/:server_id/disable", u.withSession(adminOnly, u.setServerEnabled(false)))
	g.POST("/servers/:server_id/settings", u.withSession(adminOnly, u.saveSettings))
	g.POST("/skills/:skill_id/enable", u.withSession(anyRole, u.setSkillEnabled(true)))
	g.POST("/skills/:skill_id/disable", u.withSession(anyRole, u.setSkillEnabled(false)))
	g.POST("/calls/:call_id/approve", u.withSession(adminOnly, u.decide(true)))
	g.POST("/calls/:call_id/deny", u.withSession(adminOnly, u.decide(false)))
	g.GET("/static/*file", u.serveStatic)
}

// headers are the security headers of every dashboard response.
func (u *UI) headers() gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin") // not no-referrer: browsers would then send "Origin: null" on our own POSTs
		c.Next()
	}
}

func (u *UI) serveStatic(c *gin.Context) {
	name := c.Param("file")
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	b, err := fs.ReadFile(u.static, name)
	if err != nil {
		c.Status(http.StatusNotFound)
		return
	}
	ct := "application/octet-stream"
	switch {
	case hasSuffix(name, ".js"):
		ct = "text/javascript; charset=utf-8"
	case hasSuffix(name, ".css"):
		ct = "text/css; charset=utf-8"
	}
	if c.Query("v") == u.hashes[name] {
		c.Header("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		c.Header("Cache-Control", "no-cache")
	}
	c.Data(http.StatusOK, ct, b)
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }
