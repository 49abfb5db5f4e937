// Package service assembles mcpfleet: configuration → database pool → actor system → HTTP API, in
// that order, with a bounded shutdown in reverse. Tests start it end to end on 127.0.0.1:0.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/gateway"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/mcpendpoint"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
	"github.com/mcpfleet/mcpfleet/shard"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Options are test and embedding hooks; the zero value is production.
type Options struct {
	Clock health.Clock // default the real clock
	// ManualMonitor turns off the automatic monitor ticks; the caller runs Fleet().RunMonitor.
	ManualMonitor bool
	Log           *slog.Logger
	LogOutput     io.Writer // where the default logger writes; default io.Discard... set by the command
	OnEvent       func(string)
	// TraceEndpoint, if set, exports traces over OTLP/HTTP to this base URL whatever the environment
	// says (tests; in production set OTEL_EXPORTER_OTLP_ENDPOINT).
	TraceEndpoint string
	// ManualProbes turns off the automatic probing of probe servers; the caller runs Remote().RunProbes.
	ManualProbes bool
	// WrapHandler, if set, wraps the API's handler before it is served (tests put the OpenAPI checker,
	// httpapi/apicheck, in front of it).
	WrapHandler func(http.Handler) http.Handler
}

// Service is a running mcpfleet.
type Service struct {
	cfg     Config
	node    string // this process's name as a shard owner (see nodeName)
	log     *slog.Logger
	store   *persistence.Store
	fleet   *actors.Fleet
	tracing *telemetry.Tracing
	prom    *telemetry.Prometheus
	metrics *telemetry.Metrics
	http    *http.Server
	ln      net.Listener
	// metricsSrv serves every metric on MCPFLEET_METRICS_ADDR (nil when off).
	metricsSrv *http.Server
	metricsLn  net.Listener
	ready      atomic.Bool
	served     chan error
	remote     *remote.Service
	gateway    *gateway.Gateway
	mcp        *mcpendpoint.Endpoint
	api        *httpapi.Server
	// member is this process's cluster membership, routed the fleet as the API sees it (both nil in
	// single-node mode).
	member *cluster.Node
	// touchStop and touchDone end the renewal of this node's cluster_nodes row (cluster mode).
	touchStop, touchDone chan struct{}
	routed               *routedFleet
	// stopWarm ends the owner-cache warm-up started at readiness and waits for it (warmOwners).
	stopWarm func()
}

