package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// newTransportClient returns an HTTP client that keeps up to conns
// keep-alive connections to one host, for one pool of workers.
func newTransportClient(conns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // never route load through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// A target is where heartbeats go: one URL, parsed once, and the timeout of one request. Beaters of
// one target share it read-only.
type target struct {
	addr    string      // host:port to dial
	tls     *tls.Config // nil for http://
	head    []byte      // the request line and headers, up to the Content-Length value
	timeout time.Duration
}

// newTarget parses rawURL (http or https, the path is what is posted to) for beaters that
// authenticate with auth (an Authorization header value) and give a request at most timeout.
func newTarget(rawURL, auth string, timeout time.Duration) (*target, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("heartbeat URL: %w", err)
	}
	t := &target{addr: u.Host, timeout: timeout}
	switch u.Scheme {
	case "http":
		if u.Port() == "" {
			t.addr = net.JoinHostPort(u.Hostname(), "80")
		}
	case "https":
		if u.Port() == "" {
			t.addr = net.JoinHostPort(u.Hostname(), "443")
		}
		t.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	default:
		return nil, fmt.Errorf("heartbeat URL %q: scheme must be http or https", rawURL)
	}
	if u.Host == "" || strings.ContainsAny(auth, "\r\n") {
		return nil, fmt.Errorf("heartbeat URL %q: no host, or a line break in the key", rawURL)
	}
	t.head = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: mcpfleet-load/1\r\nAuthorization: %s\r\n"+
		"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: ", u.RequestURI(), u.Host, auth)
	return t, nil
}

// A beater sends heartbeats, one at a time, over its own keep-alive HTTP/1.1 connection, with little
// overhead: the request head is built once, the body is pre-encoded, the answer is read into a reused
// buffer, and no goroutine but the caller's takes part (net/http's client spends more CPU per request
// than a no-op server does to answer it, and the load generator shares the machine with the service).
// It dials on first use and again after a failed request. One beater per worker goroutine: it is not
// safe for concurrent use, except that a cancelled context interrupts a request in flight. Close
// releases its connection.
type beater struct {
	t *target

	mu   sync.Mutex // guards conn's replacement against interrupt
	conn net.Conn
	br   *bufio.Reader
	used bool // conn has answered a request: a failure before any answer byte may be its idle close

	ctx  context.Context // the context interrupt watches
	stop func() bool

	wbuf, buf []byte
}

func newBeater(t *target) *beater {
	return &beater{t: t, wbuf: make([]byte, 0, len(t.head)+256), buf: make([]byte, 0, 1024)}
}

// errAnswer is a malformed HTTP answer.
var errAnswer = errors.New("malformed HTTP answer")

// maxAnswer bounds the answer body kept; the rest is read and dropped.
const maxAnswer = 64 << 10

// beat posts body and returns the HTTP status and the answer body (valid until the next beat). A
// request that fails on a reused connection before any byte of its answer arrived is sent once more
// on a new connection: the server may have closed the idle connection (as after a restart), and a
// heartbeat sent twice is harmless. Any other failure closes the connection and is returned.
func (b *beater) beat(ctx context.Context, body []byte) (int, []byte, error) {
	if ctx != b.ctx {
		if b.stop != nil {
			b.stop()
		}
		b.ctx, b.stop = ctx, context.AfterFunc(ctx, b.interrupt)
	}
	for attempt := 0; ; attempt++ {
		reused := b.conn != nil && b.used
		status, answer, answered, err := b.roundTrip(ctx, body)
		if err == nil {
			return status, answer, nil
		}
		b.drop()
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		if !reused || answered || attempt > 0 || !closedIdle(err) {
			return status, nil, err
		}
	}
}

// closedIdle reports whether err is what a write to or read from a connection the server closed
// looks like.
func closedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// roundTrip sends one request and reads its answer; answered says whether any byte of the answer
// came back.
func (b *beater) roundTrip(ctx context.Context, body []byte) (status int, answer []byte, answered bool, err error) {
	if b.conn == nil {
		if err := b.dial(ctx); err != nil {
			return 0, nil, false, err
		}
	}
	if err := b.conn.SetDeadline(time.Now().Add(b.t.timeout)); err != nil {
		return 0, nil, false, err
	}
	if err := ctx.Err(); err != nil { // cancelled before the deadline above: interrupt may have run first
		return 0, nil, false, err
	}
	b.wbuf = append(b.wbuf[:0], b.t.head...)
	b.wbuf = strconv.AppendInt(b.wbuf, int64(len(body)), 10)
	b.wbuf = append(b.wbuf, "\r\n\r\n"...)
	b.wbuf = append(b.wbuf, body...)
	if _, err := b.conn.Write(b.wbuf); err != nil {
		return 0, nil, false, err
	}
	status, answer, keep, err := readAnswer(b.br, b.buf[:0])
	if answer != nil {
		b.buf = answer[:0]
	}
	if err != nil {
		return status, nil, status != 0 || b.br.Buffered() > 0, err
	}
	b.used = true
	if !keep {
		b.drop()
	}
	return status, answer, true, nil
}

