// Package mcptest runs real MCP servers on loopback for tests.
//
// Every constructor starts an [httptest.Server] on 127.0.0.1, registers its
// shutdown with t.Cleanup and returns a [*Server] whose URL is the MCP
// endpoint. Most servers are written with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk/mcp) over Streamable HTTP; the
// legacy server and the deliberately broken ones (not JSON-RPC, HTTP 500,
// garbage, ill-formed, slow) are small hand-written handlers, because the Go
// SDK server cannot be made to misbehave in those ways — see [Legacy].
//
// Every server records each JSON-RPC message it receives before handling it
// (see [Server.Received] and [Server.WaitFor]) and counts tools/call requests
// per tool name as they arrive ([Server.Calls]), so tests can assert what
// reached the far side rather than what the client believes it sent.
//
// Servers honour request contexts: nothing blocks past the test's cleanup.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Received is one JSON-RPC message as it arrived at a test server.
type Received struct {
	// HTTPMethod is the HTTP method of the request that carried the message.
	HTTPMethod string
	// Method is the JSON-RPC method; empty for a JSON-RPC response.
	Method string
	// ID is the raw JSON-RPC id; nil for a notification.
	ID json.RawMessage
	// Params is the raw params member.
	Params json.RawMessage
	// Header is a copy of the HTTP request header.
	Header http.Header
}

// RequestID returns params.requestId of a notifications/cancelled message as
// raw JSON, or nil.
func (r Received) RequestID() json.RawMessage {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if err := json.Unmarshal(r.Params, &p); err != nil {
		return nil
	}
	return p.RequestID
}

// ToolName returns params.name of a tools/call message, or "".
func (r Received) ToolName() string {
	var p struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(r.Params, &p); err != nil {
		return ""
	}
	return p.Name
}

// Server is a running test MCP server. Its methods are safe for concurrent use.
type Server struct {
	// URL is the MCP endpoint.
	URL string

	srv  *httptest.Server
	done chan struct{} // closed at cleanup: blocking handlers return

	mu       sync.Mutex
	received []Received
	calls    map[string]int
	changed  chan struct{} // closed and replaced whenever received grows

	handlerStartedOnce   sync.Once
	handlerStarted       chan struct{}
	handlerCancelledOnce sync.Once
	handlerCancelled     chan struct{}
}

// start builds the handler for s, wraps it with the recording middleware
// and serves it on loopback.
func start(t testing.TB, build func(s *Server) http.Handler) *Server {
	t.Helper()
	s := &Server{
		done:             make(chan struct{}),
		calls:            map[string]int{},
		changed:          make(chan struct{}),
		handlerStarted:   make(chan struct{}),
		handlerCancelled: make(chan struct{}),
	}
	s.srv = httptest.NewServer(s.record(build(s)))
	s.URL = s.srv.URL + "/mcp"
	t.Cleanup(s.Close)
	return s
}

// Close stops the server: blocking handlers are released, client
// connections are closed and Close waits for handlers to return. It is
// called by t.Cleanup and is idempotent.
func (s *Server) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Done is closed when the server is shutting down.
func (s *Server) Done() <-chan struct{} { return s.done }

// Received returns a copy of every JSON-RPC message received so far, in
// arrival order.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Methods returns the JSON-RPC methods received so far, in arrival order.
func (s *Server) Methods() []string {
	var out []string
	for _, r := range s.Received() {
		if r.Method != "" {
			out = append(out, r.Method)
		}
	}
	return out
}

// Calls reports how many tools/call requests for tool arrived.
func (s *Server) Calls(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// WaitFor blocks until a received message satisfies match, and returns it.
// It returns ctx.Err() if ctx ends first.
func (s *Server) WaitFor(ctx context.Context, match func(Received) bool) (Received, error) {
	seen := 0
	for {
		s.mu.Lock()
		msgs := s.received[seen:]
		seen = len(s.received)
		changed := s.changed
		s.mu.Unlock()
		for _, m := range msgs {
			if match(m) {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return Received{}, ctx.Err()
		case <-changed:
		}
	}
}

// HandlerStarted is closed when the handler of the "hang" tool starts (see
// [Tools]). A call can arrive and still be cancelled before its handler
// runs; wait for this before cancelling to observe the handler's side.
func (s *Server) HandlerStarted() <-chan struct{} { return s.handlerStarted }

// HandlerCancelled is closed when the handler of the "hang" tool observes
// that its context was cancelled (see [Tools]).
func (s *Server) HandlerCancelled() <-chan struct{} { return s.handlerCancelled }

func (s *Server) markHandlerStarted() {
	s.handlerStartedOnce.Do(func() { close(s.handlerStarted) })
}

func (s *Server) markHandlerCancelled() {
	s.handlerCancelledOnce.Do(func() { close(s.handlerCancelled) })
}

func (s *Server) add(r Received) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = append(s.received, r)
	if r.Method == "tools/call" {
		s.calls[r.ToolName()]++
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// wireMessage is the subset of a JSON-RPC message the recorder reads.
type wireMessage struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params json.RawMessage `json:"params"`
}

// record reads and records POST bodies, then hands the request to h with
// the body restored. A tools/call for the tool named "drop" is recorded and
// then answered by dropping the connection.
func (s *Server) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			s.add(Received{HTTPMethod: r.Method, Header: r.Header.Clone()})
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msgs []wireMessage
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) > 0 && trimmed[0] == '[' {
			_ = json.Unmarshal(trimmed, &msgs)
		} else {
			var m wireMessage
			if json.Unmarshal(trimmed, &m) == nil {
				msgs = append(msgs, m)
			}
		}
		drop := false
		for _, m := range msgs {
			rec := Received{HTTPMethod: r.Method, Method: m.Method, ID: m.ID, Params: m.Params, Header: r.Header.Clone()}
			s.add(rec)
			if m.Method == "tools/call" && rec.ToolName() == "drop" {
				drop = true
			}
		}
		if drop {
			dropConnection(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// dropConnection closes the underlying connection without answering.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("mcptest: response writer cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// waitDone blocks until ctx ends or the server shuts down, and reports
// which happened first: true if ctx ended.
func (s *Server) waitDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-s.done:
		return false
	}
}

var errServerClosing = errors.New("mcptest: server closing")
