package fleetclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfleet/mcpfleet/config"
)

// ErrModuleRunning is returned by Module.Run when another Run of the same
// Module has not returned yet.
var ErrModuleRunning = errors.New("module is already running")

// DefaultHeartbeatInterval is used when the service's registration answer
// carries no interval and ModuleOptions.Interval is zero: the service's own
// default H (config.DefaultHeartbeatInterval), stated once.
const DefaultHeartbeatInterval = config.DefaultHeartbeatInterval

// ModuleOptions tunes a Module. The zero value is ready to use.
type ModuleOptions struct {
	// Interval overrides the heartbeat interval the service returns at
	// registration. Zero means use the service's (DefaultHeartbeatInterval if
	// it sent none).
	Interval time.Duration
	// Jitter spreads heartbeats: each wait is the interval plus a uniform
	// random offset in [-Jitter, +Jitter]. It is capped at a quarter of the
	// interval so a module on time is never late by the service's 2H rule.
	Jitter time.Duration
	// DeregisterTimeout bounds the deregistration made when Run's context
	// ends (default 5 s).
	DeregisterTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff after a
	// retryable failure (defaults 500 ms and 10 s). Heartbeat retries never
	// wait longer than the interval unless the service asks for it.
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps how long a Retry-After answer can make the module
	// wait (default 60 s), before the up to a second at random every wait
	// after a Retry-After gets (RetryWait).
	MaxRetryAfter time.Duration
	// ReregisterOnDeregistered makes the module register again when a
	// heartbeat answers 409 server_deregistered (someone deregistered it).
	// By default Run returns that error instead.
	ReregisterOnDeregistered bool
	// KeepRegistered skips the deregistration when Run's context ends, as if
	// the module had crashed.
	KeepRegistered bool
	// OnEvent, if set, is called synchronously from Run's goroutine for each
	// event. It must not block for long and must not call Run.
	OnEvent func(ModuleEvent)
}

// EventKind names what happened to a Module.
type EventKind string

// The events a Module reports.
const (
	// EventRegistered: a registration succeeded (Created, ServerID, Interval).
	EventRegistered EventKind = "registered"
	// EventHeartbeat: a heartbeat was answered 200 (Status).
	EventHeartbeat EventKind = "heartbeat"
	// EventRetry: a retryable failure; the next attempt is in Delay (Err).
	EventRetry EventKind = "retry"
	// EventReregistering: a heartbeat got 404 (or 409 with
	// ReregisterOnDeregistered); the module registers again (Err).
	EventReregistering EventKind = "reregistering"
	// EventDeregistered: the graceful deregistration succeeded.
	EventDeregistered EventKind = "deregistered"
	// EventStopped: Run is returning (Err is its result).
	EventStopped EventKind = "stopped"
)

// ModuleEvent describes one event of a Module.
type ModuleEvent struct {
	Kind     EventKind
	Module   string
	ServerID string
	Status   Status
	Created  bool
	Interval time.Duration
	Delay    time.Duration
	Err      error
	At       time.Time
}

// Module keeps one MCP module registered with the service: Run registers it,
// heartbeats every interval, registers again when the service has forgotten
// it, backs off on 503 and transport errors (honouring Retry-After), and
// deregisters when its context ends. Pause and Resume stop and restart the
// heartbeats without deregistering, to show health transitions.
//
// A Module's methods are safe for concurrent use; Run runs at most once at a
// time.
type Module struct {
	c    *Client
	req  RegisterRequest
	opts ModuleOptions

	running atomic.Bool
	wake    chan struct{} // a Resume wakes a paused Run at once

	mu       sync.Mutex
	serverID string
	status   Status
	interval time.Duration
	paused   bool
}

// NewModule returns a Module that registers req through c. req is copied.
func NewModule(c *Client, req RegisterRequest, opts ModuleOptions) *Module {
	req.SupportedProtocols = slices.Clone(req.SupportedProtocols)
	req.CapabilityAdvertisement.Tools = slices.Clone(req.CapabilityAdvertisement.Tools)
	if opts.DeregisterTimeout <= 0 {
		opts.DeregisterTimeout = 5 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(10*time.Second, opts.MinBackoff)
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = time.Minute
	}
	return &Module{c: c, req: req, opts: opts, wake: make(chan struct{}, 1)}
}

// Name returns the module's name.
func (m *Module) Name() string { return m.req.ModuleName }

// ServerID returns the server_id of the last successful registration, or ""
// before the first one.
func (m *Module) ServerID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.serverID
}

// Status returns the status of the last answer (registration, heartbeat or
// deregistration), or "" before the first.
func (m *Module) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Interval returns the heartbeat interval in use, or 0 before the first
// registration.
func (m *Module) Interval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.interval
}

// Pause stops heartbeats until Resume; the module stays registered, so the
// service will see it go degraded, then unhealthy.
func (m *Module) Pause() {
	m.mu.Lock()
	m.paused = true
	m.mu.Unlock()
}

