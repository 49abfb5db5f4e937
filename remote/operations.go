package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// Operation names, for logs.
const (
	opTestConnection = "test_connection"
	opImport         = "import"
	opProbe          = "probe"
)

// client builds the Client for one operation against the server configured by c, with a fresh contact
// recorder for that server. The credential is opened here and lives only in the Client.
func (s *Service) client(c persistence.ServerConfig, op string, timeout time.Duration) (*mcpclient.Client, *contactRecorder, error) {
	if c.Endpoint == "" {
		return nil, nil, ErrNoEndpoint
	}
	var auth mcpclient.Auth
	switch c.AuthMode {
	case persistence.AuthModeNone:
	case persistence.AuthModeBearer, persistence.AuthModeHeader:
		if c.Credential == nil {
			return nil, nil, ErrNoCredential
		}
		if s.key == nil {
			return nil, nil, ErrNoSecretKey
		}
		cred, err := s.key.Open(c.Credential, credentialAD(c.TenantID, c.ServerID, c.Endpoint))
		if err != nil {
			return nil, nil, ErrCredentialUnreadable
		}
		auth = mcpclient.Auth{Mode: mcpclient.AuthMode(c.AuthMode), HeaderName: c.AuthHeaderName, Credential: string(cred)}
	default:
		// Never fall back to another placement: the operator must see and fix the stored value.
		return nil, nil, &AuthUnsupportedError{Mode: c.AuthMode}
	}
	rec := &contactRecorder{s: s, tenantID: c.TenantID, serverID: c.ServerID, op: op}
	cl, err := mcpclient.New(mcpclient.Config{
		Endpoint: c.Endpoint, Auth: auth, Timeout: timeout, MaxResponseBytes: s.cfg.MaxResponseBytes,
		AllowHosts: s.cfg.AllowHosts, ClientVersion: s.cfg.ClientVersion,
		Logger: s.log.With("component", "mcpclient", "server_id", c.ServerID.String()),
	}, rec)
	if err != nil {
		if errors.Is(err, mcpclient.ErrEndpointRefused) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("mcp client for %s: %w", c.ServerID, err)
	}
	return cl, rec, nil
}

// contactRecorder is the mcpclient.Recorder of one operation against one server: it stamps last_contact
// and last_latency_ms, reports the contact to the fleet as liveness evidence, and remembers what it was
// told for the operation's answer. Neither failure can fail the operation: each is a warning.
type contactRecorder struct {
	s        *Service
	tenantID uuid.UUID
	serverID uuid.UUID
	op       string

	mu      sync.Mutex
	at      time.Time
	latency time.Duration
}

var _ mcpclient.Recorder = (*contactRecorder)(nil)

// RecordContact implements mcpclient.Recorder.
func (r *contactRecorder) RecordContact(ctx context.Context, at time.Time, latency time.Duration) {
	at = at.UTC().Truncate(time.Microsecond) // what PostgreSQL stores, so the answer and the row agree
	r.mu.Lock()
	r.at, r.latency = at, latency
	r.mu.Unlock()
	log := r.s.log
	shield := func(what string) {
		if p := recover(); p != nil {
			log.ErrorContext(ctx, "contact recording panicked", "part", what, "server_id", r.serverID, "panic", p)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer shield("evidence")
		if _, err := r.s.fleet.Contact(ctx, r.tenantID, r.serverID, telemetry.CarrierFrom(ctx)); err != nil && !errors.Is(err, actors.ErrDeregistered) {
			log.WarnContext(ctx, "contact not counted as liveness evidence", "server_id", r.serverID, "operation", r.op, "err", err)
		}
	})
	wg.Go(func() {
		defer shield("stamp")
		if err := r.s.store.RecordContact(ctx, r.tenantID, r.serverID, at, latency); err != nil {
			log.WarnContext(ctx, "last contact not recorded; the stored contact stays stale", "server_id", r.serverID, "operation", r.op, "err", err)
		}
	})
	wg.Wait()
}

// contact returns what the recorder was told, if anything.
func (r *contactRecorder) contact() (time.Time, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.latency
}

// ConnectionReport is the answer of a connection test. Everything but LastContact and LatencyMS lives
// only here: the protocol version, the self-description (written by the far side: show it as text) and
// the negotiation path are stored nowhere, and neither is a failure.
type ConnectionReport struct {
	Reachable       bool
	LatencyMS       int64
	ProtocolVersion string
	ServerInfo      mcpclient.ServerInfo
	NegotiationPath string
	LastContact     time.Time
	FailureClass    mcpclient.Class
	Reason          string
}

