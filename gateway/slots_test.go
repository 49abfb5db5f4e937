package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// heldCaller holds every call until release is closed, and counts what reached it.
type heldCaller struct {
	fakeCaller
	release chan struct{}
}

func (h *heldCaller) CallTool(ctx context.Context, srv persistence.Server, cfg persistence.ServerConfig, tool string, args map[string]any) (mcpclient.ToolResult, error) {
	res, err := h.fakeCaller.CallTool(ctx, srv, cfg, tool, args)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return res, err
}

// The per-server bound, without a database: with CallsPerServer 1, a second call to the same server
// waits queued — unsent — while the first is in flight, and takes the slot when it frees.
func TestCallsPerServerQueue(t *testing.T) {
	target := callable()
	store := &memStore{calls: map[uuid.UUID]persistence.Call{}, target: target}
	var calls []persistence.Call
	for range 2 {
		c := persistence.Call{CallID: uuid.New(), TenantID: uuid.New(), RunID: "run-q", ServerID: target.Server.ServerID,
			Tool: "forecast", State: persistence.CallRunning, CreatedAt: t0}
		store.calls[c.CallID] = c
		calls = append(calls, c)
	}
	caller := &heldCaller{release: make(chan struct{})}
	g := New(Config{CallsPerServer: 1, QueueTimeout: time.Minute}, Deps{Store: store, Caller: caller, Clock: health.NewFakeClock(t0),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var done sync.WaitGroup
	for _, c := range calls {
		ctx, f := g.register(context.Background(), c.CallID)
		done.Add(1)
		go func() { defer done.Done(); <-f.done }()
		g.launch(ctx, f, c, target, nil)
	}
	wait.For(t, "one call sent and one queued", 5*time.Second, func() bool { return caller.count() == 1 && g.Queued(target.Server.ServerID) == 1 })
	if n := caller.count(); n != 1 {
		t.Fatalf("%d calls sent to a server bounded to 1", n)
	}
	close(caller.release)
	done.Wait()
	if n, q := caller.count(), g.Queued(target.Server.ServerID); n != 2 || q != 0 {
		t.Fatalf("after the first call ended: %d sent, %d queued", n, q)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
