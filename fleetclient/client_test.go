package fleetclient_test

// These tests run against fleetclienttest, an in-memory stand-in for the
// mcpfleet service's module API. The real service lives elsewhere in this
// repository; the end-to-end tests against it come later.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/fleetclient/fleetclienttest"
)

func registerRequest(name string) fleetclient.RegisterRequest {
	return fleetclient.RegisterRequest{
		ModuleName:         name,
		Version:            "1.3.2",
		SupportedProtocols: []string{"2025-11-25"},
		CapabilityAdvertisement: fleetclient.CapabilityAdvertisement{Tools: []fleetclient.Tool{{
			Name: "list_events", Description: "List events", InputSchema: []byte(`{"type":"object"}`),
		}}},
		Endpoint: "http://127.0.0.1:1/mcp",
	}
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClientLifecycle(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 10 * time.Second})
	c := fleetclient.New(fake.URL, fake.APIKey)
	ctx := testContext(t)
	if err := c.Healthz(ctx); err != nil {
		t.Fatalf("Healthz: %v", err)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Fatalf("Readyz: %v", err)
	}

	reg, err := c.Register(ctx, registerRequest("calendar"))
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if !reg.Created || reg.ServerID == "" || reg.Status != fleetclient.StatusHealthy {
		t.Fatalf("Register = %+v, want a new healthy server", reg)
	}
	if got := reg.HeartbeatInterval(); got != 10*time.Second {
		t.Errorf("HeartbeatInterval = %s, want 10s", got)
	}
	if diff := cmp.Diff(registerRequest("calendar").CapabilityAdvertisement, reg.CapabilityAdvertisement); diff != "" {
		t.Errorf("capability advertisement (-sent +stored):\n%s", diff)
	}

	again, err := c.Register(ctx, registerRequest("calendar"))
	if err != nil {
		t.Fatalf("Register again: %v", err)
	}
	if again.Created || again.ServerID != reg.ServerID {
		t.Errorf("re-registration = created %v id %s, want created false id %s", again.Created, again.ServerID, reg.ServerID)
	}

	hb, err := c.Heartbeat(ctx, reg.ServerID)
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if hb.ServerID != reg.ServerID || hb.Status != fleetclient.StatusHealthy || hb.LastHeartbeatAt.IsZero() {
		t.Errorf("Heartbeat = %+v", hb)
	}

	got, err := c.GetServer(ctx, reg.ServerID)
	if err != nil {
		t.Fatalf("GetServer: %v", err)
	}
	if got.ModuleName != "calendar" || got.Version != "1.3.2" || got.DeregisteredAt != nil {
		t.Errorf("GetServer = %+v", got)
	}

	skills, err := c.Skills(ctx, reg.ServerID)
	if err != nil {
		t.Fatalf("Skills: %v", err)
	}
	if len(skills) != 1 || skills[0].Name != "list_events" || !skills[0].Available {
		t.Errorf("Skills = %+v", skills)
	}

	dereg, err := c.Deregister(ctx, reg.ServerID)
	if err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if dereg.Status != fleetclient.StatusDeregistered || dereg.DeregisteredAt == nil {
		t.Errorf("Deregister = %+v", dereg)
	}
	// The answer carries the advertisement: from the deregistration's commit the first time, read from
	// the row when a repeated deregistration commits nothing.
	twice, err := c.Deregister(ctx, reg.ServerID)
	if err != nil {
		t.Fatalf("Deregister again: %v", err)
	}
	for _, d := range []*fleetclient.Server{dereg, twice} {
		if tools := d.CapabilityAdvertisement.Tools; len(tools) != 1 || tools[0].Name != "list_events" {
			t.Errorf("Deregister answered the advertisement %+v", d.CapabilityAdvertisement)
		}
	}

	_, err = c.Heartbeat(ctx, reg.ServerID)
	if !fleetclient.IsDeregistered(err) {
		t.Errorf("Heartbeat after deregistration: err = %v, want IsDeregistered", err)
	}

	events, err := c.Audit(ctx, fleetclient.AuditOptions{ServerID: reg.ServerID})
	if err != nil {
		t.Fatalf("Audit: %v", err)
	}
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	want := []string{fleetclienttest.KindRegistered, fleetclienttest.KindRegistered, fleetclienttest.KindDeregistered}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("audit kinds (-want +got):\n%s", diff)
	}
}

