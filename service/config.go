package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/secrets"
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
	UISecureCookies     bool          // MCPFLEET_UI_SECURE_COOKIES: dashboard cookies Secure and __Host- named behind a TLS proxy

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
	ListAdvertisementLimit int     // MCPFLEET_LIST_ADVERTISEMENT_LIMIT: largest list page with capability advertisements, default 100

	// MCP is the MCP endpoint for agents at /mcp (service/mcpendpoint.go).
	MCP MCPConfig

	// TraceSampler and TraceSamplerArg are OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (see
	// telemetry.NewSampler; an invalid one fails the start when traces are exported).
	TraceSampler, TraceSamplerArg string
}

// DefaultMetricsAddr is where every metric is served unless MCPFLEET_METRICS_ADDR says otherwise:
// loopback, the port commonly used for OpenTelemetry's Prometheus exporter.
const DefaultMetricsAddr = "127.0.0.1:9464"

// FromEnv reads the configuration from getenv, applies defaults and validates it.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL:        getenv("MCPFLEET_DATABASE_URL"),
		AdminDatabaseURL:   getenv("MCPFLEET_ADMIN_DATABASE_URL"),
		HTTPAddr:           or(getenv("MCPFLEET_HTTP_ADDR"), "127.0.0.1:8080"),
		AlertWebhookURL:    getenv("MCPFLEET_ALERT_WEBHOOK_URL"),
		AlertWebhookSecret: getenv("MCPFLEET_ALERT_WEBHOOK_SECRET"),
		TraceExport:        getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "",
		DBMaxConns:         8,
	}
	c.TraceSampler, c.TraceSamplerArg = getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")
	var errs []error
	dur := func(name string, def time.Duration, dst *time.Duration) {
		v := getenv(name)
		if v == "" {
			*dst = def
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a duration (like 10s or 500ms)", name, v))
			return
		}
		*dst = d
	}
	dur("MCPFLEET_HEARTBEAT_INTERVAL", 10*time.Second, &c.HeartbeatInterval)
	dur("MCPFLEET_MONITOR_INTERVAL", 5*time.Second, &c.MonitorInterval)
	dur("MCPFLEET_STAMP_FLUSH_INTERVAL", 500*time.Millisecond, &c.StampFlushInterval)
	dur("MCPFLEET_WRITE_TIMEOUT", 5*time.Second, &c.WriteTimeout)
	dur("MCPFLEET_FLAP_WINDOW", 15*time.Minute, &c.FlapWindow)
	c.PprofAddr = getenv("MCPFLEET_PPROF_ADDR")
	switch v := strings.TrimSpace(getenv("MCPFLEET_METRICS_ADDR")); v {
	case "":
		c.MetricsAddr = DefaultMetricsAddr
	case "off":
	default:
		c.MetricsAddr = v
	}
	num := func(name string, def, lo, hi float64, dst *float64) {
		*dst = def
		if v := getenv(name); v != "" {
			if _, err := fmt.Sscan(v, dst); err != nil || *dst < lo || *dst > hi {
				errs = append(errs, fmt.Errorf("%s=%q: want a number from %g to %g", name, v, lo, hi))
			}
		}
	}
	var flapThreshold, msMin float64
	num("MCPFLEET_FLAP_THRESHOLD", 4, 2, 1000, &flapThreshold)
	num("MCPFLEET_MASS_SILENCE_FRACTION", 0, 0, 1, &c.MassSilenceFraction)
	num("MCPFLEET_MASS_SILENCE_MIN", 10, 1, 1e9, &msMin)
	c.FlapThreshold, c.MassSilenceMin = int(flapThreshold), int(msMin)
	if v := getenv("MCPFLEET_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("MCPFLEET_LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	if v := getenv("MCPFLEET_UI_SECURE_COOKIES"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("MCPFLEET_UI_SECURE_COOKIES=%q: want true or false", v))
		}
		c.UISecureCookies = b
	}
	if v := getenv("MCPFLEET_DB_MAX_CONNS"); v != "" {
		var n int32
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 || n > 1000 {
			errs = append(errs, fmt.Errorf("MCPFLEET_DB_MAX_CONNS=%q: want a number from 1 to 1000", v))
		}
		c.DBMaxConns = n
	}
	dur("MCPFLEET_MCP_TIMEOUT", 15*time.Second, &c.MCPTimeout)
	c.EndpointAllowlist = splitList(getenv("MCPFLEET_ENDPOINT_ALLOWLIST"))
	if v := getenv("MCPFLEET_SECRET_KEY"); v != "" {
		k, err := secrets.ParseKey(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("MCPFLEET_SECRET_KEY: %w", err))
		}
		c.SecretKey = k
	}
	if v := getenv("MCPFLEET_PROBE_CONCURRENCY"); v != "" {
		if _, err := fmt.Sscan(v, &c.ProbeConcurrency); err != nil || c.ProbeConcurrency < 1 || c.ProbeConcurrency > 10000 {
			errs = append(errs, fmt.Errorf("MCPFLEET_PROBE_CONCURRENCY=%q: want a number from 1 to 10000", v))
		}
	}
	errs = append(errs, c.gatewayFromEnv(getenv)...)
	errs = append(errs, c.apiLimitsFromEnv(getenv)...)
	errs = append(errs, c.mcpFromEnv(getenv)...)
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, nil
}

