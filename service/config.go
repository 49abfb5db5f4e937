package service

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/ui"
)

// Config is the whole configuration of mcpfleet, parsed once from the environment (and flags, which
// the command applies on top) and then narrowed into each package's own config.
type Config struct {
	DatabaseURL        string        // MCPFLEET_DATABASE_URL: runtime connection, as the app role
	AdminDatabaseURL   string        // MCPFLEET_ADMIN_DATABASE_URL: owner connection (migrate, tenant, apikey)
	HTTPAddr           string        // MCPFLEET_HTTP_ADDR, default 127.0.0.1:8080
	HeartbeatInterval  time.Duration // MCPFLEET_HEARTBEAT_INTERVAL, default 10s
	MonitorInterval    time.Duration // MCPFLEET_MONITOR_INTERVAL, default 5s
	StampFlushInterval time.Duration // MCPFLEET_STAMP_FLUSH_INTERVAL, default 500ms, at most 1s
	WriteTimeout       time.Duration // MCPFLEET_WRITE_TIMEOUT, default 5s
	AlertWebhookURL    string        // MCPFLEET_ALERT_WEBHOOK_URL
	AlertWebhookSecret string        // MCPFLEET_ALERT_WEBHOOK_SECRET
	LogLevel           slog.Level    // MCPFLEET_LOG_LEVEL: debug, info, warn, error; default info
	TraceExport        bool          // on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
	DBMaxConns         int32         // MCPFLEET_DB_MAX_CONNS, default 8
	PprofAddr          string        // MCPFLEET_PPROF_ADDR: serve Go's profiler there (off when empty)
	// MetricsAddr is MCPFLEET_METRICS_ADDR, default 127.0.0.1:9464 ("off": none): every metric, the
	// per-server series included, on a listener of its own. Empty here means none.
	MetricsAddr         string
	FlapWindow          time.Duration // MCPFLEET_FLAP_WINDOW, default 15m
	FlapThreshold       int           // MCPFLEET_FLAP_THRESHOLD: transitions in the window that make a server flapping, default 4
	MassSilenceFraction float64       // MCPFLEET_MASS_SILENCE_FRACTION: 0 (default) turns the guard off
	MassSilenceMin      int           // MCPFLEET_MASS_SILENCE_MIN: floor of the per-period budget, default 10
	SaturationLatency   time.Duration // MCPFLEET_SATURATION_LATENCY: p99 wait for a CPU from which first registrations are refused, default 25ms; 0: never
	UISecureCookies     bool          // MCPFLEET_UI_SECURE_COOKIES: dashboard cookies Secure and __Host- named behind a TLS proxy
	// TraceURL is MCPFLEET_TRACE_URL: a template of the tracing UI's page of a trace, holding {trace_id}
	// (like http://jaeger:16686/trace/{trace_id}); the dashboard links every trace id it shows with it.
	// Empty: trace ids are shown as text.
	TraceURL string

	// The MCP client side: configured servers, connection tests, imports and probes.
	EndpointAllowlist []string      // MCPFLEET_ENDPOINT_ALLOWLIST: comma-separated hosts, addresses or CIDR prefixes reachable although not public
	SecretKey         *secrets.Key  // MCPFLEET_SECRET_KEY: 64 hex characters (32 bytes) sealing MCP server credentials; unset: none can be stored
	MCPTimeout        time.Duration // MCPFLEET_MCP_TIMEOUT: one deadline per MCP operation, default 15s
	ProbeConcurrency  int           // MCPFLEET_PROBE_CONCURRENCY: probes running at once, default 32

	// The tool-call gateway (zero takes the default).
	MaxCallsPerRun int           // MCPFLEET_MAX_CALLS_PER_RUN: calls a run may make unless its tenant set its own, default 20
	ApprovalWindow time.Duration // MCPFLEET_APPROVAL_WINDOW: how long a parked call may be approved, default 15m
	CallsPerServer int           // MCPFLEET_CALLS_PER_SERVER: calls in flight to one server, default 4

	// The API's limits (zero takes the default; see apiLimitsFromEnv).
	KeyCacheSize           int     // MCPFLEET_KEY_CACHE_SIZE: API keys remembered (LRU), default 300000
	AuthFailureBurst       int     // MCPFLEET_AUTH_FAILURE_BURST: failed key lookups an address may make at once, default 30
	AuthFailureRate        float64 // MCPFLEET_AUTH_FAILURE_RATE: and then per second, default 2
	AuthThrottledAddresses int     // MCPFLEET_AUTH_THROTTLED_ADDRESSES: addresses whose failures are remembered, default 65536
	AuthLookupsPerAddress  int     // MCPFLEET_AUTH_LOOKUPS_PER_ADDRESS: lookups of new keys one address has in flight at once, default 4
	ListAdvertisementLimit int     // MCPFLEET_LIST_ADVERTISEMENT_LIMIT: largest list page with capability advertisements, default 100
	ListPageBytes          int     // MCPFLEET_LIST_PAGE_BYTES: advertisement bytes of such a page, default 8 MiB

	// MCP is the MCP endpoint for agents at /mcp (service/mcpendpoint.go).
	MCP MCPConfig

	// GET /v1/mcp/events (zero takes the default).
	EventStreams          int           // MCPFLEET_EVENT_STREAMS: streams open at once, all tenants, default 256
	EventStreamsPerTenant int           // MCPFLEET_EVENT_STREAMS_PER_TENANT: default 32, at most EventStreams
	EventStreamsPerKey    int           // MCPFLEET_EVENT_STREAMS_PER_KEY: default 8, at most EventStreamsPerTenant
	EventPollInterval     time.Duration // MCPFLEET_EVENT_POLL_INTERVAL: how often a stream looks for events, default 1s

	// Registration limits (zero takes the default; see limits.go).
	MaxServersPerTenant   int // MCPFLEET_MAX_SERVERS_PER_TENANT: servers of any status in one tenant, default 500,000
	MaxToolsPerServer     int // MCPFLEET_MAX_TOOLS_PER_SERVER: tools one server may advertise or import, default 500
	MaxAdvertisementBytes int // MCPFLEET_MAX_ADVERTISEMENT_BYTES: size of a capability advertisement, default 256 KiB, at most 1 MiB
	MaxCatalogueBytes     int // MCPFLEET_MAX_CATALOGUE_BYTES: bytes of the tools one import writes (names, descriptions, schemas, annotations), default 4 MiB

	// Cluster is cluster mode (service/cluster.go); off, the default, is single-node mode.
	Cluster ClusterConfig

	// TraceSampler and TraceSamplerArg are OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (see
	// telemetry.NewSampler; an invalid one fails the start when traces are exported).
	TraceSampler, TraceSamplerArg string
}

