// Package gateway is the tool-call gateway: an administrator calls a remote MCP server's tool through the
// service, within guard rails (seed "MCP servers": Guard rails, What a remote answer can contain).
//
// A call is accepted only if its skill exists, is enabled and available, its server is enabled and
// declares a data class, the server can be reached from this side (endpoint, credential) and the
// arguments hold no NUL character and validate against the skill's normalised input schema; and only while its run has calls left
// in its budget (default 20 per run, per tenant configurable), counted in the transaction that accepts the
// call. Anything else is a *Refusal, recorded in the run's events as call.refused; the server is not asked.
//
// A server that requires approval (the default, and nothing the server declares can waive it) has its
// calls parked as awaiting_approval until an administrator approves or denies them; a denial and an
// approval window that closes are failed tool results. Four eyes: the key that approves a call is never
// the key that requested it (a dashboard session is the key it was signed in with); the requester may
// deny or cancel its own call. An accepted call runs in a goroutine of the
// gateway, never in an actor's mailbox, once a slot of its server is free (a per-server bound on calls in
// flight), under one deadline; the answer is shaped (text only, notes first, bounded) and every failure —
// the tool's isError or the call's own — is a failed tool result naming the server: the call's state is
// failed, never an error of the run.
//
// Calls are non-idempotent writes: the gateway sends a call at most once and never retries it. A call
// found running when the gateway starts (the process stopped mid-call) is marked failed with outcome
// interrupted and never re-sent; a client that retries with the same Idempotency-Key gets the call it
// already made. Cancelling a call cancels its context: the MCP client tells the server with
// notifications/cancelled and the call ends as cancelled.
//
// One gateway owns the calls of its database: the start-up sweep assumes no other process is making
// calls on it.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// Store is the persistence the gateway needs.
type Store interface {
	CallTargetBySkill(ctx context.Context, tenantID, skillID uuid.UUID) (persistence.CallTarget, error)
	CallTargetByName(ctx context.Context, tenantID, serverID uuid.UUID, tool string) (persistence.CallTarget, error)
	CreateCall(ctx context.Context, c persistence.Call, defaultBudget int) (persistence.Call, bool, error)
	TransitionCall(ctx context.Context, tenantID uuid.UUID, t persistence.CallTransition) (persistence.Call, error)
	StartCall(ctx context.Context, tenantID, callID uuid.UUID, at time.Time) (bool, error)
	GetCall(ctx context.Context, tenantID, callID uuid.UUID) (persistence.Call, error)
	CallByKey(ctx context.Context, tenantID uuid.UUID, runID, key string) (persistence.Call, error)
	ListCalls(ctx context.Context, tenantID uuid.UUID, f persistence.CallFilter) ([]persistence.Call, error)
	ExpireApprovals(ctx context.Context, tenantID uuid.UUID, now time.Time, res func(persistence.Call) (string, persistence.CallResult)) ([]persistence.Call, error)
	InterruptRunning(ctx context.Context, tenantID uuid.UUID, now time.Time, res func(persistence.Call) (string, persistence.CallResult)) (int, error)
	AddRunEvent(ctx context.Context, e persistence.RunEvent) (persistence.RunEvent, error)
	RunEvents(ctx context.Context, tenantID uuid.UUID, runID string, after int64, limit int) ([]persistence.RunEvent, error)
	RunBudgetUsed(ctx context.Context, tenantID uuid.UUID, runID string) (int, error)
	GetTenantSettings(ctx context.Context, tenantID uuid.UUID) (persistence.TenantSettings, error)
	SetMaxCallsPerRun(ctx context.Context, tenantID uuid.UUID, n *int, at time.Time) (persistence.TenantSettings, error)
	TenantIDs(ctx context.Context) ([]uuid.UUID, error)
}

// Caller makes the remote call: the MCP client side, which builds each call's client with the contact
// recorder every operation uses (last contact, latency, liveness evidence).
type Caller interface {
	CheckCall(cfg persistence.ServerConfig) error
	CallTool(ctx context.Context, srv persistence.Server, cfg persistence.ServerConfig, tool string, args map[string]any) (mcpclient.ToolResult, error)
}

var (
	_ Store  = (*persistence.Store)(nil)
	_ Caller = (*remote.Service)(nil)
)

// MaxCallsPerRunLimit is the largest budget a tenant may set.
const MaxCallsPerRunLimit = 1000