func TestListServersPaging(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{Interval: 10 * time.Second})
	c := fleetclient.New(fake.URL, fake.APIKey)
	ctx := testContext(t)
	want := map[string]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		reg, err := c.Register(ctx, registerRequest(name))
		if err != nil {
			t.Fatalf("Register %s: %v", name, err)
		}
		want[reg.ServerID] = true
	}

	page, err := c.ListServers(ctx, fleetclient.ListOptions{Limit: 2})
	if err != nil {
		t.Fatalf("ListServers: %v", err)
	}
	if len(page.Servers) != 2 || page.NextCursor == "" {
		t.Fatalf("first page = %d servers, cursor %q; want 2 and a cursor", len(page.Servers), page.NextCursor)
	}

	got := map[string]bool{}
	for s, err := range c.AllServers(ctx, fleetclient.ListOptions{Limit: 2, Status: fleetclient.StatusHealthy}) {
		if err != nil {
			t.Fatalf("AllServers: %v", err)
		}
		got[s.ServerID] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AllServers ids (-want +got):\n%s", diff)
	}

	if adv := page.Servers[0].CapabilityAdvertisement.Tools; len(adv) != 0 {
		t.Errorf("a listed server carries its advertisement unasked: %v", adv)
	}
	full, err := c.ListServers(ctx, fleetclient.ListOptions{Limit: 2, IncludeCapabilityAdvertisement: true})
	if err != nil {
		t.Fatalf("ListServers with advertisements: %v", err)
	}
	if adv := full.Servers[0].CapabilityAdvertisement.Tools; len(adv) != 1 || adv[0].Name != "list_events" {
		t.Errorf("a listed server's advertisement, asked for = %v", adv)
	}

	none, err := c.ListServers(ctx, fleetclient.ListOptions{Status: fleetclient.StatusUnhealthy})
	if err != nil {
		t.Fatalf("ListServers unhealthy: %v", err)
	}
	if len(none.Servers) != 0 {
		t.Errorf("unhealthy servers = %d, want 0", len(none.Servers))
	}
}

