package service_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
	"github.com/mcpfleet/mcpfleet/service"
)

// goroutinesIn counts the running goroutines whose stack mentions pkg.
func goroutinesIn(pkg string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, pkg) {
			count++
		}
	}
	return count
}

// TestFailedStartReleasesWhatItStarted starts a service whose HTTP address is taken, the last step that
// can fail, after the tracer, the pool, the actor system, the probes and the gateway have started: Start
// must fail and leave none of their goroutines behind (it used to leave the tracer's exporter and the
// actor system running).
func TestFailedStartReleasesWhatItStarted(t *testing.T) {
	db := pgtest.New(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(sink.Close)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })

	watched := []string{"go.opentelemetry.io/otel/sdk/trace", "github.com/asynkron/protoactor-go", "github.com/jackc/pgx/v5/pgxpool"}
	before := map[string]int{}
	for _, p := range watched {
		before[p] = goroutinesIn(p)
	}
	cfg := service.Config{
		DatabaseURL: db.AppURL, HTTPAddr: taken.Addr().String(), HeartbeatInterval: 10 * time.Second,
		MonitorInterval: 5 * time.Second, StampFlushInterval: 50 * time.Millisecond, WriteTimeout: 5 * time.Second,
		DBMaxConns: 4,
	}
	svc, err := service.Start(context.Background(), cfg, service.Options{TraceEndpoint: sink.URL})
	if err == nil {
		svc.Close(context.Background())
		t.Fatal("Start succeeded on a taken address")
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Fatalf("Start failed for another reason than the taken address: %v", err)
	}
	for _, p := range watched {
		waitFor(t, "the goroutines of "+p+" to end", 10*time.Second, func() bool { return goroutinesIn(p) <= before[p] })
	}
}
