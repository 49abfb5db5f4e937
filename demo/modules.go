package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// FlakyName is the demo server whose heartbeats RunModules pauses.
const FlakyName = "flaky"

// RunOptions tunes RunModules. The zero value suits a service with the
// default H = 10 s and a 5 s monitor period.
type RunOptions struct {
	// Out receives one human-readable line per step; nil discards them.
	Out io.Writer
	// HTTPClient is used for the service; nil means a fleetclient default.
	HTTPClient *http.Client
	// Jitter spreads each module's heartbeats (see fleetclient.ModuleOptions).
	Jitter time.Duration
	// MonitorPeriod is the service's monitor period, used to size the flaky
	// pause (default 5 s).
	MonitorPeriod time.Duration
	// FlakySteady is how long the flaky module heartbeats normally before
	// each pause (default 3H).
	FlakySteady time.Duration
	// FlakyPause is how long each pause lasts (default 3H + MonitorPeriod +
	// H/2, enough to be seen degraded and then unhealthy).
	FlakyPause time.Duration
	// FlakyCycles bounds the pause cycles; after the last one the flaky module
	// heartbeats normally. 0 means pause again every cycle until ctx ends.
	FlakyCycles int
	// Watch, if set, is used to poll the flaky server's status through the
	// read API (GET /v1/mcp/servers/{id}) and print each change, so the
	// transitions the service makes show in Out. It needs a key allowed to
	// read servers.
	Watch *fleetclient.Client
	// DeregisterTimeout bounds each module's deregistration (default 5 s).
	DeregisterTimeout time.Duration
}

