// Command mcpfleet is the control plane for a fleet of MCP servers.
//
//	mcpfleet serve                          run the service
//	mcpfleet migrate                        apply the schema (owner connection)
//	mcpfleet tenant create --name N         create a tenant, print {"tenant_id": ...}
//	mcpfleet apikey create --tenant ID --role module|operator|admin
//	mcpfleet server approval --tenant ID --server ID --on|--off
//	mcpfleet demo                           everything, on an embedded default, with demo MCP servers
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gin-gonic/gin"
)

func main() {
	gin.SetMode(gin.ReleaseMode) // once, for the process: gin's mode is global (tests run in its test mode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpfleet:", err)
		os.Exit(exitCode(err))
	}
}
