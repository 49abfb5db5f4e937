package mcptest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// LegacyProtocolVersion is the protocol version [Legacy] answers initialize
// with.
const LegacyProtocolVersion = "2025-03-26"

// LegacySchema is the draft-07 input schema of [Legacy]'s "get_weather"
// tool, in the shape other SDKs (zod-to-json-schema, pydantic) publish: it
// carries $schema, title, default and additionalProperties:false.
const LegacySchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "title": "GetWeatherArguments",
  "properties": {
    "city": {"type": "string", "title": "City", "description": "City name", "default": "Paris"},
    "units": {"type": "string", "title": "Units", "enum": ["metric", "imperial"], "default": "metric"},
    "days": {"type": "integer", "title": "Days", "default": 1, "examples": [1, 3]}
  },
  "required": ["city"],
  "additionalProperties": false
}`

// LegacyConfig configures [LegacyWith].
type LegacyConfig struct {
	// ProtocolVersion answers initialize; default [LegacyProtocolVersion].
	ProtocolVersion string
	// Name is the server name in serverInfo; default "legacy".
	Name string
}

// Legacy is a hand-written server in the shape of servers built with the
// TypeScript and Python SDKs before MCP 2026-07-28:
//
//   - it knows initialize only: server/discover, like any request without a
//     valid Mcp-Session-Id, is answered 400 with a JSON-RPC error body;
//   - initialize issues an Mcp-Session-Id, and every later request must
//     carry it (unknown ids are answered 404);
//   - every POST that carries a request is answered 200 text/event-stream
//     with exactly one "message" event; notifications are answered 202;
//   - GET is answered 405, DELETE ends the session;
//   - its one tool, "get_weather", publishes [LegacySchema].
//
// It is hand-written because the Go SDK's server cannot be made to behave
// like this: a stateful SDK server answers a request without a session id
// from an ephemeral session (200 with a JSON-RPC error) instead of
// rejecting it, and it knows server/discover.
func Legacy(t testing.TB) *Server {
	t.Helper()
	return LegacyWith(t, LegacyConfig{})
}

// LegacyWith is [Legacy] configured by cfg.
func LegacyWith(t testing.TB, cfg LegacyConfig) *Server {
	t.Helper()
	if cfg.ProtocolVersion == "" {
		cfg.ProtocolVersion = LegacyProtocolVersion
	}
	if cfg.Name == "" {
		cfg.Name = "legacy"
	}
	l := &legacy{cfg: cfg, sessions: map[string]bool{}}
	return start(t, func(*Server) http.Handler { return l })
}

type legacy struct {
	cfg      LegacyConfig
	mu       sync.Mutex
	sessions map[string]bool
}

func (l *legacy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		l.mu.Lock()
		delete(l.sessions, r.Header.Get("Mcp-Session-Id"))
		l.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		ID      json.RawMessage `json:"id"`
		Params  json.RawMessage `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || msg.JSONRPC != "2.0" {
		writeJSONRPCError(w, http.StatusBadRequest, nil, -32700, "Parse error")
		return
	}
	if msg.Method == "initialize" {
		sid := rand.Text()
		l.mu.Lock()
		l.sessions[sid] = true
		l.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", sid)
		writeEvent(w, msg.ID, map[string]any{
			"protocolVersion": l.cfg.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": l.cfg.Name, "version": "0.9.1"},
		})
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	if sid == "" {
		writeJSONRPCError(w, http.StatusBadRequest, nil, -32000, "Bad Request: No valid session ID provided")
		return
	}
	l.mu.Lock()
	known := l.sessions[sid]
	l.mu.Unlock()
	if !known {
		writeJSONRPCError(w, http.StatusNotFound, nil, -32001, "Session not found")
		return
	}
	if len(msg.ID) == 0 || string(msg.ID) == "null" {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	switch msg.Method {
	case "tools/list":
		writeEvent(w, msg.ID, map[string]any{"tools": []any{map[string]any{
			"name":        "get_weather",
			"description": "Current weather for a city.",
			"inputSchema": json.RawMessage(LegacySchema),
		}}})
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		if p.Name != "get_weather" {
			writeEventError(w, msg.ID, -32602, fmt.Sprintf("Unknown tool: %s", p.Name))
			return
		}
		writeEvent(w, msg.ID, map[string]any{"content": []any{
			map[string]any{"type": "text", "text": "sunny; arguments " + string(p.Arguments)},
		}})
	case "ping":
		writeEvent(w, msg.ID, map[string]any{})
	default:
		writeEventError(w, msg.ID, -32601, "Method not found")
	}
}

func writeEvent(w http.ResponseWriter, id json.RawMessage, result any) {
	writeSSE(w, map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func writeEventError(w http.ResponseWriter, id json.RawMessage, code int, message string) {
	writeSSE(w, map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": message}})
}

func writeSSE(w http.ResponseWriter, msg any) {
	data, err := json.Marshal(msg)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
}

func writeJSONRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, message string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": message},
	})
}

// NotJSONRPC answers every request 200 text/html, like a web server or a
// login page standing where the MCP endpoint was expected.
func NotJSONRPC(t testing.TB) *Server {
	t.Helper()
	return start(t, fixed(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "<!doctype html><html><body>Welcome</body></html>")
	}))
}

// HTTP500 answers every request 500 Internal Server Error.
func HTTP500(t testing.TB) *Server {
	t.Helper()
	return start(t, fixed(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal error", http.StatusInternalServerError)
	}))
}

// Garbage answers every POST 200 application/json with a body that is not
// JSON.
func Garbage(t testing.TB) *Server {
	t.Helper()
	return start(t, fixed(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":`)
	}))
}

// IllFormed answers every request with well-formed JSON-RPC whose result does
// not have the shape the method requires (protocolVersion is a number,
// serverInfo a string, tools a string).
func IllFormed(t testing.TB) *Server {
	t.Helper()
	return start(t, fixed(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&msg)
		if len(msg.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": map[string]any{
			"protocolVersion": 20250326, "serverInfo": "nope", "tools": "nope", "supportedVersions": "nope",
		}})
	}))
}

// Slow accepts every request and never answers it: the handler waits until
// the request's context ends (the client gives up) or the server closes.
func Slow(t testing.TB) *Server {
	t.Helper()
	return start(t, func(s *Server) http.Handler {
		return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			s.waitDone(r.Context())
		})
	})
}

// Redirect answers every request 307 to the same path on target.
func Redirect(t testing.TB, target string) *Server {
	t.Helper()
	return start(t, fixed(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
}

// fixed adapts a handler function that needs no access to its Server.
func fixed(f http.HandlerFunc) func(*Server) http.Handler {
	return func(*Server) http.Handler { return f }
}
