package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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

// beater sends heartbeats with little overhead: one request template whose
// headers are built once, pre-encoded bodies, and a reused answer buffer.
// One beater per worker goroutine; it is not safe for concurrent use.
type beater struct {
	hc   *http.Client
	tmpl *http.Request
	buf  []byte
}

func newBeater(hc *http.Client, url, auth string) (*beater, error) {
	tmpl, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return nil, fmt.Errorf("heartbeat request: %w", err)
	}
	tmpl.Header = http.Header{
		"Authorization": {auth},
		"Content-Type":  {"application/json"},
		"Accept":        {"application/json"},
		"User-Agent":    {"mcpfleet-load/1"},
	}
	return &beater{hc: hc, tmpl: tmpl, buf: make([]byte, 0, 1024)}, nil
}

// beat sends one heartbeat with the pre-encoded body and returns the HTTP
// status and the answer body (valid until the next beat).
func (b *beater) beat(ctx context.Context, body []byte) (int, []byte, error) {
	req := b.tmpl.WithContext(ctx) // a shallow copy; the header map is shared read-only
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	b.buf, err = readInto(b.buf[:0], resp.Body, 64<<10)
	_ = resp.Body.Close()
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, b.buf, nil
}

// readInto appends r to buf up to limit bytes and drains the rest.
func readInto(buf []byte, r io.Reader, limit int) ([]byte, error) {
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
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

// errorKind names a failed request for the report: "timeout",
// "connection refused", "transport", "HTTP 503 <slug>", "bad answer".
func errorKind(status int, body []byte, err error) string {
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
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
