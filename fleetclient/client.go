// Package fleetclient is a typed client for the mcpfleet service's JSON HTTP
// API: module registration, heartbeats and deregistration, and the read side
// (servers, skills, audit). It also provides Module, which keeps one module
// registered and heartbeating the way a real MCP module should.
//
// Every method takes a context first and honours its cancellation. A non-2xx
// answer is returned as a *ProblemError (see IsNotRegistered, IsRetryable);
// a request that got no answer returns the transport's error, wrapped.
package fleetclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultUserAgent is sent when no WithUserAgent option is given.
const DefaultUserAgent = "mcpfleet-fleetclient/1"

// maxBody bounds how much of an answer the client reads.
const maxBody = 8 << 20

// Client talks to one mcpfleet service with one API key. It is safe for
// concurrent use; its zero value is not usable, call New.
type Client struct {
	base      string
	auth      string
	userAgent string
	hc        *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc (its
// transport, timeouts and connection pool). A nil hc is ignored.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// NewHTTPClient returns an *http.Client suited to talking to one service from
// many goroutines: a transport that keeps up to maxConns connections to the
// host (idle ones included) and an overall per-request timeout. A maxConns
// below 1 means 16.
func NewHTTPClient(maxConns int, timeout time.Duration) *http.Client {
	if maxConns < 1 {
		maxConns = 16
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = maxConns
	tr.MaxIdleConnsPerHost = maxConns
	tr.MaxConnsPerHost = maxConns
	tr.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: tr, Timeout: timeout}
}

// New returns a client for the service at baseURL (scheme and host, with an
// optional path prefix; a trailing slash is ignored) that authenticates with
// apiKey as a Bearer token. Without WithHTTPClient it uses
// NewHTTPClient(16, 30*time.Second).
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:      strings.TrimRight(baseURL, "/"),
		auth:      "Bearer " + apiKey,
		userAgent: DefaultUserAgent,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = NewHTTPClient(16, 30*time.Second)
	}
	return c
}

// BaseURL returns the service URL the client was made with, without a
// trailing slash.
func (c *Client) BaseURL() string { return c.base }

type traceparentKey struct{}

// WithTraceparent returns a context whose requests carry the given W3C
// traceparent header value. An empty value removes it.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceparentKey{}, traceparent)
}

// Register registers a module, or re-registers it (same module_name, same
// server_id). Created in the answer tells which.
func (c *Client) Register(ctx context.Context, req RegisterRequest) (*RegisterResponse, error) {
	var out RegisterResponse
	status, err := c.do(ctx, http.MethodPost, "/v1/mcp/servers/register", nil, req, &out)
	if err != nil {
		return nil, fmt.Errorf("register module %q: %w", req.ModuleName, err)
	}
	out.Created = status == http.StatusCreated
	return &out, nil
}

type serverIDBody struct {
	ServerID string `json:"server_id"`
}

// Heartbeat reports that the server is alive. A *ProblemError for which
// IsNotRegistered holds means the module must register again; IsDeregistered
// means it was deregistered.
func (c *Client) Heartbeat(ctx context.Context, serverID string) (*HeartbeatResponse, error) {
	var out HeartbeatResponse
	if _, err := c.do(ctx, http.MethodPost, "/v1/mcp/servers/heartbeat", nil, serverIDBody{serverID}, &out); err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", serverID, err)
	}
	return &out, nil
}

// Deregister marks the server deregistered (graceful shutdown) and returns
// its final record.
func (c *Client) Deregister(ctx context.Context, serverID string) (*Server, error) {
	var out Server
	if _, err := c.do(ctx, http.MethodPost, "/v1/mcp/servers/deregister", nil, serverIDBody{serverID}, &out); err != nil {
		return nil, fmt.Errorf("deregister %s: %w", serverID, err)
	}
	return &out, nil
}

