package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// mcpRoutes mounts the MCP endpoint (Deps.MCP) at /mcp for every method: it answers its own refusals as
// JSON-RPC errors, and authenticates through Authenticate.
func (s *Server) mcpRoutes(r *gin.Engine) {
	if s.deps.MCP == nil {
		return
	}
	h := gin.WrapH(s.deps.MCP)
	r.Any("/mcp", func(c *gin.Context) {
		if !s.deps.Ready() {
			c.Header("Retry-After", "1")
			c.JSON(http.StatusServiceUnavailable, gin.H{"jsonrpc": "2.0", "id": nil,
				"error": gin.H{"code": -32006, "message": "the service is not ready", "data": gin.H{"type": "unavailable", "status": 503}}})
			return
		}
		h(c)
	})
}

// Authenticate resolves r's bearer key exactly as every /v1 endpoint does (the same cache and answers):
// its principal, or the problem that refuses it (its slug is Type without ProblemBase).
func (s *Server) Authenticate(r *http.Request) (persistence.Principal, *Problem) {
	p, err := s.auth.authenticate(r)
	if err != nil {
		pr := *asProblem(err)
		pr.Type = strings.TrimPrefix(pr.Type, ProblemBase)
		return persistence.Principal{}, &pr
	}
	return p, nil
}
