package httpapi

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/telemetry"
)

// heartbeatRoute is the route whose answers are counted as accepted or rejected heartbeats.
const heartbeatRoute = "/v1/mcp/servers/heartbeat"

// observe records every request's duration by method, route and status code and, for the heartbeat
// route, whether the heartbeat was accepted (200) or rejected and why (the status code's reason:
// telemetry.StatusReason). It runs outside the recoverer, so a panic counts as the 500 it became.
func (s *Server) observe() gin.HandlerFunc {
	m := s.deps.Metrics
	if m == nil {
		return func(c *gin.Context) { c.Next() }
	}
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status, route, ctx := c.Writer.Status(), c.FullPath(), c.Request.Context()
		m.HTTPRequest(ctx, c.Request.Method, route, status, time.Since(start))
		if route == heartbeatRoute {
			if status == http.StatusOK {
				m.HeartbeatAccepted(ctx)
			} else {
				m.HeartbeatRejected(ctx, telemetry.StatusReason(status))
			}
		}
	}
}