func (b *beater) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", b.t.addr)
	if err != nil {
		return err
	}
	if b.t.tls != nil {
		tc := tls.Client(conn, b.t.tls)
		hctx, cancel := context.WithTimeout(ctx, b.t.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = conn.Close()
			return err
		}
		conn = tc
	}
	b.mu.Lock()
	b.conn, b.used = conn, false
	b.mu.Unlock()
	if b.br == nil {
		b.br = bufio.NewReaderSize(conn, 4096)
	} else {
		b.br.Reset(conn)
	}
	return nil
}

// interrupt ends the request in flight when the beater's context is cancelled.
func (b *beater) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.SetDeadline(time.Unix(1, 0))
	}
}

// drop closes the connection, if any.
func (b *beater) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close()
		b.conn = nil
	}
}

// Close releases the beater's connection and its context watch.
func (b *beater) Close() {
	if b.stop != nil {
		b.stop()
	}
	b.drop()
}

// readAnswer reads one HTTP/1.1 answer from br: its status, its body appended to buf (at most
// maxAnswer bytes kept), and whether the connection may carry another request. A body is delimited
// by Content-Length, by chunked transfer coding, or (for neither) by the connection's end.
func readAnswer(br *bufio.Reader, buf []byte) (status int, body []byte, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	keep = line[7] == '1' // HTTP/1.0 closes unless it says otherwise; not expected from Go servers
	length, chunked := int64(-1), false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				err = fmt.Errorf("%w: a header line over %d bytes", errAnswer, br.Size())
			}
			return status, nil, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return status, nil, false, fmt.Errorf("%w: header line %q", errAnswer, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return status, nil, false, fmt.Errorf("%w: Content-Length %q", errAnswer, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
			if !chunked {
				return status, nil, false, fmt.Errorf("%w: Transfer-Encoding %q", errAnswer, value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case status < 200 || status == http.StatusNoContent || status == http.StatusNotModified:
		return status, buf, keep, nil
	case chunked:
		body, err = readChunked(br, buf)
		return status, body, keep, err
	case length >= 0:
		body, err = readN(br, buf, length)
		return status, body, keep, err
	default:
		body, err = readBody(buf, br)
		return status, body, false, err
	}
}

// readChunked reads a chunked body (RFC 9112 §7.1) and its trailer section, appending to buf.
func readChunked(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return buf, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return buf, fmt.Errorf("%w: chunk size %q", errAnswer, line)
		}
		if n == 0 {
			for { // trailer fields, then the empty line
				line, err := br.ReadSlice('\n')
				if err != nil {
					return buf, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return buf, nil
				}
			}
		}
		if buf, err = readN(br, buf, n); err != nil {
			return buf, err
		}
		if _, err := br.Discard(2); err != nil { // the chunk's CRLF
			return buf, err
		}
	}
}

// readN appends the next n bytes of br to buf, keeping at most maxAnswer bytes in all and reading (and
// dropping) the rest; a body that ends early is io.ErrUnexpectedEOF.
func readN(br *bufio.Reader, buf []byte, n int64) ([]byte, error) {
	keep := int(min(n, int64(max(maxAnswer-len(buf), 0))))
	buf = slices.Grow(buf, keep)
	got, err := io.ReadFull(br, buf[len(buf):len(buf)+keep])
	buf = buf[:len(buf)+got]
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	if rest := n - int64(keep); rest > 0 {
		if _, err := br.Discard(int(rest)); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// readBody appends r to buf until r ends, keeping at most maxAnswer bytes in all and reading (and
// dropping) the rest.
func readBody(buf []byte, r io.Reader) ([]byte, error) {
	for len(buf) < maxAnswer {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), maxAnswer)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	_, err := io.Copy(io.Discard, r)
	return buf, err
}

var statusKey = []byte(`"status"`)

// answerStatus finds the top-level "status" string of a heartbeat answer
// without decoding it. ok is false if there is none.
func answerStatus(b []byte) (status []byte, ok bool) {
	i := bytes.Index(b, statusKey)
	if i < 0 {
		return nil, false
	}
	rest := bytes.TrimLeft(b[i+len(statusKey):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return nil, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return nil, false
	}
	return rest[1 : 1+end], true
}

// isTimeout reports whether a request failed because a deadline passed: its own timeout, or its
// context's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// errorKind names a failed request for the report: "timeout",
// "connection refused", "transport", "HTTP 503 <slug>", "bad answer".
func errorKind(status int, body []byte, err error) string {
	if err != nil {
		switch {
		case isTimeout(err):
			return "timeout"
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused"
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return "connection reset"
		}
		return "transport"
	}
	if status >= 200 && status <= 299 {
		return "bad answer"
	}
	var p struct {
		Type string `json:"type"`
	}
	kind := "HTTP " + strconv.Itoa(status)
	if json.Unmarshal(body, &p) == nil && p.Type != "" {
		slug := p.Type
		if i := bytes.LastIndexByte([]byte(slug), '/'); i >= 0 {
			slug = slug[i+1:]
		}
		kind += " " + slug
	}
	return kind
}

// errorCounts counts errors by kind. Safe for concurrent use.
type errorCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (e *errorCounts) add(kind string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]uint64{}
	}
	e.m[kind]++
}

func (e *errorCounts) snapshot() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]uint64, len(e.m))
	for k, v := range e.m {
		out[k] = v
	}
	return out
}

func (e *errorCounts) total() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	for _, v := range e.m {
		n += v
	}
	return n
}
