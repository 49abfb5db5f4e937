// Package config is mcpfleet's one typed reader of environment values and the one place the
// defaults of the service's settings are defined. It reads no environment itself: the command
// hands service.FromEnv a getenv function, which wraps it in an Env.
//
// A variable that is unset, empty or only white space takes its default; any other value must parse
// completely as its type and fall in its range, or the Env records an error naming the variable, the
// value and what was expected. Packages that keep a zero-value fallback (for tests constructing a
// config by hand) fall back to the constants below through Or, so a default is never stated twice.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The defaults of mcpfleet's settings, each stated here and nowhere else (the variable each one
// backs is named beside it; a default without a variable is an internal setting a test may change).
// Every package that keeps a zero-value fallback for a config built by hand falls back to these.
const (
	DefaultHTTPAddr           = "127.0.0.1:8080"       // MCPFLEET_HTTP_ADDR
	DefaultMetricsAddr        = "127.0.0.1:9464"       // MCPFLEET_METRICS_ADDR: loopback, the port of OpenTelemetry's Prometheus exporter
	DefaultHeartbeatInterval  = 10 * time.Second       // MCPFLEET_HEARTBEAT_INTERVAL (H); also the probe period and what a refusal of a down server suggests waiting
	DefaultMonitorInterval    = 5 * time.Second        // MCPFLEET_MONITOR_INTERVAL
	DefaultStampFlushInterval = 500 * time.Millisecond // MCPFLEET_STAMP_FLUSH_INTERVAL
	DefaultWriteTimeout       = 5 * time.Second        // MCPFLEET_WRITE_TIMEOUT
	DefaultFlapWindow         = 15 * time.Minute       // MCPFLEET_FLAP_WINDOW
	DefaultFlapThreshold      = 4                      // MCPFLEET_FLAP_THRESHOLD
	DefaultMassSilenceMin     = 10                     // MCPFLEET_MASS_SILENCE_MIN
	DefaultDBMaxConns         = 8                      // MCPFLEET_DB_MAX_CONNS
	DefaultProbeConcurrency   = 32                     // MCPFLEET_PROBE_CONCURRENCY
	DefaultMCPTimeout         = 15 * time.Second       // MCPFLEET_MCP_TIMEOUT: one deadline per MCP operation
)

// The defaults of the actor system's internal settings (package actors).
const (
	DefaultStampBatchMax     = 5000                  // a heartbeat stamp window flushes early at this many servers
	DefaultWriterMaxBatch    = 256                   // durable commands per group commit
	DefaultWriterMaxPending  = 10_000                // queued durable requests before back-pressure
	DefaultSaturationLatency = 25 * time.Millisecond // MCPFLEET_SATURATION_LATENCY: p99 wait for a CPU from which first registrations wait
	DefaultReconcileInterval = time.Minute           // skill reconciliation period
	DefaultAlertInterval     = 5 * time.Second       // alert outbox sweep period
)

// The defaults of the registration limits: a tenant of 250,000 servers, each advertising a few
// hundred tools, fits in them.
const (
	DefaultMaxServersPerTenant   = 500_000   // MCPFLEET_MAX_SERVERS_PER_TENANT
	DefaultMaxToolsPerServer     = 500       // MCPFLEET_MAX_TOOLS_PER_SERVER
	DefaultMaxAdvertisementBytes = 256 << 10 // MCPFLEET_MAX_ADVERTISEMENT_BYTES
	DefaultMaxCatalogueBytes     = 4 << 20   // MCPFLEET_MAX_CATALOGUE_BYTES: the tools one import may write
)

// The defaults of the API (package httpapi): key checks and GET /v1/mcp/events.
const (
	DefaultKeyCacheSize           = 300_000 // MCPFLEET_KEY_CACHE_SIZE: every module key of a 250,000-server tenant
	DefaultAuthFailureBurst       = 30      // MCPFLEET_AUTH_FAILURE_BURST
	DefaultAuthFailureRate        = 2.0     // MCPFLEET_AUTH_FAILURE_RATE, per second
	DefaultAuthThrottledAddresses = 65_536  // MCPFLEET_AUTH_THROTTLED_ADDRESSES
	DefaultListAdvertisementLimit = 100     // MCPFLEET_LIST_ADVERTISEMENT_LIMIT
	DefaultListPageBytes          = 8 << 20 // MCPFLEET_LIST_PAGE_BYTES: advertisement bytes of one list page

	DefaultAuthLookupsPerAddress = 4               // MCPFLEET_AUTH_LOOKUPS_PER_ADDRESS
	DefaultAuthLookupWait        = 5 * time.Second // how long a request waits for its address's lookup slot

	DefaultEventStreams          = 256              // MCPFLEET_EVENT_STREAMS
	DefaultEventStreamsPerTenant = 32               // MCPFLEET_EVENT_STREAMS_PER_TENANT
	DefaultEventStreamsPerKey    = 8                // MCPFLEET_EVENT_STREAMS_PER_KEY
	DefaultEventPollInterval     = time.Second      // MCPFLEET_EVENT_POLL_INTERVAL
	DefaultEventKeepAlive        = 15 * time.Second // comment line interval of a stream
	DefaultEventMaxReplay        = 10_000           // events a reconnecting client may be sent
	DefaultEventRecheck          = time.Minute      // how often a stream's key or session is checked again
	DefaultEventWriteWait        = 10 * time.Second // deadline of each write of a stream
)

