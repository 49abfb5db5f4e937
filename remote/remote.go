// Package remote is what the service does with the MCP servers of its fleet as a client (ADR-154): it
// configures servers an administrator adds by URL, tests a connection, imports a catalogue, switches
// skills on and off, and probes servers that cannot heartbeat.
//
// Every operation against a server opens its own mcpclient.Client with a contact recorder for that
// server. A completed operation is recorded once — last_contact and last_latency_ms, nothing else — and
// reported to the fleet as liveness evidence; a failed one records nothing. The recorder cannot fail the
// operation: its errors are warnings (a stale timestamp), never the answer.
//
// What is stored and what is only shown: a connection test stores its contact time and latency and
// nothing else — the protocol version, the server's self-description and the negotiation path live only
// in the answer, and a failure is stored nowhere (import_status and import_error are never touched by
// it). An import records its outcome (import_status, import_error, last_imported, tool_count, the
// catalogue's cache hint). Credentials are sealed at rest (package secrets) and never returned or
// logged.
package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Transport is the only transport this client speaks: stated, not stored (ADR-154 §5).
const Transport = "streamable_http"

// Limits on configuration input.
const (
	MaxEndpointLen   = 2048
	MaxCredentialLen = 4096
)

// Errors of the service's operations. The HTTP layer maps each to one problem.
var (
	// ErrNoDataClass: the server declares no data class, so it supplies nothing (fail-closed): import
	// is refused. A connection test does not need one.
	ErrNoDataClass = errors.New("the server declares no data class")
	// ErrNoEndpoint: the server has no endpoint to reach.
	ErrNoEndpoint = errors.New("the server has no endpoint")
	// ErrNoSecretKey: a credential was given, or must be opened, but the service has no secret key.
	ErrNoSecretKey = errors.New("no secret key is configured (MCPFLEET_SECRET_KEY)")
	// ErrCredentialUnreadable: the stored credential cannot be opened with the configured key (or for this
	// server's endpoint origin: it was moved there other than through Update).
	ErrCredentialUnreadable = errors.New("the stored credential cannot be opened with the configured secret key")
	// ErrNoCredential: the server's authentication needs a credential and none is stored — Update drops
	// it when the endpoint moves to another origin without a new one.
	ErrNoCredential = errors.New("the server's authentication needs a credential and none is stored")
	// ErrAuthUnsupported: the stored authentication mode is not one this client offers. The error is an
	// *AuthUnsupportedError naming it.
	ErrAuthUnsupported = errors.New("the stored authentication mode is not supported")
)

// AuthUnsupportedError names a stored authentication mode this client does not offer.
type AuthUnsupportedError struct{ Mode string }

func (e *AuthUnsupportedError) Error() string {
	return fmt.Sprintf("%v: %q", ErrAuthUnsupported, e.Mode)
}

// Is makes errors.Is(err, ErrAuthUnsupported) hold.
func (e *AuthUnsupportedError) Is(target error) bool { return target == ErrAuthUnsupported }

// InvalidError is configuration input that cannot be accepted: Field names it (as in the API body),
// Detail says why in a sentence fit for a client. It never contains a credential.
type InvalidError struct {
	Field  string
	Detail string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Detail }

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Store is the persistence the service needs.
type Store interface {
	ServerConfigs(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]persistence.ServerConfig, error)
	GetServerConfig(ctx context.Context, tenantID, serverID uuid.UUID) (persistence.Server, persistence.ServerConfig, error)
	UpdateServerConfig(ctx context.Context, tenantID, serverID uuid.UUID, at time.Time, e persistence.ConfigEdit) (persistence.ConfigUpdate, error)
	DecideConfigChange(ctx context.Context, tenantID, serverID, changeID uuid.UUID, by persistence.Actor, confirm bool, at time.Time) (persistence.ConfigDecision, error)
	RecordContact(ctx context.Context, tenantID, serverID uuid.UUID, at time.Time, latency time.Duration) error
	RecordImportFailure(ctx context.Context, tenantID, serverID uuid.UUID, reason string, at time.Time, traceID string) error
	ApplyImport(ctx context.Context, tenantID, serverID uuid.UUID, tools []persistence.Tool, ttl time.Duration, at time.Time, by uuid.UUID, traceID string) (persistence.SkillChanges, error)
	SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool, at time.Time) (persistence.Skill, bool, error)
	ProbeTargets(ctx context.Context) ([]persistence.ProbeTarget, error)
	LegacyCredentials(ctx context.Context) ([]persistence.LegacyCredential, error)
	ReplaceCredential(ctx context.Context, tenantID, serverID uuid.UUID, endpoint string, old, sealed []byte) (bool, error)
}

// Fleet is what the service needs of the actor system.
type Fleet interface {
	Configure(ctx context.Context, req actors.ConfigureRequest) (persistence.Server, error)
	Contact(ctx context.Context, tenantID, serverID uuid.UUID, trc telemetry.Carrier) (health.Status, error)
}

var (
	_ Store = (*persistence.Store)(nil)
	_ Fleet = (*actors.Fleet)(nil)
)

