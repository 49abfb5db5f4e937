package demo_test

// RunModules is tested against fleetclienttest, an in-memory stand-in for the
// mcpfleet service's module API (the real service lives elsewhere; the
// end-to-end tests against it come later), with H = 200 ms.

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/demo"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/fleetclient/fleetclienttest"
	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// syncBuffer is a bytes.Buffer safe to write and read concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunModules(t *testing.T) {
	const h = 200 * time.Millisecond
	const monitor = 10 * time.Millisecond
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: h, MonitorPeriod: monitor})
	ctx := testContext(t)
	servers := startServers(t, ctx)

	var out syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- demo.RunModules(runCtx, fake.URL, fake.APIKey, servers, demo.RunOptions{
			Out:           &out,
			MonitorPeriod: monitor,
			FlakySteady:   300 * time.Millisecond,
			FlakyCycles:   1,
			Watch:         fleetclient.New(fake.URL, fake.APIKey),
		})
	}()

	wait.For(t, "every module registered with two heartbeats", 10*time.Second, func() bool {
		for _, s := range servers {
			srv, ok := fake.ServerByName(s.Name)
			if !ok || fake.HeartbeatCount(srv.ServerID) < 2 {
				return false
			}
		}
		return true
	})
	for _, s := range servers {
		srv, _ := fake.ServerByName(s.Name)
		if srv.Endpoint != s.Endpoint || srv.Version != s.Version ||
			!slices.Equal(srv.SupportedProtocols, []string{demo.ProtocolVersion()}) {
			t.Errorf("%s registered as %+v", s.Name, srv)
		}
		if diff := cmp.Diff(s.Tools, srv.CapabilityAdvertisement.Tools); diff != "" {
			t.Errorf("%s advertised tools (-server +registered):\n%s", s.Name, diff)
		}
	}

	flaky, _ := fake.ServerByName(demo.FlakyName)
	want := []fleetclient.Status{fleetclient.StatusHealthy, fleetclient.StatusDegraded, fleetclient.StatusUnhealthy, fleetclient.StatusHealthy}
	wait.For(t, "flaky to go degraded, unhealthy and back to healthy", 10*time.Second, func() bool {
		return slices.Equal(fake.StatusHistory(flaky.ServerID), want)
	})
	wait.For(t, "the watcher to see flaky healthy again after the pause", 5*time.Second, func() bool {
		text := out.String()
		i := strings.Index(text, "flaky: resuming")
		return i >= 0 && strings.Contains(text[i:], "flaky: service reports healthy") &&
			strings.Contains(text, "flaky: done pausing")
	})
	for _, s := range servers {
		if s.Name == demo.FlakyName {
			continue
		}
		srv, _ := fake.ServerByName(s.Name)
		if got := fake.StatusHistory(srv.ServerID); !slices.Equal(got, want[:1]) {
			t.Errorf("%s went through %v, want only healthy", s.Name, got)
		}
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunModules = %v, want nil after a graceful stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunModules did not return within 10s of cancellation")
	}
	for _, srv := range fake.Servers() {
		if srv.Status != fleetclient.StatusDeregistered {
			t.Errorf("%s is %s after stop, want deregistered", srv.ModuleName, srv.Status)
		}
	}

	text := out.String()
	t.Logf("RunModules output:\n%s", text)
	pause := 3*h + monitor + h/2
	for _, line := range []string{
		"calendar: registered as ",
		"flaky: heartbeating normally for 300ms",
		"flaky: pausing heartbeats for " + pause.String() + " to show degraded → unhealthy",
		"flaky: service reports degraded",
		"flaky: service reports unhealthy",
		"flaky: resuming heartbeats to show unhealthy → healthy",
		"flaky: service reports healthy",
		"notes: deregistered",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("output lacks %q; output:\n%s", line, text)
		}
	}
	order := []string{"flaky: pausing", "flaky: service reports degraded", "flaky: service reports unhealthy",
		"flaky: resuming", "flaky: service reports healthy"}
	at := -1
	for _, o := range order {
		i := strings.Index(text[max(at, 0):], o)
		if i >= 0 {
			i += max(at, 0)
		}
		if i < at {
			t.Errorf("%q comes before the previous step; output:\n%s", o, text)
		}
		at = i
	}
}

func TestRunModulesStopsOnBadKey(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: time.Second})
	ctx := testContext(t)
	servers, err := demo.StartServers(ctx, demo.Options{Names: []string{"calendar", "flaky"}})
	if err != nil {
		t.Fatalf("StartServers: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Close()
		}
	})
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- demo.RunModules(ctx, fake.URL, "wrong-key", servers, demo.RunOptions{Out: &out}) }()
	select {
	case err := <-done:
		if !fleetclient.IsUnauthorized(err) {
			t.Fatalf("RunModules = %v, want an unauthorized error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunModules did not stop on a rejected key")
	}
	if !strings.Contains(out.String(), "calendar: stopped: ") {
		t.Errorf("output lacks the stop line:\n%s", out.String())
	}
}
