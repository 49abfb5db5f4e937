package httpapi_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/httpapi"
)

// TestHandlerLeavesGinModeAlone checks that building the handler does not change gin's process-wide mode,
// which main sets once (a library flipping a global on every call races with every other engine).
func TestHandlerLeavesGinModeAlone(t *testing.T) {
	before := gin.Mode()
	t.Cleanup(func() { gin.SetMode(before) })
	gin.SetMode(gin.TestMode)
	httpapi.New(httpapi.Config{}, httpapi.Deps{}).Handler()
	if got := gin.Mode(); got != gin.TestMode {
		t.Fatalf("Handler() set gin's mode to %q", got)
	}
}