// Config configures the gateway. Zero values take the defaults.
type Config struct {
	// MaxCallsPerRun is the budget of a run of a tenant that set none (MCPFLEET_MAX_CALLS_PER_RUN);
	// default 20.
	MaxCallsPerRun int
	// ApprovalWindow is how long a parked call may be approved (MCPFLEET_APPROVAL_WINDOW); default 15 min.
	ApprovalWindow time.Duration
	// CallsPerServer bounds the calls in flight to one server (MCPFLEET_CALLS_PER_SERVER); default 4.
	CallsPerServer int
	// QueueTimeout bounds how long a call waits for a slot of its server before it fails as server_busy,
	// unsent; default the MCP operation timeout (15 s).
	QueueTimeout time.Duration
	// Wait bounds how long a request waits for its call to finish before it is answered with the call
	// still running (the client then reads GET /v1/mcp/calls/{id}); default 25 s, inside the HTTP
	// server's write timeout.
	Wait time.Duration
	// RetryAfter is what a skill_unavailable refusal of an unhealthy server suggests waiting: the
	// heartbeat interval, the soonest a server can come back; default 10 s.
	RetryAfter time.Duration
	// SweepInterval is how often approval windows are checked; default 30 s. (A read or decision on a
	// parked call also checks its window.)
	SweepInterval time.Duration
	// ShutdownGrace is how long Stop lets calls in flight finish before it cancels them; default 5 s.
	ShutdownGrace time.Duration
}

// withDefaults returns c with every zero field at its default (package config).
func (c Config) withDefaults() Config {
	c.MaxCallsPerRun = config.Or(c.MaxCallsPerRun, config.DefaultMaxCallsPerRun)
	c.ApprovalWindow = config.Or(c.ApprovalWindow, config.DefaultApprovalWindow)
	c.CallsPerServer = config.Or(c.CallsPerServer, config.DefaultCallsPerServer)
	c.QueueTimeout = config.Or(c.QueueTimeout, config.DefaultCallQueueTimeout)
	c.Wait = config.Or(c.Wait, config.DefaultCallWait)
	c.RetryAfter = config.Or(c.RetryAfter, config.DefaultUnavailableRetryWait)
	c.SweepInterval = config.Or(c.SweepInterval, config.DefaultApprovalSweep)
	c.ShutdownGrace = config.Or(c.ShutdownGrace, config.DefaultCallShutdownGrace)
	return c
}

// Deps are the gateway's collaborators.
type Deps struct {
	Store  Store
	Caller Caller
	// Clock stamps calls and events and judges approval windows; default the real clock.
	Clock health.Clock
	Log   *slog.Logger
}

// Errors of the gateway's operations besides *Refusal and *StateError.
var (
	// ErrNotFound: no such call in the tenant.
	ErrNotFound = errors.New("no such call")
	// ErrStopping: the gateway is shutting down and accepts no call.
	ErrStopping = errors.New("the gateway is shutting down")
	// ErrKeyReused: the Idempotency-Key was already used in the run for a different call.
	ErrKeyReused = errors.New("the idempotency key was used for another call of this run")
	// ErrApprovalExpired: the call's approval window closed; it was failed, never sent.
	ErrApprovalExpired = errors.New("the approval window of the call closed")
	// ErrUnavailable: the database could not record what the operation needs; nothing was sent.
	ErrUnavailable = errors.New("the call could not be recorded")
	// ErrSelfApproval: the approving key is the key that requested the call (four eyes); the call stays
	// parked for another administrator's key.
	ErrSelfApproval = errors.New("a call cannot be approved with the key that requested it")
)

// StateError is an operation on a call that is not in a state it applies to (approving a call that is
// not awaiting approval, cancelling a finished call).
type StateError struct {
	Call persistence.Call
	Op   string // "approve", "deny", "cancel"
}

func (e *StateError) Error() string {
	return fmt.Sprintf("cannot %s call %s: it is %s", e.Op, e.Call.CallID, e.Call.State)
}

// cancellation causes: both wrap context.Canceled, so the MCP client reports a cancellation.
var (
	errCancelled = fmt.Errorf("cancelled by an administrator: %w", context.Canceled)
	errShutdown  = fmt.Errorf("the service is shutting down: %w", context.Canceled)
)

// Gateway is the tool-call gateway. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	store  Store
	caller Caller
	clock  health.Clock
	log    *slog.Logger

	mu       sync.Mutex
	stopping bool
	sweeping bool
	inflight map[uuid.UUID]*inflight
	slots    map[uuid.UUID]chan struct{}
	queued   map[uuid.UUID]int // calls waiting for a slot, by server
	calls    sync.WaitGroup    // executing calls

	stopSweep chan struct{}
	sweepDone chan struct{}
}

// inflight is a call this process is executing (or about to).
type inflight struct {
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the call has ended and its outcome is recorded (or could not be)
	call   persistence.Call
}

