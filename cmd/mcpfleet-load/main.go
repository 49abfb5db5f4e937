// Command mcpfleet-load is the benchmark's load generator: it simulates N
// MCP modules (registration, heartbeats every H on a timing wheel, a
// closed-loop peak) against a running mcpfleet service on loopback, compares
// the peak with a no-op gin server it runs as a child process, reads the
// service's RSS and CPU (and its PostgreSQL backends' with --pg-url), drives
// a naive reference server with the same load (--reference-database-url),
// and reports every figure against its target in Markdown
// (--report) and JSON (--json). Run it with -h for the flags; each flag can
// also be set as MCPFLEET_LOAD_<FLAG> (e.g. MCPFLEET_LOAD_API_KEY).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the run winds down (deregistering, bounded);
	// a second one gets the default behaviour and ends the process.
	context.AfterFunc(ctx, stop)
	err := loadgen.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, loadgen.ErrHelp):
		os.Exit(2)
	case errors.Is(err, loadgen.ErrTargetsMissed):
		fmt.Fprintln(os.Stderr, "mcpfleet-load:", err)
		os.Exit(3)
	default:
		fmt.Fprintln(os.Stderr, "mcpfleet-load:", err)
		os.Exit(1)
	}
}