// Validate checks the settings serve needs.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("MCPFLEET_DATABASE_URL is not set: give the runtime connection, as the app role (e.g. postgres://cyberos_app@127.0.0.1:5432/mcpfleet)"))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("MCPFLEET_HTTP_ADDR=%q is not host:port", c.HTTPAddr))
	}
	if _, _, err := net.SplitHostPort(c.MetricsAddr); c.MetricsAddr != "" && err != nil {
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
		u, err := url.Parse(c.AlertWebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("MCPFLEET_ALERT_WEBHOOK_URL must be an http or https URL"))
		} else if c.AlertWebhookSecret == "" {
			errs = append(errs, errors.New("MCPFLEET_ALERT_WEBHOOK_SECRET is required with MCPFLEET_ALERT_WEBHOOK_URL: alerts are signed"))
		}
	}
	errs = append(errs, c.validateMCPClient()...)
	errs = append(errs, c.validateGateway()...)
	errs = append(errs, c.validateMCP()...)
	return errors.Join(errs...)
}

func or(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return v
}

// apiLimitsFromEnv reads the API's limits into c, each with its default.
func (c *Config) apiLimitsFromEnv(getenv func(string) string) []error {
	var errs []error
	num := func(name string, def, lo, hi float64) float64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		var n float64
		if _, err := fmt.Sscan(v, &n); err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s=%q: want a number from %g to %g", name, v, lo, hi))
		}
		return n
	}
	c.KeyCacheSize = int(num("MCPFLEET_KEY_CACHE_SIZE", httpapi.DefaultKeyCacheSize, 1000, 1e8))
	c.AuthFailureBurst = int(num("MCPFLEET_AUTH_FAILURE_BURST", httpapi.DefaultFailureBurst, 1, 1e6))
	c.AuthFailureRate = num("MCPFLEET_AUTH_FAILURE_RATE", httpapi.DefaultFailureRate, 0.001, 1e6)
	c.AuthThrottledAddresses = int(num("MCPFLEET_AUTH_THROTTLED_ADDRESSES", httpapi.DefaultThrottledAddresses, 16, 1e8))
	c.ListAdvertisementLimit = int(num("MCPFLEET_LIST_ADVERTISEMENT_LIMIT", httpapi.DefaultListAdvertisementLimit, 1, 1000))
	return errs
}

// apiConfig narrows c into the API's configuration.
func (c Config) apiConfig() httpapi.Config {
	return httpapi.Config{HeartbeatInterval: c.HeartbeatInterval, ListAdvertisementLimit: c.ListAdvertisementLimit,
		Auth: httpapi.AuthConfig{KeyCacheSize: c.KeyCacheSize, FailureBurst: c.AuthFailureBurst, FailureRate: c.AuthFailureRate,
			ThrottledAddresses: c.AuthThrottledAddresses}}
}