// New returns the gateway. It starts nothing: see Start.
func New(cfg Config, deps Deps) *Gateway {
	if deps.Clock == nil {
		deps.Clock = health.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Gateway{
		cfg: cfg.withDefaults(), store: deps.Store, caller: deps.Caller, clock: deps.Clock, log: deps.Log,
		inflight: map[uuid.UUID]*inflight{}, slots: map[uuid.UUID]chan struct{}{}, queued: map[uuid.UUID]int{},
		stopSweep: make(chan struct{}), sweepDone: make(chan struct{}),
	}
}

// Config returns the effective configuration.
func (g *Gateway) Config() Config { return g.cfg }

// now is the gateway's time at PostgreSQL's precision.
func (g *Gateway) now() time.Time { return g.clock.Now().UTC().Truncate(time.Microsecond) }

// Start fails every call a previous process left running (outcome interrupted: it may or may not have
// reached the server, and it is never re-sent) and expires the approval windows that closed. Call it once,
// before serving; StartSweeping starts the periodic expiry. Only calls of a node that is gone are touched
// (persistence.Store.InterruptRunning): in a cluster, the running calls of the other live nodes are theirs.
func (g *Gateway) Start(ctx context.Context) error {
	if err := g.interruptGone(ctx); err != nil {
		return fmt.Errorf("gateway start: %w", err)
	}
	if err := g.ExpireApprovals(ctx); err != nil {
		return fmt.Errorf("gateway start: %w", err)
	}
	return nil
}

// interruptGone fails the running calls of the nodes that are gone, in every tenant.
func (g *Gateway) interruptGone(ctx context.Context) error {
	tenants, err := g.store.TenantIDs(ctx)
	if err != nil {
		return err
	}
	now := g.now()
	for _, t := range tenants {
		n, err := g.store.InterruptRunning(ctx, t, now, interruptedResult)
		if err != nil {
			return err
		}
		if n > 0 {
			g.log.WarnContext(ctx, "calls left running by a process that is gone were marked interrupted; none is re-sent",
				"tenant_id", t, "calls", n)
		}
	}
	return nil
}

// StartSweeping starts the periodic check of approval windows (every Config.SweepInterval) until Stop.
func (g *Gateway) StartSweeping() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sweeping || g.stopping {
		return
	}
	g.sweeping = true
	go g.sweep()
}

func (g *Gateway) sweep() {
	defer close(g.sweepDone)
	t := time.NewTicker(g.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stopSweep:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), g.cfg.SweepInterval)
			if err := g.ExpireApprovals(ctx); err != nil {
				g.log.Warn("approval windows not checked; retrying at the next sweep", "err", err)
			}
			// A cluster node that died leaves its running calls to the others, once its lease is over.
			if err := g.interruptGone(ctx); err != nil {
				g.log.Warn("running calls of gone nodes not checked; retrying at the next sweep", "err", err)
			}
			cancel()
		}
	}
}

// ExpireApprovals fails every parked call of every tenant whose approval window has closed (outcome
// approval_expired, a failed tool result; never sent). The sweep runs it periodically; tests call it.
func (g *Gateway) ExpireApprovals(ctx context.Context) error {
	tenants, err := g.store.TenantIDs(ctx)
	if err != nil {
		return err
	}
	now := g.now()
	for _, t := range tenants {
		expired, err := g.store.ExpireApprovals(ctx, t, now, expiredResult(g.cfg.ApprovalWindow))
		if err != nil {
			return err
		}
		for _, c := range expired {
			g.log.InfoContext(ctx, "approval window closed; the call was not sent", "call_id", c.CallID, "run_id", c.RunID,
				"server_id", c.ServerID, "tool", c.Tool)
		}
	}
	return nil
}

// Stop stops accepting calls, lets the calls in flight finish for up to ShutdownGrace (bounded by ctx),
// then cancels the rest — the server is told with notifications/cancelled, and each ends as failed,
// outcome interrupted, never re-sent — and waits for their outcomes to be recorded, bounded by ctx.
func (g *Gateway) Stop(ctx context.Context) error {
	g.mu.Lock()
	already, sweeping := g.stopping, g.sweeping
	g.stopping = true
	g.mu.Unlock()
	if already {
		return nil
	}
	close(g.stopSweep)
	done := make(chan struct{})
	go func() { g.calls.Wait(); close(done) }()
	grace := time.NewTimer(g.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	n := 0
	for _, f := range g.inflight {
		f.cancel(errShutdown)
		n++
	}
	g.mu.Unlock()
	if n > 0 {
		g.log.WarnContext(ctx, "cancelling calls in flight at shutdown; none is re-sent", "calls", n)
	}
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("gateway stop: %w", ctx.Err())
	}
	if sweeping {
		select {
		case <-g.sweepDone:
		case <-ctx.Done():
		}
	}
	return err
}

// decodeArgs decodes stored or requested arguments: a JSON object (numbers kept as written), or
// nothing, which is the empty object.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}