// DefaultMetricsAddr is where every metric is served unless MCPFLEET_METRICS_ADDR says otherwise.
const DefaultMetricsAddr = config.DefaultMetricsAddr

// FromEnv reads the configuration from getenv through one typed reader (config.Env): a variable that
// is unset or blank takes its default (defined once, in package config or the owning package), any
// other value must parse whole as its type and range, and every variable that does not is named in
// the error, with what it expected. Cross-field rules are Validate's.
func FromEnv(getenv func(string) string) (Config, error) {
	e := config.New(getenv)
	c := Config{
		DatabaseURL:         e.String("MCPFLEET_DATABASE_URL", ""),
		AdminDatabaseURL:    e.String("MCPFLEET_ADMIN_DATABASE_URL", ""),
		HTTPAddr:            e.Addr("MCPFLEET_HTTP_ADDR", config.DefaultHTTPAddr),
		HeartbeatInterval:   e.Duration("MCPFLEET_HEARTBEAT_INTERVAL", config.DefaultHeartbeatInterval),
		MonitorInterval:     e.Duration("MCPFLEET_MONITOR_INTERVAL", config.DefaultMonitorInterval),
		StampFlushInterval:  e.Duration("MCPFLEET_STAMP_FLUSH_INTERVAL", config.DefaultStampFlushInterval),
		WriteTimeout:        e.Duration("MCPFLEET_WRITE_TIMEOUT", config.DefaultWriteTimeout),
		AlertWebhookURL:     e.URL("MCPFLEET_ALERT_WEBHOOK_URL"),
		AlertWebhookSecret:  e.String("MCPFLEET_ALERT_WEBHOOK_SECRET", ""),
		TraceExport:         e.String("OTEL_EXPORTER_OTLP_ENDPOINT", "") != "" || e.String("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "") != "",
		DBMaxConns:          int32(e.Int("MCPFLEET_DB_MAX_CONNS", config.DefaultDBMaxConns, 1, 1000)),
		PprofAddr:           e.Addr("MCPFLEET_PPROF_ADDR", ""),
		FlapWindow:          e.Duration("MCPFLEET_FLAP_WINDOW", config.DefaultFlapWindow),
		FlapThreshold:       e.Int("MCPFLEET_FLAP_THRESHOLD", config.DefaultFlapThreshold, 2, 1000),
		MassSilenceFraction: e.Fraction("MCPFLEET_MASS_SILENCE_FRACTION", 0),
		MassSilenceMin:      e.Int("MCPFLEET_MASS_SILENCE_MIN", config.DefaultMassSilenceMin, 1, 1e9),
		SaturationLatency:   e.Duration("MCPFLEET_SATURATION_LATENCY", config.DefaultSaturationLatency),
		UISecureCookies:     e.Bool("MCPFLEET_UI_SECURE_COOKIES", false),
		TraceURL:            e.String("MCPFLEET_TRACE_URL", ""),
		EndpointAllowlist:   splitList(e.String("MCPFLEET_ENDPOINT_ALLOWLIST", "")),
		MCPTimeout:          e.Duration("MCPFLEET_MCP_TIMEOUT", config.DefaultMCPTimeout),
		ProbeConcurrency:    e.Int("MCPFLEET_PROBE_CONCURRENCY", config.DefaultProbeConcurrency, 1, 10000),
		TraceSampler:        e.String("OTEL_TRACES_SAMPLER", ""),
		TraceSamplerArg:     e.String("OTEL_TRACES_SAMPLER_ARG", ""),
	}
	if v := e.String("MCPFLEET_METRICS_ADDR", ""); v == "off" {
		c.MetricsAddr = ""
	} else {
		c.MetricsAddr = e.Addr("MCPFLEET_METRICS_ADDR", config.DefaultMetricsAddr)
	}
	e.Parse("MCPFLEET_TRACE_URL", "an http or https URL with a host holding {trace_id}, like http://jaeger:16686/trace/{trace_id}",
		func(v string) error { _, err := ui.ParseTraceURL(v); return err })
	e.Parse("MCPFLEET_LOG_LEVEL", "debug, info, warn or error", func(v string) error { return c.LogLevel.UnmarshalText([]byte(v)) })
	e.Secret("MCPFLEET_SECRET_KEY", func(v string) (err error) {
		c.SecretKey, err = secrets.ParseKey(v)
		return err
	})
	c.gatewayFromEnv(e)
	c.apiLimitsFromEnv(e)
	c.mcpFromEnv(e)
	c.eventsFromEnv(e)
	c.limitsFromEnv(e)
	c.clusterFromEnv(e)
	err := e.Err()
	if cerrs := c.validateCluster(); len(cerrs) > 0 {
		err = errors.Join(append([]error{err}, cerrs...)...)
	}
	return c, err
}

// Validate checks the settings serve needs.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("MCPFLEET_DATABASE_URL is not set: give the runtime connection, as the app role (e.g. postgres://cyberos_app@127.0.0.1:5432/mcpfleet)"))
	}
	if err := config.CheckAddr(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("MCPFLEET_HTTP_ADDR=%q is not host:port", c.HTTPAddr))
	}
	if c.MetricsAddr != "" && config.CheckAddr(c.MetricsAddr) != nil {
		errs = append(errs, fmt.Errorf("MCPFLEET_METRICS_ADDR=%q is not host:port (or off)", c.MetricsAddr))
	}
	if c.HeartbeatInterval < 10*time.Millisecond || c.HeartbeatInterval > time.Hour {
		errs = append(errs, fmt.Errorf("MCPFLEET_HEARTBEAT_INTERVAL=%s: want 10ms to 1h", c.HeartbeatInterval))
	}
	if c.MonitorInterval < time.Millisecond || c.MonitorInterval > c.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("MCPFLEET_MONITOR_INTERVAL=%s: want 1ms up to the heartbeat interval (%s)", c.MonitorInterval, c.HeartbeatInterval))
	}
	if c.StampFlushInterval <= 0 || c.StampFlushInterval > time.Second {
		errs = append(errs, fmt.Errorf("MCPFLEET_STAMP_FLUSH_INTERVAL=%s: want more than 0 and at most 1s", c.StampFlushInterval))
	}
	if c.WriteTimeout < 100*time.Millisecond || c.WriteTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("MCPFLEET_WRITE_TIMEOUT=%s: want 100ms to 1m", c.WriteTimeout))
	}
	if c.AlertWebhookURL != "" {
		if config.CheckHTTPURL(c.AlertWebhookURL) != nil {
			errs = append(errs, errors.New("MCPFLEET_ALERT_WEBHOOK_URL must be an http or https URL"))
		} else if c.AlertWebhookSecret == "" {
			errs = append(errs, errors.New("MCPFLEET_ALERT_WEBHOOK_SECRET is required with MCPFLEET_ALERT_WEBHOOK_URL: alerts are signed"))
		}
	}
	if _, err := ui.ParseTraceURL(c.TraceURL); err != nil {
		errs = append(errs, fmt.Errorf("MCPFLEET_TRACE_URL=%q: want an http or https URL with a host holding {trace_id} (%v)", c.TraceURL, err))
	}
	errs = append(errs, c.validateMCPClient()...)
	errs = append(errs, c.validateGateway()...)
	errs = append(errs, c.validateEvents()...)
	errs = append(errs, c.validateMCP()...)
	errs = append(errs, c.validateCluster()...)
	return errors.Join(errs...)
}