// Start starts the service and returns once it is ready and listening. If it fails, whatever it had
// started (tracer, metrics, pool, actor system, probes, gateway, listener) is released before it returns.
func Start(ctx context.Context, cfg Config, opt Options) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withLimitDefaults()
	log := newLogger(cfg, opt)
	s := &Service{cfg: cfg, log: log, served: make(chan error, 1), node: nodeName()}
	defer func() {
		if err != nil {
			s.release(ctx)
		}
	}()
	s.tracing, err = telemetry.NewTracing(ctx, telemetry.TraceConfig{ServiceName: "mcpfleet", Export: cfg.TraceExport,
		Endpoint: opt.TraceEndpoint, SamplerName: cfg.TraceSampler, SamplerArg: cfg.TraceSamplerArg, Log: log})
	if err != nil {
		return nil, err
	}
	if err := s.startMetrics(); err != nil {
		return nil, err
	}
	s.store, err = persistence.Open(ctx, cfg.DatabaseURL, persistence.Options{MaxConns: cfg.DBMaxConns, AppName: "mcpfleet", Node: s.node, Tracer: s.pgxTracer(opt),
		Spans: s.tracing.Tracer, MaxServersPerTenant: cfg.MaxServersPerTenant})
	if err != nil {
		return nil, err
	}
	if _, err := s.store.CheckRuntimeRole(ctx); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	// A previous process killed mid-commit may still have sessions finishing: load the fleet after them.
	// Not in cluster mode: the other nodes' sessions look the same and never end; the shard epochs
	// fence a previous owner's late writes instead.
	if cfg.Cluster.Enabled() {
		// nothing to wait for
	} else if n, err := s.store.WaitForPredecessors(ctx, 10*time.Second); err != nil {
		log.Warn("could not check for a previous process's sessions", "err", err)
	} else if n > 0 {
		log.Warn("a previous process's sessions are still open after 10s; loading the fleet anyway", "sessions", n)
	}
	// Single-node mode owns every shard: claiming them fences a previous process on this database that is
	// still running (paused by SIGSTOP and resumed, or started twice by mistake) — its writes are refused
	// from now on, and its fleet stops the servers' actors.
	// In cluster mode the node claims each shard as it takes it (joinCluster, actors.Fleet.SetOwned).
	var fences []persistence.Fence
	if !cfg.Cluster.Enabled() {
		if fences, err = s.store.ClaimShards(ctx, shard.All(), s.node); err != nil {
			return nil, fmt.Errorf("claim the shards: %w", err)
		}
	}
	if s.fleet, err = s.startFleet(ctx, cfg, opt, fences); err != nil {
		return nil, err
	}
	var fleet interface {
		httpapi.Fleet
		remote.Fleet
	} = s.fleet
	if cfg.Cluster.Enabled() {
		if err := s.joinCluster(ctx, cfg, log); err != nil {
			return nil, err
		}
		fleet = s.routed
	}
	s.remote = s.newRemote(ctx, cfg, log, fleet)
	if err := s.startGateway(ctx, cfg, opt, log); err != nil {
		return nil, err
	}
	s.mcp = s.newMCPEndpoint(cfg, opt, log)
	changes := listSignals{Service: s.remote, mcp: s.mcp} // operator changes wake the MCP endpoint's list
	dashboard, err := s.newUI(cfg, opt, log, changes)
	if err != nil {
		return nil, err
	}
	api := httpapi.New(cfg.apiConfig(), httpapi.Deps{
		Fleet: registrationSignals{Fleet: fleet, mcp: s.mcp}, Store: s.store, Log: log, TracerProvider: s.tracing.Provider, Propagator: s.tracing.Propagator,
		Metrics: s.metrics, MetricsHandler: s.prom.Handler,
		Ready: s.ready.Load, Remote: changes, Events: s.store, UI: dashboard,
		Gateway: s.gateway, MCP: s.mcp, Cluster: s.clusterStatus(),
	})
	s.api = api
	s.ln, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	if err := s.serveMetrics(cfg.MetricsAddr); err != nil {
		return nil, err
	}
	handler := api.Handler()
	if opt.WrapHandler != nil {
		handler = opt.WrapHandler(handler)
	}
	s.http = &http.Server{
		Handler: handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.http.RegisterOnShutdown(api.CloseStreams) // event streams never end by themselves
	s.ready.Store(true)
	if !opt.ManualProbes {
		s.remote.StartProbing()
	}
	s.gateway.StartSweeping()
	s.warmOwners(api)
	go func() { s.served <- s.http.Serve(s.ln) }()
	log.Info("mcpfleet ready", "addr", s.ln.Addr().String(), "heartbeat_interval", cfg.HeartbeatInterval.String(),
		"monitor_interval", cfg.MonitorInterval.String())
	return s, nil
}

// warmOwners reads who owns every server into the API's owner cache in the background, from readiness
// on: after a restart or a failover every module's first heartbeat would otherwise cost a transaction of
// its own (250,000 servers: 25,000 a second for one H). Heartbeats that come first look their owner up
// as they always did. Close stops it.
func (s *Service) warmOwners(api *httpapi.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopWarm = func() { cancel(); <-done }
	go func() {
		defer close(done)
		start := time.Now()
		tenants, err := s.store.TenantIDs(ctx)
		n := 0
		if err == nil {
			n, err = api.WarmOwners(ctx, tenants)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("owner cache not warmed; heartbeats look their owner up one by one", "cached", n, "err", err)
			return
		}
		s.log.Info("owner cache warmed", "servers", n, "took", time.Since(start).Round(time.Millisecond).String())
	}()
}

// newLogger returns opt.Log, or a logger at cfg.LogLevel writing to opt.LogOutput (default nowhere).
func newLogger(cfg Config, opt Options) *slog.Logger {
	if opt.Log != nil {
		return opt.Log
	}
	out := opt.LogOutput
	if out == nil {
		out = io.Discard
	}
	return telemetry.NewLogger(out, cfg.LogLevel)
}

