//go:build !chaos

package actors

import "github.com/asynkron/protoactor-go/actor"

// handleChaos is a no-op outside chaos builds.
func handleChaos(actor.Context) {}
