package mcpclient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient"
)

// contact is one RecordContact call.
type contact struct {
	at      time.Time
	latency time.Duration
}

// recorder is a Recorder that remembers its calls.
type recorder struct {
	mu       sync.Mutex
	contacts []contact
}

func (r *recorder) RecordContact(_ context.Context, at time.Time, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.contacts = append(r.contacts, contact{at, latency})
}

func (r *recorder) all() []contact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]contact(nil), r.contacts...)
}

// newClient builds a Client for endpoint, allowed to reach loopback, with a
// fresh recorder. mods adjust the config.
func newClient(t testing.TB, endpoint string, mods ...func(*mcpclient.Config)) (*mcpclient.Client, *recorder) {
	t.Helper()
	cfg := mcpclient.Config{Endpoint: endpoint, AllowHosts: []string{"127.0.0.1"}}
	for _, m := range mods {
		m(&cfg)
	}
	rec := &recorder{}
	c, err := mcpclient.New(cfg, rec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, rec
}

func withTimeout(d time.Duration) func(*mcpclient.Config) {
	return func(c *mcpclient.Config) { c.Timeout = d }
}

func withAuth(a mcpclient.Auth) func(*mcpclient.Config) {
	return func(c *mcpclient.Config) { c.Auth = a }
}

// testContext is bounded well below the test binary's timeout, so a hang
// fails one test instead of the run.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantClass asserts err is an *mcpclient.Error of class want and returns it.
func wantClass(t testing.TB, err error, want mcpclient.Class) *mcpclient.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want class %s", want)
	}
	var e *mcpclient.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *mcpclient.Error", err, err)
	}
	if e.Class != want {
		t.Fatalf("class = %s (reason %q), want %s", e.Class, e.Reason, want)
	}
	if e.Reason == "" || strings.ContainsAny(e.Reason, "\n\r") {
		t.Errorf("reason %q is not a one-line sentence", e.Reason)
	}
	return e
}
