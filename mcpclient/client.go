package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/config"
)

// Defaults and ceilings (the operation timeout, a setting, is config.DefaultMCPTimeout).
const (
	DefaultMaxResponseBytes = 2 << 20
	DefaultRecordTimeout    = 2 * time.Second
	// MaxCataloguePages and MaxCatalogueTools bound a catalogue walk.
	// A server needing more is an error, never a silent truncation.
	MaxCataloguePages = 50
	MaxCatalogueTools = 500
)

// Bounds on what the client waits for after an operation's work is done:
// the SDK winding a failed handshake down (connectGrace), the
// notifications/cancelled message of a cancelled call being delivered and
// the session closing (cleanupWait, shared by both).
const (
	connectGrace = 100 * time.Millisecond
	cleanupWait  = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every error [New] returns for a bad
// [Config].
var ErrInvalidConfig = errors.New("invalid MCP client configuration")

// AuthMode places the credential on requests.
type AuthMode string

// Authentication modes.
const (
	// AuthNone sends no credential.
	AuthNone AuthMode = ""
	// AuthBearer sends "Authorization: Bearer <credential>".
	AuthBearer AuthMode = "bearer"
	// AuthHeader sends "<HeaderName>: <credential>".
	AuthHeader AuthMode = "header"
)

// Auth is how the client authenticates to the server.
type Auth struct {
	Mode AuthMode
	// HeaderName is the header that carries the credential in AuthHeader
	// mode. It must be a valid header name and not one the transport owns
	// (Host, Content-Type, Accept, Mcp-Session-Id, ...).
	HeaderName string
	// Credential is the secret. It is sent on every request and never
	// appears in errors.
	Credential string
}

// Config configures a [Client].
type Config struct {
	// Endpoint is the server's Streamable HTTP endpoint, http or https.
	Endpoint string
	Auth     Auth
	// Timeout bounds each operation as a whole — handshake, catalogue walk,
	// or handshake plus tool call. Zero means config.DefaultMCPTimeout.
	Timeout time.Duration
	// MaxResponseBytes caps each HTTP response body (after decompression).
	// A bigger answer fails the operation as invalid_response. Zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// AllowHosts are the endpoint policy's exceptions for non-public hosts
	// and addresses; see [EndpointPolicy].
	AllowHosts []string
	// Resolver resolves host names when dialling; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// RecordTimeout bounds each call to the [Recorder]. Zero means
	// DefaultRecordTimeout.
	RecordTimeout time.Duration
	// ClientVersion is the version sent in clientInfo ("mcpfleet"); default
	// "dev".
	ClientVersion string
	// Logger receives the SDK's and the client's diagnostics; nil discards.
	Logger *slog.Logger
}

// Recorder is told about each completed operation, so liveness is observed
// rather than inferred (ADR-154). at is when the answer that completed the
// operation arrived, latency how long that round trip took.
//
// The Client calls RecordContact exactly once per successful operation and
// never for a failed one. ctx keeps the caller's values, is not cancelled
// with the caller's context, and ends after Config.RecordTimeout; the
// Client does not wait longer than that. A panic in RecordContact is
// recovered and logged. Neither can fail the operation.
type Recorder interface {
	RecordContact(ctx context.Context, at time.Time, latency time.Duration)
}

// Client talks to one MCP server over Streamable HTTP, using the official
// Go SDK. It declares no client capabilities (no roots, sampling or
// elicitation), so a server cannot invite it into any of them.
//
// Each operation opens its own MCP session — handshake first, through
// server/discover with a fallback to initialize — does its work and closes
// the session. Operations never retry a request. A Client is safe for
// concurrent use; operations do not share sessions.
type Client struct {
	cfg     Config
	rec     Recorder
	log     *slog.Logger
	http    *http.Transport
	header  string
	value   string
	sizeCap string
}

// New validates cfg and returns a Client that reports completed operations
// to rec. rec is required: a nil Recorder is an error, so a mis-wired caller
// cannot silently lose liveness. Config errors wrap [ErrInvalidConfig]; an
// endpoint refused by the policy also wraps [ErrEndpointRefused]. New does
// not touch the network: a host name is resolved and checked when a
// connection is dialled.
func New(cfg Config, rec Recorder) (*Client, error) {
	if rec == nil {
		return nil, fmt.Errorf("%w: a recorder is required", ErrInvalidConfig)
	}
	if v := reflect.ValueOf(rec); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: the recorder is a nil pointer", ErrInvalidConfig)
	}
	u, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	policy := EndpointPolicy{Allow: cfg.AllowHosts, Resolver: cfg.Resolver}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := policy.checkAddr(u.Hostname(), ip, true); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	cfg.Endpoint = u.String()
	cfg.Timeout = config.Or(cfg.Timeout, config.DefaultMCPTimeout)
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.RecordTimeout <= 0 {
		cfg.RecordTimeout = DefaultRecordTimeout
	}
	if cfg.ClientVersion == "" {
		cfg.ClientVersion = "dev"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{cfg: cfg, rec: rec, log: log, sizeCap: formatBytes(cfg.MaxResponseBytes)}
	if c.header, c.value, err = authHeader(cfg.Auth); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.http = &http.Transport{
		Proxy:                  nil, // never route around the dial policy
		DialContext:            (&dialer{policy: policy, timeout: 10 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return c, nil
}

// CloseIdleConnections closes pooled connections that are idle. A Client
// needs no other cleanup.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// reservedHeaders are set by the transport and cannot carry a credential.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Type": true, "Content-Length": true, "Accept": true,
	"Accept-Encoding": true, "Connection": true, "Transfer-Encoding": true,
	"Te": true, "Upgrade": true, "Mcp-Session-Id": true,
	"Mcp-Protocol-Version": true, "Last-Event-Id": true,
}

func authHeader(a Auth) (name, value string, err error) {
	if strings.ContainsAny(a.Credential, "\r\n\x00") {
		return "", "", errors.New("the credential contains a line break or NUL")
	}
	switch a.Mode {
	case AuthNone:
		if a.Credential != "" {
			return "", "", errors.New(`a credential is configured without an auth mode; use "bearer" or "header"`)
		}
		return "", "", nil
	case AuthBearer:
		if a.Credential == "" {
			return "", "", errors.New("bearer auth needs a credential")
		}
		return "Authorization", "Bearer " + a.Credential, nil
	case AuthHeader:
		if a.Credential == "" {
			return "", "", errors.New("header auth needs a credential")
		}
		if !validHeaderName(a.HeaderName) {
			return "", "", fmt.Errorf("header auth needs a valid header name, not %q", a.HeaderName)
		}
		canon := http.CanonicalHeaderKey(a.HeaderName)
		if reservedHeaders[canon] {
			return "", "", fmt.Errorf("header %q is set by the transport and cannot carry the credential", canon)
		}
		return canon, a.Credential, nil
	default:
		return "", "", fmt.Errorf(`auth mode %q is not supported; use "bearer" or "header"`, a.Mode)
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > unicode.MaxASCII || !(r == '-' || r == '_' || r == '.' || r == '!' || r == '#' || r == '$' ||
			r == '%' || r == '&' || r == '\'' || r == '*' || r == '+' || r == '^' || r == '`' || r == '|' ||
			r == '~' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			return false
		}
	}
	return true
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}

// ServerInfo is the server's self-description. It is written by the far
// side: show it as text (textContent), never as markup. Each field is cut to
// 256 bytes and stripped of control characters.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Title   string `json:"title"`
}

// HandshakeReport is the result of a connection test.
type HandshakeReport struct {
	// Latency is the round trip of the handshake request that succeeded
	// (server/discover or initialize); LatencyMS is the same in
	// milliseconds.
	Latency   time.Duration `json:"-"`
	LatencyMS int64         `json:"latency_ms"`
	// ProtocolVersion is the protocol revision negotiated.
	ProtocolVersion string     `json:"protocol_version"`
	ServerInfo      ServerInfo `json:"server_info"`
	// NegotiationPath is PathServerDiscover or PathInitialize.
	NegotiationPath string `json:"negotiation_path"`
}

// Tool is one tool as the server advertised it.
type Tool struct {
	Name        string
	Title       string
	Description string
	// InputSchema is the input schema as the server sent it (re-encoded
	// JSON: key order and number spelling may differ, values do not).
	// Normalise it with toolschema.Normalize before use.
	InputSchema json.RawMessage
	// Annotations are the tool's annotations as the server sent them (re-encoded JSON), nil for none.
	Annotations json.RawMessage
}

// Catalogue is a server's complete tool list.
type Catalogue struct {
	Tools []Tool
	// Pages is the number of tools/list pages read.
	Pages int
	// TTL is the server's cache hint (the ttlMs result field of
	// tools/list, SEP-2549): how long the catalogue may be considered
	// fresh. Zero means no hint: the server sent none, sent 0, or some page
	// lacked one. Across pages the smallest hint wins.
	TTL time.Duration
	// Latency is the round trip of the last tools/list page.
	Latency time.Duration
}

// Block is one content block of a tool result. Type is "text", "image",
// "audio", "resource", "resource_link", or "other" for kinds this client
// does not name; Text is set for text blocks only.
type Block struct {
	Type string
	Text string
}

// ToolResult is the answer to one tools/call.
type ToolResult struct {
	Content []Block
	// StructuredContent is the structuredContent member, if any.
	StructuredContent json.RawMessage
	// IsError reports that the tool itself failed (the call did not).
	IsError bool
	// Latency is the round trip of the tools/call request.
	Latency time.Duration
}

// operation is one operation's state: its session's trace and the client.
type operation struct {
	c     *Client
	trace *trace
}

func (c *Client) newOperation() *operation { return &operation{c: c, trace: newTrace()} }

// connect opens a session and performs the handshake within ctx.
func (o *operation) connect(ctx context.Context) (*mcp.ClientSession, error) {
	c := o.c
	hc := &http.Client{
		Transport: &observingTransport{
			base: c.http, trace: o.trace, header: c.header, value: c.value,
			maxBytes: c.cfg.MaxResponseBytes, hasAuth: c.header != "", sizeLabel: c.sizeCap,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			first := via[0].URL
			switch {
			case !strings.EqualFold(req.URL.Host, first.Host):
				o.trace.setFault(ClassTransport, "The server redirected to another host; redirects to another host are not followed.")
				return errors.New("redirect to another host refused")
			case first.Scheme == "https" && req.URL.Scheme != "https":
				o.trace.setFault(ClassTransport, "The server redirected from https to http; the redirect is not followed.")
				return errors.New("redirect to http refused")
			case len(via) >= 3:
				o.trace.setFault(ClassTransport, "The server redirected too many times.")
				return errors.New("too many redirects")
			}
			return nil
		},
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpfleet", Version: c.cfg.ClientVersion}, &mcp.ClientOptions{
		Logger: c.log,
		// Empty, not nil: nil would advertise roots.
		Capabilities: &mcp.ClientCapabilities{},
		// No automatic input fulfilment and re-send of tools/call.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	client.AddSendingMiddleware(o.trace.middleware)
	transport := &mcp.StreamableClientTransport{
		Endpoint:             c.cfg.Endpoint,
		HTTPClient:           hc,
		DisableStandaloneSSE: true,
		MaxEventSize:         int(c.cfg.MaxResponseBytes),
	}
	// The SDK's Connect can outlive ctx: after a handshake request times
	// out it closes the connection, which waits for the
	// notifications/cancelled it sends to be delivered (up to 5 s). The
	// operation's deadline must hold, so Connect runs aside and is
	// abandoned, with connectGrace to report its own error, once ctx ends.
	type result struct {
		cs  *mcp.ClientSession
		err error
	}
	ch := make(chan result, 1)
	go func() {
		cs, err := client.Connect(ctx, transport, nil)
		ch <- result{cs, err}
	}()
	select {
	case r := <-ch:
		return r.cs, r.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(connectGrace)
	defer grace.Stop()
	select {
	case r := <-ch:
		return r.cs, r.err
	case <-grace.C:
		go func() {
			if r := <-ch; r.cs != nil {
				_ = r.cs.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// close closes the session, waiting until the deadline at most (the SDK
// bounds its DELETE by itself; this only keeps a slow server from holding
// the caller).
func (o *operation) close(cs *mcp.ClientSession, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cs.Close(); err != nil {
			o.c.log.Debug("mcpclient: closing session", "error", err)
		}
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// record calls the Recorder once, bounded and shielded.
func (c *Client) record(ctx context.Context, at time.Time, latency time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RecordTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				c.log.Warn("mcpclient: recorder panicked; contact not recorded", "panic", r)
			}
		}()
		c.rec.RecordContact(rctx, at, latency)
	}()
	select {
	case <-done:
	case <-rctx.Done():
		c.log.Warn("mcpclient: recorder did not return in time; contact may not be recorded", "timeout", c.cfg.RecordTimeout)
	}
}

// Handshake tests the connection: it performs the MCP handshake, closes the
// session and reports what the server said. It writes nothing but the
// contact, through the Recorder. Errors are [*Error].
func (c *Client) Handshake(ctx context.Context) (HandshakeReport, error) {
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	o := c.newOperation()
	cs, err := o.connect(opCtx)
	if err != nil {
		return HandshakeReport{}, o.classify(ctx, opCtx, "the handshake", err)
	}
	latency, at := o.trace.completed()
	report := HandshakeReport{
		Latency:         latency,
		LatencyMS:       latency.Milliseconds(),
		NegotiationPath: o.trace.path(),
	}
	if ir := cs.InitializeResult(); ir != nil {
		report.ProtocolVersion = ir.ProtocolVersion
		if si := ir.ServerInfo; si != nil {
			report.ServerInfo = ServerInfo{Name: cleanFar(si.Name), Version: cleanFar(si.Version), Title: cleanFar(si.Title)}
		}
	}
	o.close(cs, time.Now().Add(cleanupWait))
	c.record(ctx, at, latency)
	return report, nil
}

// ListTools reads the server's whole catalogue, page by page. It fails —
// rather than truncating — when the catalogue needs more than
// MaxCataloguePages pages or holds more than MaxCatalogueTools tools, and
// when the server repeats a cursor. Errors are [*Error].
func (c *Client) ListTools(ctx context.Context) (Catalogue, error) {
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	o := c.newOperation()
	cs, err := o.connect(opCtx)
	if err != nil {
		return Catalogue{}, o.classify(ctx, opCtx, "the handshake", err)
	}
	defer func() { o.close(cs, time.Now().Add(cleanupWait)) }()
	var cat Catalogue
	var ttl time.Duration
	hinted := true
	cursor := ""
	seen := map[string]bool{}
	for {
		res, err := cs.ListTools(opCtx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return Catalogue{}, o.classify(ctx, opCtx, "tools/list", err)
		}
		cat.Pages++
		if len(cat.Tools)+len(res.Tools) > MaxCatalogueTools {
			return Catalogue{}, &Error{Class: ClassInvalidResponse, Reason: fmt.Sprintf("The server's catalogue has more than %d tools; this client reads at most %d.", MaxCatalogueTools, MaxCatalogueTools)}
		}
		for _, t := range res.Tools {
			tool, err := convertTool(t)
			if err != nil {
				return Catalogue{}, &Error{Class: ClassInvalidResponse, Reason: "The server's catalogue holds a tool whose input schema cannot be encoded.", Err: err}
			}
			cat.Tools = append(cat.Tools, tool)
		}
		if page := time.Duration(res.TTLMs) * time.Millisecond; page <= 0 {
			hinted = false
		} else if ttl == 0 || page < ttl {
			ttl = page
		}
		if res.NextCursor == "" {
			break
		}
		if cat.Pages == MaxCataloguePages {
			return Catalogue{}, &Error{Class: ClassInvalidResponse, Reason: fmt.Sprintf("The server's catalogue spans more than %d pages; this client reads at most %d.", MaxCataloguePages, MaxCataloguePages)}
		}
		if seen[res.NextCursor] {
			return Catalogue{}, &Error{Class: ClassInvalidResponse, Reason: "The server repeated a pagination cursor; its catalogue would never end."}
		}
		seen[res.NextCursor] = true
		cursor = res.NextCursor
	}
	if hinted {
		cat.TTL = ttl
	}
	latency, at := o.trace.completed()
	cat.Latency = latency
	c.record(ctx, at, latency)
	return cat, nil
}

func convertTool(t *mcp.Tool) (Tool, error) {
	out := Tool{Name: t.Name, Title: t.Title, Description: t.Description}
	if out.Title == "" && t.Annotations != nil {
		out.Title = t.Annotations.Title
	}
	if t.Annotations != nil {
		b, err := json.Marshal(t.Annotations)
		if err != nil {
			return Tool{}, fmt.Errorf("encoding annotations of %q: %w", t.Name, err)
		}
		out.Annotations = b
	}
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return Tool{}, fmt.Errorf("encoding input schema of %q: %w", t.Name, err)
		}
		out.InputSchema = b
	}
	return out, nil
}

// CallTool calls one tool, once: it is never retried, whatever happens.
// args may be nil. A result with IsError set is a successful call of a tool
// that failed; errors are [*Error] and mean the call itself failed.
//
// Cancelling ctx (or reaching the deadline) ends CallTool promptly with a
// timeout-class error. The SDK then sends notifications/cancelled for the
// request; CallTool waits for that message to be delivered before closing
// the session, so that closing cannot overtake it — for both together at
// most two seconds. Servers speaking MCP 2026-07-28 also see the request's
// HTTP connection close.
func (c *Client) CallTool(ctx context.Context, name string, args map[string]any) (ToolResult, error) {
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	o := c.newOperation()
	cs, err := o.connect(opCtx)
	if err != nil {
		return ToolResult{}, o.classify(ctx, opCtx, "the handshake", err)
	}
	res, err := cs.CallTool(opCtx, &mcp.CallToolParams{Name: name, Arguments: args})
	cleanup := time.Now().Add(cleanupWait)
	defer func() { o.close(cs, cleanup) }()
	if err != nil {
		if opCtx.Err() != nil {
			t := time.NewTimer(time.Until(cleanup))
			select {
			case <-o.trace.cancelSent:
			case <-t.C:
				c.log.Warn("mcpclient: notifications/cancelled not delivered in time", "tool", name)
			}
			t.Stop()
		}
		return ToolResult{}, o.classify(ctx, opCtx, "tools/call", err)
	}
	if res.NeedsInput() {
		return ToolResult{}, &Error{Class: ClassProtocol, Reason: "The server asked for input during tools/call, which this client does not provide."}
	}
	out := ToolResult{IsError: res.IsError}
	for _, b := range res.Content {
		out.Content = append(out.Content, convertBlock(b))
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out.StructuredContent = b
		}
	}
	latency, at := o.trace.completed()
	out.Latency = latency
	c.record(ctx, at, latency)
	return out, nil
}

func convertBlock(b mcp.Content) Block {
	switch b := b.(type) {
	case *mcp.TextContent:
		return Block{Type: "text", Text: b.Text}
	case *mcp.ImageContent:
		return Block{Type: "image"}
	case *mcp.AudioContent:
		return Block{Type: "audio"}
	case *mcp.EmbeddedResource:
		return Block{Type: "resource"}
	case *mcp.ResourceLink:
		return Block{Type: "resource_link"}
	}
	return Block{Type: "other"}
}

// cleanFar strips control characters from far-side text and cuts it to
// 256 bytes on a rune boundary.
func cleanFar(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	const limit = 256
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