// The defaults of the tool-call gateway (package gateway).
const (
	DefaultMaxCallsPerRun       = 20               // MCPFLEET_MAX_CALLS_PER_RUN
	DefaultApprovalWindow       = 15 * time.Minute // MCPFLEET_APPROVAL_WINDOW
	DefaultCallsPerServer       = 4                // MCPFLEET_CALLS_PER_SERVER
	DefaultCallWait             = 25 * time.Second // how long a request waits for its call: inside the HTTP server's write timeout
	DefaultApprovalSweep        = 30 * time.Second // how often approval windows are checked
	DefaultCallShutdownGrace    = 5 * time.Second  // how long a stopping gateway lets calls in flight finish
	DefaultCallQueueTimeout     = DefaultMCPTimeout
	DefaultUnavailableRetryWait = DefaultHeartbeatInterval // what a refusal of an unhealthy server's tool suggests waiting
)

// The defaults of the MCP endpoint at /mcp (package mcpendpoint).
const (
	DefaultMCPSessionsPerKey = 32                     // MCPFLEET_MCP_SESSIONS_PER_KEY
	DefaultMCPStreamsPerKey  = 64                     // MCPFLEET_MCP_STREAMS_PER_KEY
	DefaultMCPPollInterval   = 250 * time.Millisecond // how often each tenant's tools are read
	DefaultMCPMaxBodyBytes   = 1 << 20                // a request body
	DefaultMCPSessionIdle    = 30 * time.Minute       // a session that sent nothing for this long is closed
	DefaultMCPWaitPoll       = 250 * time.Millisecond // how often a waiting call is read again
	DefaultMCPProgressEvery  = 5 * time.Second        // how often a waiting call sends a progress notification
)

// Or returns v when it is more than zero and def otherwise: the zero-value fallback of a package's
// config built by hand (a negative value, which the service's Validate refuses, falls back too).
func Or[T int | int64 | float64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Env reads typed values through getenv and collects one error per variable that does not parse.
// It is not safe for concurrent use.
type Env struct {
	getenv func(string) string
	errs   []error
}

// New returns an Env reading through getenv.
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Err returns every error recorded so far, joined, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// lookup returns the trimmed value of name and whether it is set to something other than blanks.
func (e *Env) lookup(name string) (string, bool) {
	v := strings.TrimSpace(e.getenv(name))
	return v, v != ""
}

func (e *Env) fail(name, v, want string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q: want %s", name, v, want))
}

// String returns the trimmed value of name, or def when it is unset.
func (e *Env) String(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// Duration returns name as a Go duration (like 10s or 500ms) no shorter than 0, or def when unset.
// Ranges beyond that are the settings' own (see service.Config.Validate), since flags set them too.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.fail(name, v, "a duration that is not negative (like 10s or 500ms)")
		return def
	}
	return d
}

// Int returns name as a whole number from lo to hi, or def when unset. "4.5", "4x" and "1e3" are
// refused, never truncated.
func (e *Env) Int(name string, def, lo, hi int) int {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e.fail(name, v, fmt.Sprintf("a whole number from %d to %d", lo, hi))
		return def
	}
	return n
}

// Number returns name as a decimal number from lo to hi, or def when unset.
func (e *Env) Number(name string, def, lo, hi float64) float64 {
	return e.float(name, def, lo, hi, fmt.Sprintf("a number from %g to %g", lo, hi))
}

// Fraction returns name as a number from 0 to 1, or def when unset.
func (e *Env) Fraction(name string, def float64) float64 {
	return e.float(name, def, 0, 1, "a fraction from 0 to 1 (like 0.25)")
}

func (e *Env) float(name string, def, lo, hi float64, want string) float64 {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= lo && f <= hi) { // NaN fails both comparisons
		e.fail(name, v, want)
		return def
	}
	return f
}

// Bool returns name as true or false (also 1/0, t/f), or def when unset.
func (e *Env) Bool(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, v, "true or false")
		return def
	}
	return b
}

// Addr returns name as a listen address host:port, or def when unset.
func (e *Env) Addr(name, def string) string {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	if err := CheckAddr(v); err != nil {
		e.fail(name, v, "host:port")
		return def
	}
	return v
}

// URL returns name as an absolute http or https URL, or "" when unset.
func (e *Env) URL(name string) string {
	v, ok := e.lookup(name)
	if !ok {
		return ""
	}
	if err := CheckHTTPURL(v); err != nil {
		e.fail(name, v, "an http or https URL")
		return ""
	}
	return v
}

// Parse hands the value of name to parse when it is set, recording parse's error under name with
// want as what was expected. It is for the types of one setting (a log level, a key).
func (e *Env) Parse(name, want string, parse func(string) error) {
	v, ok := e.lookup(name)
	if !ok {
		return
	}
	if err := parse(v); err != nil {
		e.fail(name, v, want)
	}
}

// Secret hands the value of name to parse when it is set, recording parse's error under name without
// the value, which must not reach a log.
func (e *Env) Secret(name string, parse func(string) error) {
	if v, ok := e.lookup(name); ok {
		if err := parse(v); err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
		}
	}
}

// CheckAddr reports whether v is host:port with a port.
func CheckAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err == nil && port == "" {
		err = errors.New("missing port")
	}
	return err
}

// CheckHTTPURL reports whether v is an absolute http or https URL with a host.
func CheckHTTPURL(v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an http or https URL with a host")
	}
	return nil
}
