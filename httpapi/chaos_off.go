//go:build !chaos

package httpapi

import "github.com/gin-gonic/gin"

// registerChaos adds nothing outside chaos builds: production binaries have no /chaos routes.
func (s *Server) registerChaos(*gin.Engine) {}