// ListServers fetches one page of servers. Pass the returned NextCursor as
// opts.Cursor to get the next page.
func (c *Client) ListServers(ctx context.Context, opts ListOptions) (*ServerPage, error) {
	q := url.Values{}
	if opts.Status != "" {
		q.Set("status", string(opts.Status))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.IncludeCapabilityAdvertisement {
		q.Set("include", "capability_advertisement")
	}
	var out ServerPage
	if _, err := c.do(ctx, http.MethodGet, "/v1/mcp/servers", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	return &out, nil
}

// ServerPages iterates over the pages of servers matching opts, starting at
// opts.Cursor; each page is requested when the previous one's yield
// returns. It stops after the last page, after opts.MaxPages pages (default
// 10,000), if the service repeats a cursor, or at the first error, which it
// yields once with a nil page.
func (c *Client) ServerPages(ctx context.Context, opts ListOptions) iter.Seq2[*ServerPage, error] {
	return func(yield func(*ServerPage, error) bool) {
		maxPages := opts.MaxPages
		if maxPages <= 0 {
			maxPages = 10_000
		}
		seen := map[string]bool{}
		for range maxPages {
			page, err := c.ListServers(ctx, opts)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) {
				return
			}
			if page.NextCursor == "" || seen[page.NextCursor] {
				return
			}
			seen[page.NextCursor] = true
			opts.Cursor = page.NextCursor
		}
	}
}

// AllServers iterates over every server matching opts, page by page
// (ServerPages), yielding a page's error once with a zero Server.
func (c *Client) AllServers(ctx context.Context, opts ListOptions) iter.Seq2[Server, error] {
	return func(yield func(Server, error) bool) {
		for page, err := range c.ServerPages(ctx, opts) {
			if err != nil {
				yield(Server{}, err)
				return
			}
			for _, s := range page.Servers {
				if !yield(s, nil) {
					return
				}
			}
		}
	}
}

// GetServer fetches one server by id.
func (c *Client) GetServer(ctx context.Context, serverID string) (*Server, error) {
	var out Server
	if _, err := c.do(ctx, http.MethodGet, "/v1/mcp/servers/"+url.PathEscape(serverID), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("get server %s: %w", serverID, err)
	}
	return &out, nil
}

// Skills lists the skills (tools) the registry holds for one server.
func (c *Client) Skills(ctx context.Context, serverID string) ([]Skill, error) {
	var out struct {
		Skills []Skill `json:"skills"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/mcp/servers/"+url.PathEscape(serverID)+"/skills", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list skills of %s: %w", serverID, err)
	}
	return out.Skills, nil
}

// Audit lists audit events, oldest first as the service orders them.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) ([]AuditEvent, error) {
	q := url.Values{}
	if opts.ServerID != "" {
		q.Set("server_id", opts.ServerID)
	}
	var out struct {
		Events []AuditEvent `json:"events"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/mcp/audit", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out.Events, nil
}

// ToolChanges lists the recorded changes of one skill, oldest first (operator and admin keys): each a
// change of its definition or a move of its server's endpoint, which disabled the tool until an
// operator enabled it again. Pass the last Seq as opts.After for the next page.
func (c *Client) ToolChanges(ctx context.Context, skillID string, opts ToolChangesOptions) ([]ToolChange, error) {
	q := url.Values{}
	if opts.After > 0 {
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out struct {
		Changes []ToolChange `json:"changes"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/mcp/skills/"+url.PathEscape(skillID)+"/changes", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list changes of skill %s: %w", skillID, err)
	}
	return out.Changes, nil
}

// Healthz returns nil if GET /healthz answers 2xx.
func (c *Client) Healthz(ctx context.Context) error {
	if _, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	return nil
}

// Readyz returns nil if GET /readyz answers 2xx (the service takes traffic).
func (c *Client) Readyz(ctx context.Context) error {
	if _, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	return nil
}

// do sends one request and decodes a 2xx JSON answer into out (if non-nil).
// It returns the HTTP status of any answer it got.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if tp, _ := ctx.Value(traceparentKey{}).(string); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() {
		// Drain a little so the connection can be reused, then close.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
	}()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read %d answer: %w", resp.StatusCode, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, problemFrom(resp, data)
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		if out != nil {
			return resp.StatusCode, &DecodeError{Status: resp.StatusCode, Err: errors.New("empty body")}
		}
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, &DecodeError{Status: resp.StatusCode, Err: err}
	}
	return resp.StatusCode, nil
}

// problemFrom builds the error for a non-2xx answer.
func problemFrom(resp *http.Response, body []byte) *ProblemError {
	pe := &ProblemError{}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		_ = json.Unmarshal(body, pe) // a malformed document still leaves a useful error
	}
	pe.Status = resp.StatusCode // the status line wins over the document
	if pe.Title == "" {
		pe.Title = http.StatusText(resp.StatusCode)
	}
	if pe.Type == "" && pe.Detail == "" {
		d := strings.TrimSpace(string(body))
		if len(d) > 200 {
			d = d[:200] + "…"
		}
		pe.Detail = d
	}
	pe.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return pe
}