// apiLimitsFromEnv reads the API's limits into c, each with its default.
func (c *Config) apiLimitsFromEnv(e *config.Env) {
	c.KeyCacheSize = e.Int("MCPFLEET_KEY_CACHE_SIZE", config.DefaultKeyCacheSize, 1000, 1e8)
	c.AuthFailureBurst = e.Int("MCPFLEET_AUTH_FAILURE_BURST", config.DefaultAuthFailureBurst, 1, 1e6)
	c.AuthFailureRate = e.Number("MCPFLEET_AUTH_FAILURE_RATE", config.DefaultAuthFailureRate, 0.001, 1e6)
	c.AuthThrottledAddresses = e.Int("MCPFLEET_AUTH_THROTTLED_ADDRESSES", config.DefaultAuthThrottledAddresses, 16, 1e8)
	c.AuthLookupsPerAddress = e.Int("MCPFLEET_AUTH_LOOKUPS_PER_ADDRESS", config.DefaultAuthLookupsPerAddress, 1, 1000)
	c.ListAdvertisementLimit = e.Int("MCPFLEET_LIST_ADVERTISEMENT_LIMIT", config.DefaultListAdvertisementLimit, 1, 1000)
	c.ListPageBytes = e.Int("MCPFLEET_LIST_PAGE_BYTES", config.DefaultListPageBytes, 64<<10, 1<<30)
}

// apiConfig narrows c into the API's configuration.
func (c Config) apiConfig() httpapi.Config {
	return httpapi.Config{HeartbeatInterval: c.HeartbeatInterval, ListAdvertisementLimit: c.ListAdvertisementLimit,
		ListPageBytes: c.ListPageBytes,
		Auth: httpapi.AuthConfig{KeyCacheSize: c.KeyCacheSize, FailureBurst: c.AuthFailureBurst, FailureRate: c.AuthFailureRate,
			ThrottledAddresses: c.AuthThrottledAddresses, LookupsPerAddress: c.AuthLookupsPerAddress}, Events: c.eventStreamConfig(),
		MaxToolsPerServer: c.MaxToolsPerServer, MaxAdvertisementBytes: c.MaxAdvertisementBytes}
}
