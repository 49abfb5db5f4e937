package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

func TestEventStreamConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name               string
		env                map[string]string
		total, tenant, key int
		poll               time.Duration
		wantErr            string // a substring of the error; "" for none
	}{
		{name: "defaults", total: 256, tenant: 32, key: 8, poll: time.Second},
		{name: "set", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "100", "MCPFLEET_EVENT_STREAMS_PER_TENANT": "10",
			"MCPFLEET_EVENT_STREAMS_PER_KEY": "2", "MCPFLEET_EVENT_POLL_INTERVAL": "250ms"}, total: 100, tenant: 10, key: 2, poll: 250 * time.Millisecond},
		{name: "defaults under a small total", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "4"}, total: 4, tenant: 4, key: 4, poll: time.Second},
		{name: "not a number", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_KEY": "many"}, wantErr: "MCPFLEET_EVENT_STREAMS_PER_KEY"},
		{name: "zero", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_TENANT": "0"}, wantErr: "MCPFLEET_EVENT_STREAMS_PER_TENANT"},
		{name: "a tenant may not have more than all", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "10", "MCPFLEET_EVENT_STREAMS_PER_TENANT": "11"}, wantErr: "≤"},
		{name: "a key may not have more than its tenant", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_TENANT": "3", "MCPFLEET_EVENT_STREAMS_PER_KEY": "4"}, wantErr: "≤"},
		{name: "poll too fast", env: map[string]string{"MCPFLEET_EVENT_POLL_INTERVAL": "1ms"}, wantErr: "MCPFLEET_EVENT_POLL_INTERVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://cyberos_app@127.0.0.1/x"}
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := service.FromEnv(func(k string) string { return env[k] })
			if err == nil {
				err = c.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.EventStreams != tc.total || c.EventStreamsPerTenant != tc.tenant || c.EventStreamsPerKey != tc.key || c.EventPollInterval != tc.poll {
				t.Errorf("got %d/%d/%d %s, want %d/%d/%d %s", c.EventStreams, c.EventStreamsPerTenant, c.EventStreamsPerKey,
					c.EventPollInterval, tc.total, tc.tenant, tc.key, tc.poll)
			}
		})
	}
}

// sseEvent is one event of GET /v1/mcp/events as a client reads it, with when it arrived.
type sseEvent struct {
	id, event string
	data      struct {
		Kind     string `json:"kind"`
		ServerID string `json:"server_id"`
		Status   string `json:"status"`
		SkillID  string `json:"skill_id"`
		Tool     string `json:"tool"`
		Cause    string `json:"cause"`
		TraceID  string `json:"trace_id"`
		From     string `json:"from"`
		ChangeID string `json:"change_id"`
		By       string `json:"by"`
		// Changes counts the fields of a configuration change (a count keeps the struct comparable).
		Changes changeCount `json:"changes"`
	}
	at time.Time
}

// changeCount reads a JSON array as its length.
type changeCount int

func (c *changeCount) UnmarshalJSON(b []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	*c = changeCount(len(items))
	return nil
}