func TestAllServersStopsOnRepeatedCursor(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"servers":[{"server_id":"x","status":"healthy"}],"next_cursor":"same"}`))
	}))
	t.Cleanup(ts.Close)
	c := fleetclient.New(ts.URL, "k")
	n := 0
	for _, err := range c.AllServers(testContext(t), fleetclient.ListOptions{}) {
		if err != nil {
			t.Fatalf("AllServers: %v", err)
		}
		n++
	}
	if calls.Load() != 2 || n != 2 {
		t.Errorf("calls = %d, servers = %d; want 2 and 2 (stop when the cursor repeats)", calls.Load(), n)
	}
}

func TestProblemErrors(t *testing.T) {
	fake := fleetclienttest.NewServer(t, fleetclienttest.Options{})
	ctx := testContext(t)
	c := fleetclient.New(fake.URL, fake.APIKey)

	t.Run("unknown server", func(t *testing.T) {
		_, err := c.Heartbeat(ctx, "00000000-0000-0000-0000-000000000000")
		if !fleetclient.IsNotRegistered(err) {
			t.Fatalf("err = %v, want IsNotRegistered", err)
		}
		pe, ok := fleetclient.AsProblem(err)
		if !ok || pe.Status != http.StatusNotFound || pe.Slug() != fleetclient.SlugServerNotRegistered {
			t.Errorf("problem = %+v", pe)
		}
		if fleetclient.IsRetryable(err) {
			t.Errorf("a 404 must not be retryable")
		}
	})

	t.Run("bad key", func(t *testing.T) {
		_, err := fleetclient.New(fake.URL, "wrong").Register(ctx, registerRequest("x"))
		if !fleetclient.IsUnauthorized(err) || fleetclient.IsRetryable(err) {
			t.Fatalf("err = %v, want unauthorized and not retryable", err)
		}
	})

	t.Run("invalid registration", func(t *testing.T) {
		_, err := c.Register(ctx, fleetclient.RegisterRequest{ModuleName: "x"})
		pe, ok := fleetclient.AsProblem(err)
		if !ok || pe.Status != http.StatusUnprocessableEntity || pe.Slug() != "invalid_registration" {
			t.Fatalf("err = %v, want a 422 invalid_registration problem", err)
		}
	})

	t.Run("unavailable with retry-after", func(t *testing.T) {
		fake.FailNext("register", 1, http.StatusServiceUnavailable, 2*time.Second)
		_, err := c.Register(ctx, registerRequest("y"))
		pe, ok := fleetclient.AsProblem(err)
		if !ok || pe.Status != http.StatusServiceUnavailable || pe.RetryAfter != 2*time.Second {
			t.Fatalf("err = %v, want 503 with Retry-After 2s", err)
		}
		if !fleetclient.IsRetryable(err) || fleetclient.RetryAfter(err) != 2*time.Second {
			t.Errorf("IsRetryable/RetryAfter wrong for %v", err)
		}
	})

	t.Run("transport error", func(t *testing.T) {
		ts := httptest.NewServer(http.NotFoundHandler())
		url := ts.URL
		ts.Close()
		_, err := fleetclient.New(url, "k").Heartbeat(ctx, "x")
		if err == nil || !fleetclient.IsRetryable(err) {
			t.Fatalf("err = %v, want a retryable transport error", err)
		}
		if _, ok := fleetclient.AsProblem(err); ok {
			t.Errorf("a transport error must not be a ProblemError")
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Heartbeat(cctx, "x")
		if !errors.Is(err, context.Canceled) || fleetclient.IsRetryable(err) {
			t.Fatalf("err = %v, want context.Canceled, not retryable", err)
		}
	})
}

func TestNonProblemAnswers(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		wantRetry bool
		wantAfter time.Duration
		wantCode  int // 0: expect a DecodeError instead of a ProblemError
	}{
		{name: "plain text 502", status: 502, body: "bad gateway from proxy", wantRetry: true, wantCode: 502},
		{name: "http-date retry-after", status: 503,
			header:    map[string]string{"Retry-After": time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)},
			wantRetry: true, wantCode: 503, wantAfter: 88 * time.Second},
		{name: "malformed 200", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: "{",
			wantRetry: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(ts.Close)
			_, err := fleetclient.New(ts.URL, "k").Heartbeat(testContext(t), "x")
			if err == nil {
				t.Fatal("err = nil")
			}
			if got := fleetclient.IsRetryable(err); got != tt.wantRetry {
				t.Errorf("IsRetryable(%v) = %v, want %v", err, got, tt.wantRetry)
			}
			if tt.wantCode == 0 {
				var de *fleetclient.DecodeError
				if !errors.As(err, &de) {
					t.Errorf("err = %v, want a DecodeError", err)
				}
				return
			}
			pe, ok := fleetclient.AsProblem(err)
			if !ok || pe.Status != tt.wantCode {
				t.Fatalf("err = %v, want a ProblemError %d", err, tt.wantCode)
			}
			if tt.wantAfter > 0 && (pe.RetryAfter < tt.wantAfter || pe.RetryAfter > tt.wantAfter+3*time.Second) {
				t.Errorf("RetryAfter = %s, want about %s", pe.RetryAfter, tt.wantAfter)
			}
			if tt.body != "" && pe.Detail != tt.body {
				t.Errorf("Detail = %q, want the body %q", pe.Detail, tt.body)
			}
		})
	}
}

func TestProblemExtensions(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"type":"https://mcpfleet.dev/problems/unknown_field","title":"Bad Request","status":400,` +
			`"detail":"field \"endpoint\" is not part of this request","field":"endpoint","trace_id":"abc"}`))
	}))
	t.Cleanup(ts.Close)
	_, err := fleetclient.New(ts.URL, "k").Register(testContext(t), registerRequest("x"))
	pe, ok := fleetclient.AsProblem(err)
	if !ok || pe.Slug() != "unknown_field" || pe.Field != "endpoint" || pe.TraceID != "abc" || fleetclient.IsRetryable(err) {
		t.Fatalf("problem = %+v (%v)", pe, err)
	}
}

func TestRequestHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"server_id":"x","status":"healthy","last_heartbeat_at":"2026-05-17T10:00:05Z"}`))
	}))
	t.Cleanup(ts.Close)
	c := fleetclient.New(ts.URL+"/", "secret", fleetclient.WithUserAgent("demo/1"),
		fleetclient.WithHTTPClient(fleetclient.NewHTTPClient(2, 5*time.Second)))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := c.Heartbeat(fleetclient.WithTraceparent(testContext(t), tp), "x"); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	h := <-got
	want := map[string]string{
		"Authorization": "Bearer secret",
		"Content-Type":  "application/json",
		"User-Agent":    "demo/1",
		"Traceparent":   tp,
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
		}
	}
}