// TestConnection performs the MCP handshake with one server of tenantID and stops. A far side that fails
// is a report with Reachable false, not an error; errors are about this side (no such server, no
// endpoint, an unreadable credential, an endpoint the policy now refuses).
func (s *Service) TestConnection(ctx context.Context, tenantID, serverID uuid.UUID) (ConnectionReport, error) {
	srv, cfg, err := s.store.GetServerConfig(ctx, tenantID, serverID)
	if err != nil {
		return ConnectionReport{}, err
	}
	cl, rec, err := s.client(cfg, opTestConnection, s.cfg.Timeout)
	if err != nil {
		return ConnectionReport{}, err
	}
	defer cl.CloseIdleConnections()
	octx, op := s.obs.Start(ctx, telemetry.MCPHandshake, srv.TenantID, srv.ModuleName, "")
	rep, err := cl.Handshake(octx)
	op.End(octx, err)
	if err != nil {
		var me *mcpclient.Error
		if !errors.As(err, &me) {
			return ConnectionReport{}, err
		}
		s.log.InfoContext(ctx, "connection test failed", "server_id", serverID, "host", endpointHost(cfg.Endpoint), "failure_class", me.Class)
		return ConnectionReport{FailureClass: me.Class, Reason: me.Reason}, nil
	}
	at, _ := rec.contact()
	s.log.InfoContext(ctx, "connection test succeeded", "server_id", serverID, "host", endpointHost(cfg.Endpoint),
		"latency_ms", rep.LatencyMS, "negotiation_path", rep.NegotiationPath)
	return ConnectionReport{
		Reachable: true, LatencyMS: rep.LatencyMS, ProtocolVersion: rep.ProtocolVersion, ServerInfo: rep.ServerInfo,
		NegotiationPath: rep.NegotiationPath, LastContact: at,
	}, nil
}

// SkippedTool is a tool an import did not take, and why.
type SkippedTool struct {
	Name   string
	Reason string
}

// ImportReport is the answer of a catalogue import.
type ImportReport struct {
	ImportStatus string // succeeded or failed
	// ToolCount is the number of tools in the catalogue as it now stands (after a failure: as the last
	// successful import left it).
	ToolCount             int
	Added, Kept, Orphaned int
	// Changed tools had a new definition (description, input schema or annotations); Disabled of them
	// were enabled and are now disabled until an operator enables them again.
	Changed, Disabled    int
	Skipped              []SkippedTool
	ImportError          string          // failed only
	FailureClass         mcpclient.Class // failed only
	LastImported         time.Time
	CatalogueTTL         time.Duration
	CatalogueFreshUntil  *time.Time
	LastContact          time.Time // succeeded only
	LastContactLatencyMS int64     // succeeded only
}

// Limits on imported tools (the same as on advertised tools at registration).
const (
	maxToolName    = 128
	maxDescription = 8 << 10
)

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Import reads the whole catalogue of one server of tenantID and writes it: tools whose schema is in
// the supported subset are upserted (new ones disabled, kept ones keep their enabled flag, vanished
// ones orphaned), the others are skipped with their reason. A server without a data class is refused
// before anything is sent (ErrNoDataClass), and so is a self-registered server, whose catalogue is its
// advertisement (persistence.ErrCatalogueSource). A far side that fails is recorded (import_status
// failed, import_error) and answered as a report, not an error. by is the key importing, recorded with
// any tool whose definition changed.
func (s *Service) Import(ctx context.Context, tenantID, serverID, by uuid.UUID) (ImportReport, error) {
	srv, cfg, err := s.store.GetServerConfig(ctx, tenantID, serverID)
	if err != nil {
		return ImportReport{}, err
	}
	if cfg.Origin != persistence.OriginAdmin {
		return ImportReport{}, persistence.ErrCatalogueSource
	}
	if cfg.DataClass == "" {
		return ImportReport{}, ErrNoDataClass
	}
	cl, rec, err := s.client(cfg, opImport, s.cfg.Timeout)
	if err != nil {
		return ImportReport{}, err
	}
	defer cl.CloseIdleConnections()
	octx, op := s.obs.Start(ctx, telemetry.MCPListTools, srv.TenantID, srv.ModuleName, "")
	cat, err := cl.ListTools(octx)
	op.End(octx, err)
	// The far side has answered (or failed): what it said is written even if the caller went away.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	now := s.wallNow()
	if err != nil {
		var me *mcpclient.Error
		if !errors.As(err, &me) {
			return ImportReport{}, err
		}
		if err := s.store.RecordImportFailure(wctx, tenantID, serverID, me.Error(), now, telemetry.TraceID(ctx)); err != nil {
			return ImportReport{}, err
		}
		s.log.InfoContext(ctx, "catalogue import failed", "server_id", serverID, "host", endpointHost(cfg.Endpoint), "failure_class", me.Class)
		return ImportReport{
			ImportStatus: persistence.ImportFailed, ToolCount: cfg.ToolCount, Skipped: []SkippedTool{},
			ImportError: me.Error(), FailureClass: me.Class, LastImported: now,
			CatalogueTTL: cfg.CatalogueTTL, CatalogueFreshUntil: cfg.CatalogueFreshUntil,
		}, nil
	}
	tools, skipped := importable(cat)
	if max := s.cfg.MaxToolsPerServer; max > 0 && len(tools) > max {
		return ImportReport{}, &TooManyToolsError{Tools: len(tools), Max: max}
	}
	if max := s.cfg.MaxCatalogueBytes; max > 0 {
		if n := catalogueBytes(tools); n > max {
			return ImportReport{}, &CatalogueTooLargeError{Bytes: n, Max: max}
		}
	}
	ch, err := s.store.ApplyImport(wctx, tenantID, serverID, tools, cat.TTL, now, by, telemetry.TraceID(ctx))
	if err != nil {
		return ImportReport{}, err
	}
	at, latency := rec.contact()
	rep := ImportReport{
		ImportStatus: persistence.ImportSucceeded, ToolCount: len(tools), Added: ch.Added, Kept: ch.Kept,
		Orphaned: ch.Orphaned, Changed: ch.Changed, Disabled: ch.Disabled, Skipped: skipped, LastImported: now, CatalogueTTL: cat.TTL,
		LastContact: at, LastContactLatencyMS: latency.Milliseconds(),
	}
	if cat.TTL > 0 {
		fresh := now.Add(cat.TTL)
		rep.CatalogueFreshUntil = &fresh
	}
	s.log.InfoContext(ctx, "catalogue imported", "server_id", serverID, "host", endpointHost(cfg.Endpoint), "pages", cat.Pages,
		"tools", len(tools), "added", ch.Added, "kept", ch.Kept, "orphaned", ch.Orphaned, "skipped", len(skipped))
	return rep, nil
}

