package mcpclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Negotiation paths reported by [Client.Handshake].
const (
	// PathServerDiscover: the server answered server/discover (MCP
	// 2026-07-28 and later).
	PathServerDiscover = "server_discover"
	// PathInitialize: server/discover failed and the client fell back to
	// initialize + notifications/initialized.
	PathInitialize = "initialize"
)

const (
	methodInitialize  = "initialize"
	methodDiscover    = "server/discover"
	methodCancelled   = "notifications/cancelled"
	notificationsPref = "notifications/"
)

// trace is what one operation observed: the last classified fault, the
// latency of the last completed request, and the handshake path. It is
// written by the SDK's goroutines (transport, body readers, middleware) and
// read by the operation, hence the mutex.
//
// Faults are attributed to requests: the middleware numbers each request
// (seq), and a fault carries the number of the request running when it was
// observed. A failed request is explained by its own fault, or — when it
// never reached the wire, because an earlier failure broke the connection —
// by the last fault seen.
type trace struct {
	mu          sync.Mutex
	fault       *fault
	seq         int  // number of the current request
	sent        bool // the current request put something on the wire
	negotiation string
	latency     time.Duration
	at          time.Time

	cancelOnce sync.Once
	cancelSent chan struct{} // closed once a notifications/cancelled POST completed
}

func newTrace() *trace { return &trace{cancelSent: make(chan struct{})} }

func (t *trace) setFault(c Class, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fault = &fault{class: c, reason: reason, seq: t.seq}
}

// lastFault returns the fault that explains the failure of the current
// request, or nil.
func (t *trace) lastFault() *fault {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fault != nil && (t.fault.seq == t.seq || !t.sent) {
		return t.fault
	}
	return nil
}

func (t *trace) markSent() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = true
}

// completed returns the latency and completion time of the last request
// that got its answer.
func (t *trace) completed() (time.Duration, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latency, t.at
}

func (t *trace) path() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.negotiation
}

func (t *trace) markCancelSent() { t.cancelOnce.Do(func() { close(t.cancelSent) }) }

// middleware is an SDK sending middleware. For every request (not
// notification) it starts a new fault attribution, times the round trip,
// and notes which handshake request succeeded: the SDK sends initialize
// only after server/discover failed, so a successful initialize means the
// initialize path, and a successful server/discover without one means the
// server_discover path.
func (t *trace) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, notificationsPref) {
			return next(ctx, method, req)
		}
		t.mu.Lock()
		t.seq++
		t.sent = false
		t.mu.Unlock()
		start := time.Now()
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		end := time.Now()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.latency, t.at = end.Sub(start), end
		switch method {
		case methodInitialize:
			t.negotiation = PathInitialize
			if ir, ok := res.(*mcp.InitializeResult); ok && !slices.Contains(mcp.SupportedProtocolVersions(), ir.ProtocolVersion) {
				t.fault = &fault{ClassProtocol, fmt.Sprintf("The server chose protocol version %s, which this client does not support.", farText(ir.ProtocolVersion)), t.seq}
			}
		case methodDiscover:
			if t.negotiation == "" {
				t.negotiation = PathServerDiscover
			}
		}
		return res, nil
	}
}

// observingTransport is the http.RoundTripper of one operation. It adds the
// credential, caps response bodies, and turns what it sees on the wire into
// faults on the trace.
type observingTransport struct {
	base      http.RoundTripper
	trace     *trace
	header    string // credential header name, "" for none
	value     string
	maxBytes  int64
	hasAuth   bool
	sizeLabel string
}

// peek is what the transport reads of an outgoing JSON-RPC message.
type peek struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
}

func (o *observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if o.header != "" {
		out.Header.Set(o.header, o.value)
	}
	var msg peek
	if req.Method == http.MethodPost && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			_ = json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&msg)
			_ = rc.Close()
		}
	}
	if msg.Method == methodCancelled {
		defer o.trace.markCancelSent()
	}
	ctx := req.Context()
	o.trace.markSent()
	resp, err := o.base.RoundTrip(out)
	if err != nil {
		if ctx.Err() == nil {
			c, reason := transportFault(err)
			o.trace.setFault(c, reason)
		}
		return nil, err
	}
	isCall := len(msg.ID) > 0 && string(msg.ID) != "null" && msg.Method != ""
	b := &body{rc: resp.Body, ctx: ctx, trace: o.trace, limit: o.maxBytes, sizeLabel: o.sizeLabel}
	resp.Body = b
	if req.Method != http.MethodPost {
		return resp, nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch s := resp.StatusCode; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		if o.hasAuth {
			o.trace.setFault(ClassAuth, fmt.Sprintf("The server refused the configured credential (HTTP %s).", statusText(s)))
		} else {
			o.trace.setFault(ClassAuth, fmt.Sprintf("The server requires authentication (HTTP %s), and none is configured.", statusText(s)))
		}
	case s == http.StatusNotFound || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		o.trace.setFault(ClassTransport, fmt.Sprintf("The server answered HTTP %s.", statusText(s)))
	case s < 200 || s >= 300:
		o.trace.setFault(ClassProtocol, fmt.Sprintf("The server answered HTTP %s.", statusText(s)))
		if ct == "application/json" {
			b.insp = &jsonInspector{onError: func(code int64, message string) {
				o.trace.setFault(ClassProtocol, fmt.Sprintf("The server answered HTTP %s with JSON-RPC error %d: %s.", statusText(s), code, farText(message)))
			}}
		}
	case s == http.StatusAccepted || s == http.StatusNoContent:
	case ct == "application/json":
		b.insp = &jsonInspector{trace: o.trace}
	case ct == "text/event-stream":
		b.insp = &sseInspector{trace: o.trace, expectAnswer: isCall}
	default:
		if ct == "" {
			ct = "none"
		}
		o.trace.setFault(ClassProtocol, fmt.Sprintf("The server answered with content type %s instead of JSON-RPC.", farText(ct)))
	}
	return resp, nil
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return fmt.Sprintf("%d %s", code, t)
	}
	return fmt.Sprint(code)
}