// Resume restarts heartbeats after Pause; the next one is sent at once.
// It does nothing if the module is not paused.
func (m *Module) Resume() {
	m.mu.Lock()
	was := m.paused
	m.paused = false
	m.mu.Unlock()
	if was {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// Paused reports whether the module is paused.
func (m *Module) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

// Run registers the module and keeps it alive until ctx ends, then
// deregisters it within DeregisterTimeout (unless KeepRegistered).
//
// Registration and heartbeats are retried for as long as ctx lives while the
// failures are retryable (IsRetryable). Run returns nil after a graceful
// stop; the deregistration's error if that failed; or, early and without
// deregistering, a non-retryable error (a bad key, an invalid registration, a
// 409 without ReregisterOnDeregistered). It returns ErrModuleRunning if
// called while another Run is active.
func (m *Module) Run(ctx context.Context) (err error) {
	if !m.running.CompareAndSwap(false, true) {
		return ErrModuleRunning
	}
	defer m.running.Store(false)
	defer func() { m.emit(ModuleEvent{Kind: EventStopped, Err: err}) }()

	if err := m.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before ever registering: nothing to undo
		}
		return err
	}
	if err := m.heartbeatLoop(ctx); err != nil {
		return err
	}
	if m.opts.KeepRegistered {
		return nil
	}
	return m.deregister(ctx)
}

// register registers until it succeeds, fails for good, or ctx ends.
func (m *Module) register(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		resp, err := m.c.Register(ctx, m.req)
		if err == nil {
			iv := m.opts.Interval
			if iv <= 0 {
				iv = resp.HeartbeatInterval()
			}
			if iv <= 0 {
				iv = DefaultHeartbeatInterval
			}
			m.mu.Lock()
			m.serverID, m.status, m.interval = resp.ServerID, resp.Status, iv
			m.mu.Unlock()
			m.emit(ModuleEvent{Kind: EventRegistered, Created: resp.Created, Interval: iv, Status: resp.Status})
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !IsRetryable(err) {
			return fmt.Errorf("module %s: %w", m.req.ModuleName, err)
		}
		d := m.backoff(attempt, err, 0)
		m.emit(ModuleEvent{Kind: EventRetry, Err: err, Delay: d})
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// heartbeatLoop heartbeats until ctx ends (nil) or a permanent failure.
func (m *Module) heartbeatLoop(ctx context.Context) error {
	t := time.NewTimer(m.nextWait())
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-t.C:
		}
		if m.Paused() {
			t.Reset(m.Interval())
			continue
		}
		hb, err := m.c.Heartbeat(ctx, m.ServerID())
		next := m.nextWait()
		switch {
		case err == nil:
			failures = 0
			m.mu.Lock()
			m.status = hb.Status
			m.mu.Unlock()
			m.emit(ModuleEvent{Kind: EventHeartbeat, Status: hb.Status})
		case ctx.Err() != nil:
			return nil
		case IsNotRegistered(err) || (IsDeregistered(err) && m.opts.ReregisterOnDeregistered):
			m.emit(ModuleEvent{Kind: EventReregistering, Err: err})
			if rerr := m.register(ctx); rerr != nil {
				if ctx.Err() != nil {
					return nil
				}
				return rerr
			}
			failures = 0
			next = m.nextWait()
		case IsRetryable(err):
			next = m.backoff(failures, err, m.Interval())
			failures++
			m.emit(ModuleEvent{Kind: EventRetry, Err: err, Delay: next})
		default:
			return fmt.Errorf("module %s: %w", m.req.ModuleName, err)
		}
		t.Reset(next)
	}
}

// deregister makes the graceful deregistration, retrying retryable failures
// until DeregisterTimeout. A server the service no longer knows, or that is
// already deregistered, counts as done.
func (m *Module) deregister(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.DeregisterTimeout)
	defer cancel()
	id := m.ServerID()
	var last error // the last failure that was not the timeout itself
	for attempt := 0; ; attempt++ {
		srv, err := m.c.Deregister(dctx, id)
		if err == nil || IsNotRegistered(err) || IsDeregistered(err) {
			m.mu.Lock()
			m.status = StatusDeregistered
			if srv != nil && srv.Status != "" {
				m.status = srv.Status
			}
			m.mu.Unlock()
			m.emit(ModuleEvent{Kind: EventDeregistered, Status: StatusDeregistered})
			return nil
		}
		if dctx.Err() == nil || last == nil {
			last = err
		}
		if !IsRetryable(err) && dctx.Err() == nil {
			return fmt.Errorf("module %s: %w", m.req.ModuleName, err)
		}
		if dctx.Err() != nil || !sleep(dctx, m.backoff(attempt, err, 0)) {
			return fmt.Errorf("module %s: deregistration gave up after %s: %w", m.req.ModuleName, m.opts.DeregisterTimeout, last)
		}
	}
}

// nextWait is the interval with jitter applied.
func (m *Module) nextWait() time.Duration {
	iv := m.Interval()
	if iv <= 0 {
		iv = DefaultHeartbeatInterval
	}
	j := min(m.opts.Jitter, iv/4)
	if j <= 0 {
		return iv
	}
	return iv - j + rand.N(2*j+1)
}

// backoff is the wait before retry number attempt (0-based): exponential
// from MinBackoff with equal jitter, capped at MaxBackoff and, if capAt > 0,
// at capAt; a longer Retry-After in err wins, up to MaxRetryAfter (RetryWait).
func (m *Module) backoff(attempt int, err error, capAt time.Duration) time.Duration {
	d := m.opts.MinBackoff << min(attempt, 20)
	d = min(d, m.opts.MaxBackoff)
	if capAt > 0 {
		d = min(d, capAt)
	}
	return RetryWait(err, d/2+rand.N(d/2+1), m.opts.MaxRetryAfter)
}

func (m *Module) emit(ev ModuleEvent) {
	if m.opts.OnEvent == nil {
		return
	}
	ev.Module = m.req.ModuleName
	if ev.ServerID == "" {
		ev.ServerID = m.ServerID()
	}
	if ev.Interval == 0 {
		ev.Interval = m.Interval()
	}
	ev.At = time.Now()
	m.opts.OnEvent(ev)
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
