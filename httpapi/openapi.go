package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// openAPIDocument is the OpenAPI 3.1 description of this API, written by hand and served verbatim at
// GET /openapi.json. Every route, body, answer, role (x-mcpfleet-roles) and problem type
// (components.schemas.ProblemType) is in it; the service tests validate every request and answer they
// make against it (package httpapi/apicheck), so it cannot drift from the code unnoticed.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the API's OpenAPI 3.1 document (JSON). The caller must not modify it.
func OpenAPI() []byte { return openAPIDocument }

// openAPI answers GET /openapi.json: the document, to anyone (it holds no tenant data).
func openAPI(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=300")
	c.Data(http.StatusOK, "application/json", openAPIDocument)
}
