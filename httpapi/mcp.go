package httpapi

import (
	"context"
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
		return persistence.Principal{}, slugProblem(err)
	}
	return p, nil
}

// Guard checks a credential that is not a bearer key — a dashboard session cookie, whose SHA-256 is
// hash — under the failed-authentication throttle of the API's keys: lookup (which must answer
// persistence.ErrNotFound for an unknown credential) runs only within the budget of r's client
// address, unless a lookup found this credential before. It returns lookup's error unchanged, or the
// 429 *Problem of a throttled address (auth_throttled or auth_lookups_busy) without running lookup.
func (s *Server) Guard(r *http.Request, hash []byte, lookup func(context.Context) error) error {
	var hk [32]byte
	copy(hk[:], hash)
	return s.auth.guard(r, hk, lookup)
}

// slugProblem is err's problem with its type cut to the slug.
func slugProblem(err error) *Problem {
	pr := *asProblem(err)
	pr.Type = strings.TrimPrefix(pr.Type, ProblemBase)
	return &pr
}
