package loadgen_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

// TestMain lets the test binary stand in for mcpfleet-load when the ceiling
// phase re-executes itself as "noop-server", and the reference phase as
// "reference-server".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == loadgen.NoopCommand {
		if err := loadgen.RunNoopServer(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == loadgen.ReferenceCommand {
		if err := loadgen.RunReferenceServer(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
