package fleetclient_test

// Module tests run against fleetclienttest, an in-memory stand-in for the
// real service (which lives elsewhere), with a short heartbeat interval.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/fleetclient/fleetclienttest"
	"github.com/mcpfleet/mcpfleet/internal/wait"
)

// eventLog records module events for assertions.
type eventLog struct {
	mu  sync.Mutex
	evs []fleetclient.ModuleEvent
}

func (l *eventLog) add(ev fleetclient.ModuleEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) find(kind fleetclient.EventKind) (fleetclient.ModuleEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.Kind == kind {
			return ev, true
		}
	}
	return fleetclient.ModuleEvent{}, false
}

func (l *eventLog) count(kind fleetclient.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// runModule starts m.Run in the background. stop cancels it and returns
// Run's error; done is closed when Run has returned, after which stop
// returns at once.
func runModule(t *testing.T, m *fleetclient.Module) (stop func() error, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	finished := make(chan struct{})
	var err error
	go func() {
		defer close(finished)
		err = m.Run(ctx)
	}()
	stop = func() error {
		cancel()
		select {
		case <-finished:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of cancellation")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop, finished
}

func TestModuleHeartbeatsAndDeregisters(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 50 * time.Millisecond})
	var log eventLog
	m := fleetclient.NewModule(fleetclient.New(fake.URL, fake.APIKey), registerRequest("calendar"),
		fleetclient.ModuleOptions{Jitter: 10 * time.Millisecond, OnEvent: log.add})
	stop, _ := runModule(t, m)

	wait.For(t, "3 heartbeats", 5*time.Second, func() bool {
		id := m.ServerID()
		return id != "" && fake.HeartbeatCount(id) >= 3
	})
	if m.Interval() != 50*time.Millisecond {
		t.Errorf("Interval = %s, want the service's 50ms", m.Interval())
	}
	if m.Status() != fleetclient.StatusHealthy {
		t.Errorf("Status = %q, want healthy", m.Status())
	}
	if err := m.Run(context.Background()); !errors.Is(err, fleetclient.ErrModuleRunning) {
		t.Errorf("second Run = %v, want ErrModuleRunning", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after a graceful stop", err)
	}
	srv, _ := fake.ServerByName("calendar")
	if srv.Status != fleetclient.StatusDeregistered {
		t.Errorf("server status after stop = %q, want deregistered", srv.Status)
	}
	if ev, ok := log.find(fleetclient.EventRegistered); !ok || !ev.Created || ev.ServerID == "" {
		t.Errorf("registered event = %+v, %v", ev, ok)
	}
	if _, ok := log.find(fleetclient.EventDeregistered); !ok {
		t.Error("no deregistered event")
	}
	if got := m.Status(); got != fleetclient.StatusDeregistered {
		t.Errorf("Status after stop = %q", got)
	}
}

func TestModuleReregistersAfterNotFound(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 30 * time.Millisecond})
	var log eventLog
	m := fleetclient.NewModule(fleetclient.New(fake.URL, fake.APIKey), registerRequest("notes"),
		fleetclient.ModuleOptions{OnEvent: log.add})
	runModule(t, m)

	wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
	first := m.ServerID()
	fake.Forget(first)
	wait.For(t, "a new server id after the service forgot the first", 5*time.Second, func() bool {
		id := m.ServerID()
		return id != first && fake.HeartbeatCount(id) >= 1
	})
	if _, ok := log.find(fleetclient.EventReregistering); !ok {
		t.Error("no reregistering event")
	}
}

func TestModuleBacksOffHonouringRetryAfter(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 30 * time.Millisecond})
	var log eventLog
	m := fleetclient.NewModule(fleetclient.New(fake.URL, fake.APIKey), registerRequest("weather"),
		fleetclient.ModuleOptions{OnEvent: log.add, MinBackoff: 5 * time.Millisecond})
	fake.FailNext("register", 2, http.StatusServiceUnavailable, 0)
	runModule(t, m)

	wait.For(t, "registration after two 503s", 5*time.Second, func() bool { return m.ServerID() != "" })
	if n := log.count(fleetclient.EventRetry); n != 2 {
		t.Errorf("retries before registering = %d, want 2", n)
	}

	before := fake.HeartbeatCount(m.ServerID())
	fake.FailNext("heartbeat", 1, http.StatusServiceUnavailable, time.Second)
	wait.For(t, "a retry event with Retry-After", 5*time.Second, func() bool {
		return log.count(fleetclient.EventRetry) == 3
	})
	log.mu.Lock()
	ev := log.evs[slices.IndexFunc(log.evs, func(e fleetclient.ModuleEvent) bool {
		return e.Kind == fleetclient.EventRetry && fleetclient.RetryAfter(e.Err) > 0
	})]
	log.mu.Unlock()
	if ev.Delay < time.Second {
		t.Errorf("retry delay = %s, want at least the Retry-After of 1s", ev.Delay)
	}
	wait.For(t, "heartbeats to resume", 5*time.Second, func() bool {
		return fake.HeartbeatCount(m.ServerID()) > before
	})
}