// startFleet starts the actor system on the open store.
func (s *Service) startFleet(ctx context.Context, cfg Config, opt Options, fences []persistence.Fence) (*actors.Fleet, error) {
	return actors.Start(ctx, actors.Config{
		HeartbeatInterval: cfg.HeartbeatInterval, MonitorInterval: cfg.MonitorInterval, ManualMonitor: opt.ManualMonitor, StampFlushInterval: cfg.StampFlushInterval,
		WriteTimeout: cfg.WriteTimeout, AlertWebhookURL: cfg.AlertWebhookURL, AlertWebhookSecret: cfg.AlertWebhookSecret,
		Flap:        actors.FlapConfig{Window: cfg.FlapWindow, Threshold: cfg.FlapThreshold},
		MassSilence: actors.MassSilenceConfig{Fraction: cfg.MassSilenceFraction, Min: cfg.MassSilenceMin},
		Sharded:     cfg.Cluster.Enabled(), SaturationLatency: saturationLatency(cfg.SaturationLatency),
	}, s.store, actors.Deps{Clock: opt.Clock, Log: s.log, Tracer: s.tracing.Tracer, OnEvent: opt.OnEvent, Metrics: s.metrics, Fences: fences})
}

// saturationLatency is the actors' threshold for MCPFLEET_SATURATION_LATENCY, whose 0 means never (the
// actors' is negative: their 0 is the default).
func saturationLatency(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// releaseTimeout bounds the release of a service whose Start failed.
const releaseTimeout = 10 * time.Second

// release undoes a failed Start: it closes what was started, in reverse, on a context that outlives a
// cancelled ctx (a failed Start must not leave the actor system or the tracer behind because the caller
// gave up), and logs what could not be closed; Start's own error is the one returned.
func (s *Service) release(ctx context.Context) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := s.Close(c); err != nil {
		s.log.Warn("releasing a service that failed to start", "err", err)
	}
}

// nodeName names this process as the owner of shards and the maker of tool calls: host, pid and a random
// suffix, so two processes (or a restart) never share a name.
func nodeName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}

// Node is this process's name as a shard owner.
func (s *Service) Node() string { return s.node }

// Addr is the address the API listens on.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// URL is the base URL of the API.
func (s *Service) URL() string { return "http://" + s.Addr() }

// Fleet is the actor system (tests drive the monitor through it).
func (s *Service) Fleet() *actors.Fleet { return s.fleet }

// Store is the runtime store.
func (s *Service) Store() *persistence.Store { return s.store }

// Done is closed with the HTTP server's exit error if it stops serving by itself.
func (s *Service) Done() <-chan error { return s.served }

// Close stops accepting requests, lets in-flight ones finish, drains the writer and the stamper, and
// flushes traces — bounded by ctx. It closes only the parts that were started, so it also undoes a Start that
// failed part-way.
func (s *Service) Close(ctx context.Context) error {
	s.ready.Store(false)
	var errs []error
	// Calls in flight end first (finished, or cancelled and recorded), so no handler waits on one.
	if s.gateway != nil {
		if err := s.gateway.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.stopTouching(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.mcp != nil {
		s.mcp.Close() // sessions and their streams end, so Shutdown does not wait on them
	}
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	} else if s.ln != nil {
		_ = s.ln.Close() // Start failed after listening: nothing was served
	}
	if s.metricsSrv != nil {
		if err := s.metricsSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("metrics listener shutdown: %w", err))
		}
	}
	if s.remote != nil {
		if err := s.remote.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.member != nil {
		// Hand the shards over before the fleet stops: the others take them (with grace from then)
		// while this node still answers what it owns.
		if err := s.member.Leave(ctx); err != nil {
			errs = append(errs, err)
		}
		s.member.Close()
	}
	if s.fleet != nil {
		if err := s.fleet.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.stopWarm != nil {
		s.stopWarm()
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.prom != nil {
		if err := s.prom.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("metrics shutdown: %w", err))
		}
	}
	if s.tracing != nil {
		if err := s.tracing.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("tracing shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Run starts the service and serves until ctx is cancelled (SIGINT/SIGTERM), then shuts down within
// 20 seconds.
func Run(ctx context.Context, cfg Config, opt Options) error {
	s, err := Start(ctx, cfg, opt)
	if err != nil {
		return err
	}
	stopPprof, err := startPprof(cfg.PprofAddr, s.log)
	if err != nil {
		s.log.Warn("profiler not started", "err", err)
		stopPprof = func() {}
	}
	defer stopPprof()
	select {
	case <-ctx.Done():
	case err := <-s.served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "err", err)
		}
	}
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	return s.Close(sctx)
}
