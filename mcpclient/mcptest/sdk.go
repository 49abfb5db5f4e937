package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HostileName is the server name and title published by [Hostile].
const HostileName = `<img src=x onerror=alert(1)>`

// ModernTTL is the catalogue cache hint (ttlMs) [Modern] sends with every
// tools/list page.
const ModernTTL = 60000

// EchoSchema is the input schema of the "echo" tool most SDK servers carry.
const EchoSchema = `{"type":"object","properties":{"text":{"type":"string","description":"what to echo"}},"required":["text"]}`

// sdkOptions configure an SDK-backed test server.
type sdkOptions struct {
	impl      mcp.Implementation
	stateful  bool // stateful handlers negotiate through initialize only
	json      bool // answer POSTs with application/json instead of SSE
	pageSize  int
	ttlMs     int
	configure func(s *Server, srv *mcp.Server)
}

func startSDK(t testing.TB, o sdkOptions, wrap func(http.Handler) http.Handler) *Server {
	t.Helper()
	impl := o.impl
	opts := &mcp.ServerOptions{PageSize: o.pageSize}
	if o.ttlMs > 0 {
		ttl := o.ttlMs
		opts.SetCacheable = func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			if _, ok := req.(*mcp.ListToolsRequest); ok {
				c.TTLMs = ttl
			}
		}
	}
	return start(t, func(s *Server) http.Handler {
		srv := mcp.NewServer(&impl, opts)
		if o.configure != nil {
			o.configure(s, srv)
		}
		var h http.Handler = mcp.NewStreamableHTTPHandler(
			func(*http.Request) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{
				Stateless:                    !o.stateful,
				JSONResponse:                 o.json,
				PropagateRequestCancellation: true,
			})
		if wrap != nil {
			h = wrap(h)
		}
		return h
	})
}

func addEcho(srv *mcp.Server) {
	srv.AddTool(&mcp.Tool{
		Name:        "echo",
		Description: "Echoes its text argument.",
		InputSchema: json.RawMessage(EchoSchema),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, fmt.Errorf("decoding arguments: %w", err)
		}
		return textResult("echo: " + args.Text), nil
	})
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// Modern is a Go SDK server that speaks MCP 2026-07-28: it is stateless and
// answers server/discover, so a client negotiates through server/discover.
// It serves one tool, "echo", answers with application/json, and sends
// ttlMs = [ModernTTL] on tools/list. Its server info is
// {name "modern", version "1.2.3", title "Modern Test Server"}.
func Modern(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "modern", Version: "1.2.3", Title: "Modern Test Server"},
		json:      true,
		ttlMs:     ModernTTL,
		configure: func(_ *Server, srv *mcp.Server) { addEcho(srv) },
	}, nil)
}

// Stateful is a Go SDK server in its default stateful mode. The SDK limits
// stateful servers to the pre-2026 protocol, so a client negotiates through
// initialize; the server issues Mcp-Session-Id and answers over SSE. It
// serves "echo".
func Stateful(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "stateful", Version: "0.5.0"},
		stateful:  true,
		configure: func(_ *Server, srv *mcp.Server) { addEcho(srv) },
	}, nil)
}

// Hostile is [Modern] whose server info name and title are [HostileName].
func Hostile(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: HostileName, Version: "6.6.6", Title: HostileName},
		json:      true,
		configure: func(_ *Server, srv *mcp.Server) { addEcho(srv) },
	}, nil)
}

// Bearer is [Modern] behind bearer authentication: a request without
// "Authorization: Bearer <token>" is answered 401 with a WWW-Authenticate
// challenge.
func Bearer(t testing.TB, token string) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "bearer", Version: "1"},
		json:      true,
		configure: func(_ *Server, srv *mcp.Server) { addEcho(srv) },
	}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mcptest"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
}

// Header is [Modern] behind header authentication: a request whose header
// name does not carry value is answered 403.
func Header(t testing.TB, name, value string) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "header", Version: "1"},
		json:      true,
		configure: func(_ *Server, srv *mcp.Server) { addEcho(srv) },
	}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(name) != value {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
}