func TestModulePauseResume(t *testing.T) {
	const h = 40 * time.Millisecond
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: h, MonitorPeriod: 4 * time.Millisecond})
	m := fleetclient.NewModule(fleetclient.New(fake.URL, fake.APIKey), registerRequest("flaky"),
		fleetclient.ModuleOptions{})
	runModule(t, m)
	wait.For(t, "first heartbeat", 5*time.Second, func() bool {
		id := m.ServerID()
		return id != "" && fake.HeartbeatCount(id) >= 1
	})
	id := m.ServerID()

	m.Pause()
	if !m.Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	// Unhealthy needs 3H without a heartbeat: reaching it proves the pause.
	wait.For(t, "unhealthy while paused", 5*time.Second, func() bool {
		return slices.Contains(fake.StatusHistory(id), fleetclient.StatusUnhealthy)
	})
	paused := fake.HeartbeatCount(id)
	m.Resume()
	wait.For(t, "healthy again after Resume", 5*time.Second, func() bool {
		hist := fake.StatusHistory(id)
		return len(hist) > 0 && hist[len(hist)-1] == fleetclient.StatusHealthy && fake.HeartbeatCount(id) > paused
	})
	want := []fleetclient.Status{fleetclient.StatusHealthy, fleetclient.StatusDegraded, fleetclient.StatusUnhealthy, fleetclient.StatusHealthy}
	if got := fake.StatusHistory(id); !slices.Equal(got, want) {
		t.Errorf("status history = %v, want %v", got, want)
	}
}

func TestModuleStopsOnPermanentErrors(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 20 * time.Millisecond})

	t.Run("bad key", func(t *testing.T) {
		m := fleetclient.NewModule(fleetclient.New(fake.URL, "wrong"), registerRequest("a"), fleetclient.ModuleOptions{})
		err := m.Run(testContext(t))
		if !fleetclient.IsUnauthorized(err) {
			t.Fatalf("Run = %v, want an unauthorized error", err)
		}
	})

	t.Run("deregistered by someone else", func(t *testing.T) {
		c := fleetclient.New(fake.URL, fake.APIKey)
		m := fleetclient.NewModule(c, registerRequest("b"), fleetclient.ModuleOptions{})
		stop, done := runModule(t, m)
		wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
		if _, err := c.Deregister(testContext(t), m.ServerID()); err != nil {
			t.Fatalf("Deregister: %v", err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after the server was deregistered")
		}
		if err := stop(); !fleetclient.IsDeregistered(err) {
			t.Fatalf("Run = %v, want IsDeregistered", err)
		}
	})

	t.Run("deregistered, reregister option", func(t *testing.T) {
		c := fleetclient.New(fake.URL, fake.APIKey)
		m := fleetclient.NewModule(c, registerRequest("c"), fleetclient.ModuleOptions{ReregisterOnDeregistered: true})
		stop, _ := runModule(t, m)
		wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
		if _, err := c.Deregister(testContext(t), m.ServerID()); err != nil {
			t.Fatalf("Deregister: %v", err)
		}
		wait.For(t, "revival", 5*time.Second, func() bool {
			srv, _ := fake.ServerByName("c")
			return srv.Status == fleetclient.StatusHealthy && srv.DeregisteredAt == nil
		})
		if err := stop(); err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

func TestModuleDeregistration(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 20 * time.Millisecond})
	c := fleetclient.New(fake.URL, fake.APIKey)

	t.Run("retried after a 503", func(t *testing.T) {
		m := fleetclient.NewModule(c, registerRequest("d"), fleetclient.ModuleOptions{MinBackoff: 5 * time.Millisecond})
		stop, _ := runModule(t, m)
		wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
		fake.FailNext("deregister", 1, http.StatusServiceUnavailable, 0)
		if err := stop(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if srv, _ := fake.ServerByName("d"); srv.Status != fleetclient.StatusDeregistered {
			t.Errorf("status = %q, want deregistered", srv.Status)
		}
	})

	t.Run("bounded by DeregisterTimeout", func(t *testing.T) {
		m := fleetclient.NewModule(c, registerRequest("e"), fleetclient.ModuleOptions{
			MinBackoff: 5 * time.Millisecond, DeregisterTimeout: 100 * time.Millisecond,
		})
		stop, _ := runModule(t, m)
		wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
		fake.FailNext("deregister", 1_000_000, http.StatusServiceUnavailable, 0)
		start := time.Now()
		err := stop()
		if err == nil || !fleetclient.IsRetryable(err) {
			t.Fatalf("Run = %v, want the 503 deregistration error", err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("stop took %s, want about the 100ms DeregisterTimeout", el)
		}
		fake.FailNext("deregister", 0, 0, 0)
	})

	t.Run("keep registered", func(t *testing.T) {
		m := fleetclient.NewModule(c, registerRequest("f"), fleetclient.ModuleOptions{KeepRegistered: true})
		stop, _ := runModule(t, m)
		wait.For(t, "registration", 5*time.Second, func() bool { return m.ServerID() != "" })
		if err := stop(); err != nil {
			t.Fatalf("Run = %v", err)
		}
		if srv, _ := fake.ServerByName("f"); srv.Status == fleetclient.StatusDeregistered {
			t.Error("KeepRegistered module was deregistered")
		}
	})
}