// openEvents opens the event stream with key (resuming after lastID unless empty) and returns its events
// as they arrive; the stream is closed at the end of the test.
func (h *harness) openEvents(key, lastID string) <-chan sseEvent {
	h.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.T.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", h.Svc.URL()+"/v1/mcp/events", nil)
	if err != nil {
		h.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		h.T.Fatalf("event stream: %d", resp.StatusCode)
	}
	out := make(chan sseEvent, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var e sseEvent
		var data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && (e.id != "" || data != ""):
				e.at = time.Now()
				_ = json.Unmarshal([]byte(data), &e.data)
				out <- e
				e, data = sseEvent{}, ""
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()
	return out
}

// TestEventStreamsLiveAcrossTenants: three tenants' transitions interleave (so each tenant's events are
// separated by the other tenants' in any sequence shared by all), and every event reaches its tenant's
// stream within one poll interval of its commit, plus slack for a loaded machine — far below the 5 s a
// stream used to wait at every other tenant's sequence number. Each stream carries its own tenant's events
// only, in order, once; a stream resumed from any id gets exactly the events after it.
func TestEventStreamsLiveAcrossTenants(t *testing.T) {
	const poll = 200 * time.Millisecond
	// The bound: one poll interval, plus scheduling and the poll's own query on a loaded 2-core machine.
	// It is measured from the moment the committing request returned (its commit is before that).
	const bound = poll + 1500*time.Millisecond
	h := newHarness(t, func(c *service.Config, _ *service.Options) { c.EventPollInterval = poll })
	type tenant struct {
		name   string
		keys   map[persistence.Role]string
		server string
		stream <-chan sseEvent
		got    []sseEvent
	}
	var ts []*tenant
	for _, name := range []string{"t1", "t2", "t3"} {
		_, keys := h.NewTenant(name)
		ts = append(ts, &tenant{name: name, keys: keys})
	}
	for _, tn := range ts {
		tn.stream = h.openEvents(tn.keys[persistence.RoleOperator], "")
	}
	var lat, commit []time.Duration // per event: delivery after the commit returned; the commit itself
	// act runs one committing step of the tenants given and waits for each one's event on its stream.
	act := func(what, kind string, step func(), of ...*tenant) {
		t.Helper()
		start := time.Now()
		step()
		acked := time.Now()
		for _, tn := range of {
			select {
			case e, ok := <-tn.stream:
				if !ok {
					t.Fatalf("%s: %s's stream ended", what, tn.name)
				}
				if e.data.Kind != kind || (tn.server != "" && e.data.ServerID != tn.server) {
					t.Fatalf("%s: %s's stream sent %s of %s, want %s of %s", what, tn.name, e.data.Kind, e.data.ServerID, kind, tn.server)
				}
				tn.got = append(tn.got, e)
				lat, commit = append(lat, e.at.Sub(acked)), append(commit, acked.Sub(start))
				if d := e.at.Sub(acked); d > bound {
					t.Fatalf("%s: %s's event came %s after its commit returned (commit took %s), more than %s",
						what, tn.name, d.Round(time.Millisecond), acked.Sub(start).Round(time.Millisecond), bound)
				}
			case <-time.After(bound + 5*time.Second):
				t.Fatalf("%s: no event on %s's stream", what, tn.name)
			}
		}
	}
	do := func(tn *tenant, path string, body any, want ...int) map[string]any {
		t.Helper()
		r := h.do("POST", path, tn.keys[persistence.RoleModule], body)
		if !slices.Contains(want, r.status) {
			t.Fatalf("%s %s: %d %s", tn.name, path, r.status, r.body)
		}
		return r.json(t)
	}
	for _, tn := range ts {
		act("register", "mcp.server.registered", func() {
			tn.server = do(tn, "/v1/mcp/servers/register", registration("mod-"+tn.name), http.StatusCreated)["server_id"].(string)
		}, tn)
	}
	for round := range 3 {
		for _, tn := range ts {
			act(sprintf("round %d: deregister", round), "mcp.server.deregistered", func() {
				do(tn, "/v1/mcp/servers/deregister", map[string]string{"server_id": tn.server}, http.StatusOK)
			}, tn)
		}
		for _, tn := range ts {
			act(sprintf("round %d: register again", round), "mcp.server.registered", func() {
				do(tn, "/v1/mcp/servers/register", registration("mod-"+tn.name), http.StatusOK, http.StatusCreated)
			}, tn)
		}
		act(sprintf("round %d: silence", round), "mcp.server.degraded", func() {
			h.advance(2*h.Cfg.HeartbeatInterval + time.Second)
			h.runMonitor()
		}, ts...)
		for _, tn := range ts {
			act(sprintf("round %d: heartbeat", round), "mcp.server.recovered", func() {
				do(tn, "/v1/mcp/servers/heartbeat", map[string]string{"server_id": tn.server}, http.StatusOK)
			}, tn)
		}
	}
	slices.Sort(lat)
	slices.Sort(commit)
	pct := func(ds []time.Duration, p int) time.Duration { return ds[(len(ds)-1)*p/100].Round(time.Millisecond) }
	t.Logf("%d events of 3 tenants, poll interval %s: delivered after the commit returned p50 %s, p95 %s, max %s (bound %s); commits took p50 %s, max %s",
		len(lat), poll, pct(lat, 50), pct(lat, 95), pct(lat, 100), bound, pct(commit, 50), pct(commit, 100))

	// Each stream: its tenant's events only (checked above), numbered 1, 2, 3 … by the tenant's own
	// sequence. Resumed from any of them, it sends exactly what followed.
	for _, tn := range ts {
		for i, e := range tn.got {
			if want := sprintf("t%d-0-0", i+1); e.id != want {
				t.Fatalf("%s's event %d has id %q, want %q", tn.name, i, e.id, want)
			}
		}
	}
	tn := ts[1]
	for _, from := range []int{0, 5, len(tn.got) - 2} {
		resumed := h.openEvents(tn.keys[persistence.RoleAdmin], tn.got[from].id)
		for _, want := range tn.got[from+1:] {
			select {
			case e := <-resumed:
				if e.id != want.id || e.data != want.data {
					t.Fatalf("resumed after %s: got %s %+v, want %s %+v", tn.got[from].id, e.id, e.data, want.id, want.data)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("resumed after %s: %s never came", tn.got[from].id, want.id)
			}
		}
	}
}
