package main

import (
	"context"
	"errors"
	"io"

	"github.com/mcpfleet/mcpfleet/service"
)

func cmdDemo(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: not wired yet")
}