// PagedToolName names the i-th tool (from 0) of a [Paged] server; names sort
// in index order.
func PagedToolName(i int) string { return fmt.Sprintf("tool_%04d", i) }

// Paged is a modern Go SDK server with n tools served pageSize per
// tools/list page, so the catalogue spans ceil(n/pageSize) pages.
func Paged(t testing.TB, n, pageSize int) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:     mcp.Implementation{Name: "paged", Version: "1"},
		json:     true,
		pageSize: pageSize,
		configure: func(_ *Server, srv *mcp.Server) {
			for i := range n {
				srv.AddTool(&mcp.Tool{
					Name:        PagedToolName(i),
					InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
				}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return textResult("ok"), nil
				})
			}
		},
	}, nil)
}

// BadSchemaTools returns a new map of each tool of [BadSchemas] to its input
// schema. Tools whose name starts with "good_" are inside the supported subset
// (some only after annotations are dropped); every "bad_" tool is outside it.
func BadSchemaTools() map[string]string { return maps.Clone(badSchemaTools) }

var badSchemaTools = map[string]string{
	"good_plain":     `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`,
	"good_annotated": `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","title":"Args","properties":{"q":{"type":"string","title":"Query","default":"x","examples":["a"],"format":"uri"}}}`,
	"bad_ref":        `{"type":"object","properties":{"a":{"$ref":"#/definitions/a"}},"definitions":{"a":{"type":"string"}}}`,
	"bad_oneof":      `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"number"}]}}}`,
	"bad_pattern":    `{"type":"object","patternProperties":{"^x":{"type":"string"}}}`,
	"bad_addlschema": `{"type":"object","additionalProperties":{"type":"string"}}`,
	"bad_ifthen":     `{"type":"object","if":{"properties":{"a":{"type":"string"}}},"then":{"required":["b"]}}`,
	"bad_deep":       `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"object","properties":{"d":{"type":"object","properties":{"e":{"type":"object","properties":{"f":{"type":"object","properties":{"g":{"type":"object","properties":{"h":{"type":"string"}}}}}}}}}}}}}}}}}`,
}

// BadSchemas is a modern Go SDK server serving [BadSchemaTools].
func BadSchemas(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl: mcp.Implementation{Name: "badschemas", Version: "1"},
		json: true,
		configure: func(_ *Server, srv *mcp.Server) {
			for name, schema := range badSchemaTools {
				srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(schema)},
					func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
						return textResult("ok"), nil
					})
			}
		},
	}, nil)
}

// Changing is a modern Go SDK server whose catalogue changes between
// catalogue reads: every tools/list request without a cursor starts a new
// generation g (1, 2, ...) and the catalogue is then the single tool
// "gen_<g>".
func Changing(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl: mcp.Implementation{Name: "changing", Version: "1"},
		json: true,
		configure: func(_ *Server, srv *mcp.Server) {
			var mu sync.Mutex
			gen := 0
			current := ""
			srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if r, ok := req.(*mcp.ListToolsRequest); ok && (r.Params == nil || r.Params.Cursor == "") {
						mu.Lock()
						gen++
						if current != "" {
							srv.RemoveTools(current)
						}
						current = fmt.Sprintf("gen_%d", gen)
						srv.AddTool(&mcp.Tool{Name: current, InputSchema: json.RawMessage(`{"type":"object"}`)},
							func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
								return textResult("ok"), nil
							})
						mu.Unlock()
					}
					return next(ctx, method, req)
				}
			})
		},
	}, nil)
}

// BigTextSize is the length in bytes of the "big_text" tool's answer.
const BigTextSize = 60 * 1024

// HugeTextSize is the length in bytes of the "huge" tool's answer: more than
// the client's default 2 MiB response cap.
const HugeTextSize = 3 << 20