// catalogueBytes is what tools take as stored: names, descriptions, input schemas and annotations.
func catalogueBytes(tools []persistence.Tool) int {
	n := 0
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema) + len(t.Annotations)
	}
	return n
}

// importable splits a catalogue into the tools to write and the tools skipped, with reasons: a schema
// outside the supported subset (mcpclient.Catalogue.Importable), a name the registry cannot hold, a
// description longer than registration allows. A tool is skipped, never weakened.
func importable(cat mcpclient.Catalogue) ([]persistence.Tool, []SkippedTool) {
	imp, skippedByClient := cat.Importable()
	tools := make([]persistence.Tool, 0, len(imp))
	skipped := make([]SkippedTool, 0, len(skippedByClient))
	for _, t := range skippedByClient {
		skipped = append(skipped, SkippedTool{Name: farName(t.Name), Reason: t.Reason})
	}
	for _, t := range imp {
		switch {
		case len(t.Name) > maxToolName || !toolNameRE.MatchString(t.Name):
			skipped = append(skipped, SkippedTool{Name: farName(t.Name),
				Reason: fmt.Sprintf("the tool name must be 1 to %d letters, digits, '_', '.' or '-'", maxToolName)})
		case len(t.Description) > maxDescription:
			skipped = append(skipped, SkippedTool{Name: t.Name,
				Reason: fmt.Sprintf("the tool description is longer than %d bytes", maxDescription)})
		case strings.ContainsRune(t.Description, 0) || bytes.Contains(t.Schema, []byte(`\u0000`)) || bytes.Contains(t.Annotations, []byte(`\u0000`)):
			// PostgreSQL text and jsonb cannot hold a NUL character (a false positive, an escaped
			// backslash before "u0000", only skips a tool that has one).
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: "the tool definition contains a NUL character"})
		default:
			tools = append(tools, persistence.Tool{Name: t.Name, Description: t.Description, InputSchema: t.Schema, Annotations: t.Annotations})
		}
	}
	return tools, skipped
}

// farName makes a tool name the far side wrote fit to echo: control characters removed, at most 160
// bytes.
func farName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	const limit = 160
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// SkillState is a skill with what decides whether it may be called.
type SkillState struct {
	Skill         persistence.Skill
	ServerEnabled bool
}

// Callable reports whether the skill may be called: it is enabled, available (its server is healthy or
// degraded and it is not orphaned) and its server is enabled.
func (k SkillState) Callable() bool {
	return k.Skill.Enabled && k.Skill.Available && k.Skill.OrphanedAt == nil && k.ServerEnabled
}

// SetSkillEnabled switches one skill of tenantID on or off (persistence.ErrNotFound for none).
func (s *Service) SetSkillEnabled(ctx context.Context, tenantID, skillID uuid.UUID, enabled bool) (SkillState, error) {
	k, srvEnabled, err := s.store.SetSkillEnabled(ctx, tenantID, skillID, enabled, s.wallNow())
	if err != nil {
		return SkillState{}, err
	}
	return SkillState{Skill: k, ServerEnabled: srvEnabled}, nil
}
