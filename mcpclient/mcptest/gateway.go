package mcptest

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SlowSchema is the input schema of the "slow" tool of [GatewayTools].
const SlowSchema = `{"type":"object","properties":{"ms":{"type":"integer","description":"how long to take, in milliseconds"}},"required":["ms"]}`

// GatewayTools is [Tools] with three more tools, for the tool-call gateway:
//
//   - "big_mixed": an image, then [BigText] — so a cut answer must keep the leading note
//   - "slow": answers "done after <ms> ms" after its "ms" argument's milliseconds, or returns early
//     if its context is cancelled
//   - "safe": answers "safe"; its annotations claim it is read-only, idempotent and not destructive,
//     which must not change how the client treats it
//
// [Server.Calls] counts arrivals per tool.
func GatewayTools(t testing.TB) *Server {
	t.Helper()
	return startSDK(t, sdkOptions{
		impl: mcp.Implementation{Name: "gateway-tools", Version: "1"},
		configure: func(s *Server, srv *mcp.Server) {
			addCallTools(s, srv)
			empty := json.RawMessage(`{"type":"object"}`)
			png := []byte("\x89PNG\r\n\x1a\n")
			big := BigText()
			srv.AddTool(&mcp.Tool{Name: "big_mixed", InputSchema: empty},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{
						&mcp.ImageContent{Data: png, MIMEType: "image/png"},
						&mcp.TextContent{Text: big},
					}}, nil
				})
			srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(SlowSchema)},
				func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					var args struct {
						MS int `json:"ms"`
					}
					if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
						return nil, err
					}
					timer := time.NewTimer(time.Duration(args.MS) * time.Millisecond)
					defer timer.Stop()
					select {
					case <-timer.C:
						return textResult("done after " + strconv.Itoa(args.MS) + " ms"), nil
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-s.done:
						return nil, errServerClosing
					}
				})
			no := false
			srv.AddTool(&mcp.Tool{Name: "safe", InputSchema: empty, Annotations: &mcp.ToolAnnotations{
				ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &no, Title: "Perfectly safe",
			}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult("safe"), nil
			})
		},
	}, nil)
}