// BigText returns the "big_text" answer: [BigTextSize] bytes of text mixing
// one-, two- and three-byte UTF-8 sequences.
func BigText() string {
	const unit = "héllo wörld ✓ " // 1+2+3+... bytes: cuts land inside runes
	var b strings.Builder
	for b.Len() < BigTextSize {
		b.WriteString(unit)
	}
	s := b.String()[:BigTextSize]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + strings.Repeat(".", BigTextSize-len(s))
}

// Tools is a modern Go SDK server (stateless, SSE answers) for tool calls:
//
//   - "echo": answers "echo: <text>"
//   - "text": answers "hello from text"
//   - "mixed": text "before", an image, an audio clip, an embedded resource,
//     a resource link, text "after"
//   - "image_only": a single image
//   - "is_error": isError with text "boom"
//   - "big_text": [BigText]
//   - "huge": [HugeTextSize] bytes of text
//   - "hang": closes [Server.HandlerStarted], blocks until its context is
//     cancelled, then closes [Server.HandlerCancelled]
//   - "drop": the connection is dropped once the call has arrived
//
// [Server.Calls] counts arrivals per tool.
func Tools(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "tools", Version: "1"},
		configure: addCallTools,
	}, nil)
}

// ToolsStateful is [Tools] on a stateful Go SDK server (initialize,
// Mcp-Session-Id, SSE), where cancellation can only travel as a
// notifications/cancelled message within the session.
func ToolsStateful(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl:      mcp.Implementation{Name: "tools-stateful", Version: "1"},
		stateful:  true,
		configure: addCallTools,
	}, nil)
}

func addCallTools(s *Server, srv *mcp.Server) {
	addEcho(srv)
	empty := json.RawMessage(`{"type":"object"}`)
	add := func(name string, h mcp.ToolHandler) {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: empty}, h)
	}
	png := []byte("\x89PNG\r\n\x1a\n")
	add("text", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("hello from text"), nil
	})
	add("mixed", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "before"},
			&mcp.ImageContent{Data: png, MIMEType: "image/png"},
			&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "embedded"}},
			&mcp.ResourceLink{URI: "https://example.com/r", Name: "r"},
			&mcp.TextContent{Text: "after"},
		}}, nil
	})
	add("image_only", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: png, MIMEType: "image/png"}}}, nil
	})
	add("is_error", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, nil
	})
	big := BigText()
	add("big_text", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(big), nil
	})
	add("huge", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(strings.Repeat("x", HugeTextSize)), nil
	})
	add("hang", func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.markHandlerStarted()
		if s.waitDone(ctx) {
			s.markHandlerCancelled()
			return nil, ctx.Err()
		}
		return nil, errServerClosing
	})
	add("drop", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// Never reached: the recorder drops the connection first.
		return textResult("unreachable"), nil
	})
}

// NULText is the answer of the "nul_text" tool of [NULs]: text with a NUL
// character (U+0000), which PostgreSQL text and jsonb cannot hold.
const NULText = "before\x00after"

// NULs is a modern Go SDK server whose catalogue and answers carry NUL
// characters (U+0000):
//
//   - "echo": as [Modern]'s
//   - "nul_text": answers [NULText]
//   - "nul_description": a description with a NUL in it
//   - "nul_schema": a NUL in its input schema's property description
func NULs(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl: mcp.Implementation{Name: "nuls", Version: "1"},
		json: true,
		configure: func(_ *Server, srv *mcp.Server) {
			addEcho(srv)
			ok := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("ok"), nil }
			srv.AddTool(&mcp.Tool{Name: "nul_text", Description: "answers with a NUL", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return textResult(NULText), nil
				})
			srv.AddTool(&mcp.Tool{Name: "nul_description", Description: "lists\x00events", InputSchema: json.RawMessage(`{"type":"object"}`)}, ok)
			srv.AddTool(&mcp.Tool{Name: "nul_schema",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"a\u0000b"}}}`)}, ok)
		},
	}, nil)
}