// Config configures the service. Zero values take the documented defaults.
type Config struct {
	// AllowHosts are the endpoint policy's exceptions for loopback, link-local and private hosts
	// (MCPFLEET_ENDPOINT_ALLOWLIST); see mcpclient.EndpointPolicy.
	AllowHosts []string
	// Timeout bounds each operation (handshake, catalogue walk); default 15 s.
	Timeout time.Duration
	// MaxResponseBytes caps each response; default 2 MiB.
	MaxResponseBytes int64
	// ProbeInterval is how often probe servers are probed: the heartbeat interval H; default 10 s.
	ProbeInterval time.Duration
	// ProbeConcurrency bounds how many probes run at once; default 32.
	ProbeConcurrency int
	// ClientVersion is sent in clientInfo.
	ClientVersion string
	// MaxToolsPerServer caps the tools an import may write (MCPFLEET_MAX_TOOLS_PER_SERVER); a larger
	// catalogue is refused whole (*TooManyToolsError), never trimmed. 0: no limit.
	MaxToolsPerServer int
	// MaxCatalogueBytes caps the bytes of the tools an import may write — names, descriptions, input
	// schemas and annotations, as stored (MCPFLEET_MAX_CATALOGUE_BYTES); a larger catalogue is refused
	// whole (*CatalogueTooLargeError), never trimmed. 0: no limit.
	MaxCatalogueBytes int
}

// CatalogueTooLargeError refuses an import whose importable tools take more bytes than the limit.
type CatalogueTooLargeError struct{ Bytes, Max int }

func (e *CatalogueTooLargeError) Error() string {
	return fmt.Sprintf("the catalogue's importable tools take %d bytes, more than the limit of %d", e.Bytes, e.Max)
}

// TooManyToolsError refuses an import whose catalogue has more importable tools than the limit.
type TooManyToolsError struct{ Tools, Max int }

func (e *TooManyToolsError) Error() string {
	return fmt.Sprintf("the catalogue has %d importable tools, more than the limit of %d per server", e.Tools, e.Max)
}

// Deps are the service's collaborators.
type Deps struct {
	Store Store
	Fleet Fleet
	// Key seals credentials; nil means none is configured, and a credential can be neither stored nor
	// used (ErrNoSecretKey).
	Key *secrets.Key
	Log *slog.Logger
	// Clock is the wall clock for last_imported and freshness; default health.RealClock.
	Clock health.Clock
	// Observer traces and counts each MCP operation; nil records nothing.
	Observer *telemetry.MCPObserver
}

// Service is the client side of the fleet. It is safe for concurrent use.
type Service struct {
	cfg    Config
	store  Store
	fleet  Fleet
	key    *secrets.Key
	log    *slog.Logger
	clock  health.Clock
	policy mcpclient.EndpointPolicy
	obs    *telemetry.MCPObserver
	probes *prober
}

// New returns the service. It starts nothing: see StartProbing.
func New(cfg Config, deps Deps) *Service {
	cfg.Timeout = config.Or(cfg.Timeout, config.DefaultMCPTimeout)
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = mcpclient.DefaultMaxResponseBytes
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = config.DefaultHeartbeatInterval
	}
	if cfg.ProbeConcurrency <= 0 {
		cfg.ProbeConcurrency = config.DefaultProbeConcurrency
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = health.RealClock{}
	}
	s := &Service{
		cfg: cfg, store: deps.Store, fleet: deps.Fleet, key: deps.Key, log: deps.Log, clock: deps.Clock,
		policy: mcpclient.EndpointPolicy{Allow: cfg.AllowHosts}, obs: deps.Observer,
	}
	s.probes = newProber(s)
	return s
}

// CheckEndpoint checks raw against the endpoint policy (http or https only, no credentials in the URL,
// loopback, link-local and private addresses only when allow-listed) and returns it normalised. Errors
// are *InvalidError for input that is not a URL at all, or wrap mcpclient.ErrEndpointRefused (an
// *mcpclient.EndpointError whose message is fit for a client).
func (s *Service) CheckEndpoint(ctx context.Context, raw string) (string, error) {
	if len(raw) > MaxEndpointLen {
		return "", invalid("endpoint", "the endpoint URL must be at most %d characters", MaxEndpointLen)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := s.policy.Check(ctx, raw)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// credentialAD is the associated data a server's credential is sealed to: its tenant, its server and the
// origin (scheme, host, port) of its endpoint. A sealed credential copied to another server's row, or
// another tenant's, or left on a row whose endpoint was moved to another origin, does not open; another
// path on the same origin keeps it.
func credentialAD(tenantID, serverID uuid.UUID, endpoint string) []byte {
	return []byte("mcpfleet/server_config.credential/v2/" + tenantID.String() + "/" + serverID.String() + "/" + originOf(endpoint))
}

// legacyCredentialAD is what a credential of the legacy format was sealed to: tenant and server only.
func legacyCredentialAD(tenantID, serverID uuid.UUID) []byte {
	return []byte("mcpfleet/server_config.credential/" + tenantID.String() + "/" + serverID.String())
}

// originOf is the origin of a stored endpoint, "" for none. A stored endpoint that is not a URL the
// policy accepts (it was checked when stored) binds to its own text.
func originOf(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	o, err := mcpclient.Origin(endpoint)
	if err != nil {
		return "unparsed:" + endpoint
	}
	return o
}

// Description is what the read side shows of a server beyond its mcp_servers row.
type Description struct {
	Config persistence.ServerConfig
	// LastProbe is the last probe's outcome, held in memory only (nil when the server has not been
	// probed since the service started).
	LastProbe *ProbeResult
}

// Describe returns the description of each of ids that exists in tenantID.
func (s *Service) Describe(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]Description, error) {
	cfgs, err := s.store.ServerConfigs(ctx, tenantID, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]Description, len(cfgs))
	for id, c := range cfgs {
		out[id] = Description{Config: c, LastProbe: s.probes.lastResult(id)}
	}
	return out, nil
}

// wallNow is the wall time to store, at PostgreSQL's precision (so an answer and the row agree).
func (s *Service) wallNow() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// endpointHost is the host of a stored endpoint, for logs.
func endpointHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