// transportFault classifies an error of the underlying HTTP transport.
func transportFault(err error) (Class, string) {
	var ee *EndpointError
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var netErr net.Error
	switch {
	case errors.As(err, &ee):
		return ClassTransport, ee.Error()
	case errors.As(err, &dnsErr):
		return ClassTransport, "The server's host name could not be resolved."
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return ClassTransport, "The server's TLS certificate could not be verified."
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassTransport, "The server refused the connection."
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ClassTransport, "The connection was closed by the server before it answered."
	case errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout, "The connection to the server timed out."
	}
	return ClassTransport, "The connection to the server failed."
}

var errTooLarge = errors.New("response larger than the configured cap")

// body caps a response body at limit bytes and feeds what it reads to an
// inspector. Reading past the cap fails with errTooLarge and records an
// invalid_response fault; a read error that is not the caller giving up
// records a transport fault.
type body struct {
	rc        io.ReadCloser
	ctx       context.Context
	trace     *trace
	limit     int64
	n         int64
	insp      inspector
	sizeLabel string
	over      bool
}

type inspector interface {
	write(p []byte)
	finish()
}

func (b *body) Read(p []byte) (int, error) {
	if b.over {
		return 0, errTooLarge
	}
	if room := b.limit - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		n -= int(b.n - b.limit)
		b.over = true
		b.trace.setFault(ClassInvalidResponse, fmt.Sprintf("The server's answer is larger than the %s response limit.", b.sizeLabel))
		if b.insp != nil {
			b.insp.write(p[:n])
		}
		return n, errTooLarge
	}
	if b.insp != nil {
		b.insp.write(p[:n])
	}
	switch {
	case err == io.EOF:
		if b.insp != nil {
			b.insp.finish()
		}
	case err != nil && b.ctx.Err() == nil:
		b.trace.setFault(ClassTransport, "The connection was closed by the server before it answered.")
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

// checkMessage classifies one JSON-RPC message payload: nil if it is
// JSON-RPC 2.0, else a fault. answer reports whether it is a response.
func checkMessage(data []byte) (f *fault, answer bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || !json.Valid(data) {
		return &fault{class: ClassInvalidResponse, reason: "The server's answer is not valid JSON."}, false
	}
	if data[0] == '[' {
		return nil, true // a batch; the SDK judges its members
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &m); err != nil || m.JSONRPC != "2.0" {
		return &fault{class: ClassProtocol, reason: "The server answered with JSON that is not JSON-RPC 2.0."}, false
	}
	return nil, len(m.ID) > 0 && (m.Result != nil || m.Error != nil)
}

// jsonInspector checks an application/json body once it is complete. With
// onError set it only reports a JSON-RPC error the body carries.
type jsonInspector struct {
	trace   *trace
	buf     bytes.Buffer
	onError func(code int64, message string)
}

func (j *jsonInspector) write(p []byte) { j.buf.Write(p) }

func (j *jsonInspector) finish() {
	if j.onError != nil {
		var m struct {
			Error *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(j.buf.Bytes(), &m) == nil && m.Error != nil {
			j.onError(m.Error.Code, m.Error.Message)
		}
		return
	}
	if f, _ := checkMessage(j.buf.Bytes()); f != nil {
		j.trace.setFault(f.class, f.reason)
	}
}

// sseInspector parses a text/event-stream body as it is read and checks
// each message event. Once the answer to the call has been seen it stops
// judging: what follows belongs to nobody's request.
type sseInspector struct {
	trace        *trace
	expectAnswer bool
	line         []byte
	event        string
	data         []byte
	hasData      bool
	answered     bool
	prevCR       bool
}

func (s *sseInspector) write(p []byte) {
	for _, c := range p {
		if s.answered {
			return
		}
		if s.prevCR {
			s.prevCR = false
			if c == '\n' {
				continue // CRLF: the line already ended at CR
			}
		}
		switch c {
		case '\r':
			s.prevCR = true
			s.endLine()
		case '\n':
			s.endLine()
		default:
			s.line = append(s.line, c)
		}
	}
}

func (s *sseInspector) endLine() {
	line := s.line
	s.line = s.line[:0]
	if len(line) == 0 {
		s.dispatch()
		return
	}
	if line[0] == ':' {
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "event":
		s.event = string(value)
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	}
}

func (s *sseInspector) dispatch() {
	defer func() { s.event, s.data, s.hasData = "", s.data[:0], false }()
	if len(s.data) == 0 || (s.event != "" && s.event != "message") {
		return
	}
	f, answer := checkMessage(s.data)
	if f != nil {
		s.trace.setFault(f.class, f.reason)
		s.answered = true // stop: the stream is broken
		return
	}
	if answer {
		s.answered = true
	}
}

func (s *sseInspector) finish() {
	if !s.answered && (len(s.line) > 0 || s.hasData) {
		s.endLine()
		s.dispatch()
	}
	if s.expectAnswer && !s.answered {
		s.trace.setFault(ClassProtocol, "The server ended its event stream without answering.")
	}
}