// RunModules registers each server as a module of the service at baseURL,
// authenticating with moduleKey, and keeps them heartbeating at the interval
// the service returns (supported_protocols is ProtocolVersion(), endpoint
// the server's URL). The server named FlakyName, if present, repeatedly
// heartbeats for FlakySteady, then pauses for FlakyPause and resumes, so a
// watcher sees healthy → degraded → unhealthy → healthy.
//
// RunModules blocks until ctx ends and every module has deregistered
// (each within DeregisterTimeout), or until every module has stopped on a
// permanent error such as a rejected key. It returns nil after a graceful
// stop, or the modules' errors joined. It does not close the servers.
func RunModules(ctx context.Context, baseURL, moduleKey string, servers []*Server, opts RunOptions) error {
	out := &lineWriter{w: opts.Out}
	if opts.MonitorPeriod <= 0 {
		opts.MonitorPeriod = 5 * time.Second
	}
	var copts []fleetclient.Option
	if opts.HTTPClient != nil {
		copts = append(copts, fleetclient.WithHTTPClient(opts.HTTPClient))
	}
	client := fleetclient.New(baseURL, moduleKey, copts...)

	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		registered := make(chan struct{})
		var once sync.Once
		m := fleetclient.NewModule(client, s.RegisterRequest(), fleetclient.ModuleOptions{
			Jitter:            opts.Jitter,
			DeregisterTimeout: opts.DeregisterTimeout,
			OnEvent: newPrinter(out, s, func(ev fleetclient.ModuleEvent) {
				if ev.Kind == fleetclient.EventRegistered {
					once.Do(func() { close(registered) })
				}
			}),
		})
		mctx, stopModule := context.WithCancel(ctx)
		if s.Name == FlakyName {
			wg.Go(func() { driveFlaky(mctx, m, registered, opts, out) })
			if opts.Watch != nil {
				wg.Go(func() { watch(mctx, opts.Watch, m, registered, out) })
			}
		}
		wg.Go(func() {
			defer stopModule() // a module that stopped for good ends its helpers
			if err := m.Run(mctx); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newPrinter returns an OnEvent that prints the events worth a line and
// then calls also.
func newPrinter(out *lineWriter, s *Server, also func(fleetclient.ModuleEvent)) func(fleetclient.ModuleEvent) {
	var last fleetclient.Status
	return func(ev fleetclient.ModuleEvent) {
		also(ev)
		switch ev.Kind {
		case fleetclient.EventRegistered:
			how := "re-registered"
			if ev.Created {
				how = "registered"
			}
			out.printf("%s: %s as %s, heartbeat every %s, MCP endpoint %s", s.Name, how, ev.ServerID, ev.Interval, s.Endpoint)
			last = ev.Status
		case fleetclient.EventHeartbeat:
			if ev.Status != last {
				out.printf("%s: heartbeat answered %s", s.Name, ev.Status)
				last = ev.Status
			}
		case fleetclient.EventRetry:
			out.printf("%s: %v; retrying in %s", s.Name, ev.Err, ev.Delay.Round(time.Millisecond))
		case fleetclient.EventReregistering:
			out.printf("%s: the service does not know this server any more (%v); registering again", s.Name, ev.Err)
		case fleetclient.EventDeregistered:
			out.printf("%s: deregistered", s.Name)
		case fleetclient.EventStopped:
			if ev.Err != nil {
				out.printf("%s: stopped: %v", s.Name, ev.Err)
			}
		}
	}
}

// driveFlaky pauses and resumes the flaky module's heartbeats in cycles
// until ctx ends or opts.FlakyCycles cycles are done.
func driveFlaky(ctx context.Context, m *fleetclient.Module, registered <-chan struct{}, opts RunOptions, out *lineWriter) {
	select {
	case <-ctx.Done():
		return
	case <-registered:
	}
	h := m.Interval()
	steady := opts.FlakySteady
	if steady <= 0 {
		steady = 3 * h
	}
	pause := opts.FlakyPause
	if pause <= 0 {
		pause = 3*h + opts.MonitorPeriod + h/2
	}
	for cycle := 0; opts.FlakyCycles <= 0 || cycle < opts.FlakyCycles; cycle++ {
		out.printf("%s: heartbeating normally for %s", m.Name(), steady)
		if !wait(ctx, steady) {
			return
		}
		m.Pause()
		out.printf("%s: pausing heartbeats for %s to show degraded → unhealthy", m.Name(), pause)
		ok := wait(ctx, pause)
		m.Resume()
		if !ok {
			return
		}
		out.printf("%s: resuming heartbeats to show unhealthy → healthy", m.Name())
	}
	out.printf("%s: done pausing; heartbeating normally from now on", m.Name())
}

// watch polls the module's server through the read API and prints each
// status change, until ctx ends. Errors are printed once per run of errors.
func watch(ctx context.Context, c *fleetclient.Client, m *fleetclient.Module, registered <-chan struct{}, out *lineWriter) {
	select {
	case <-ctx.Done():
		return
	case <-registered:
	}
	every := max(m.Interval()/5, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var last fleetclient.Status
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		srv, err := c.GetServer(ctx, m.ServerID())
		if err != nil {
			if ctx.Err() == nil && !failing {
				out.printf("%s: cannot watch status: %v", m.Name(), err)
			}
			failing = true
			continue
		}
		failing = false
		if srv.Status != last {
			ago := time.Since(srv.LastHeartbeatAt).Round(100 * time.Millisecond)
			out.printf("%s: service reports %s (last heartbeat %s ago)%s", m.Name(), srv.Status, ago, skillsLine(ctx, c, m.ServerID()))
			last = srv.Status
		}
	}
}

// wait waits d or until ctx ends; it reports whether d elapsed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// lineWriter writes whole lines to w from many goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	if l.w == nil {
		return
	}
	line := fmt.Sprintf(format, args...)
	line = strings.TrimRight(line, "\n") + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, line)
}

// skillsLine describes the server's skills' availability, so the cascade shows beside each status.
func skillsLine(ctx context.Context, c *fleetclient.Client, serverID string) string {
	skills, err := c.Skills(ctx, serverID)
	if err != nil || len(skills) == 0 {
		return ""
	}
	var avail, unavail []string
	for _, k := range skills {
		if k.Available {
			avail = append(avail, k.Name)
		} else {
			unavail = append(unavail, k.Name)
		}
	}
	switch {
	case len(unavail) == 0:
		return "; skills available: " + strings.Join(avail, ", ")
	case len(avail) == 0:
		return "; skills unavailable: " + strings.Join(unavail, ", ")
	}
	return "; skills available: " + strings.Join(avail, ", ") + "; unavailable: " + strings.Join(unavail, ", ")
}
