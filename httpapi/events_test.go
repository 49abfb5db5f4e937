package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// fakeKeys answers key lookups for the event stream tests; nothing else of the store is used.
type fakeKeys struct {
	httpapi.Store
	mu   sync.Mutex
	keys map[string]persistence.Principal // by hash
}

func (f *fakeKeys) LookupKey(_ context.Context, hash []byte) (persistence.Principal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.keys[string(hash)]; ok {
		return p, nil
	}
	return persistence.Principal{}, persistence.ErrNotFound
}

// fakeLog is a tenant's event log whose visible rows the test controls, gaps included.
type fakeLog struct {
	mu     sync.Mutex
	events []persistence.FleetEvent // by tenant implicitly: one tenant
	tenant uuid.UUID
	beats  map[uuid.UUID]time.Time // last heartbeats of the tenant's servers
}

func (l *fakeLog) beat(id uuid.UUID, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beats == nil {
		l.beats = map[uuid.UUID]time.Time{}
	}
	l.beats[id] = at
}

func (l *fakeLog) LastHeartbeats(_ context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uuid.UUID]time.Time{}
	if tenantID != l.tenant {
		return out, nil
	}
	for _, id := range ids {
		if at, ok := l.beats[id]; ok {
			out[id] = at
		}
	}
	return out, nil
}

func (l *fakeLog) add(e persistence.FleetEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *fakeLog) FleetEvents(_ context.Context, tenantID uuid.UUID, c persistence.EventCursor, limit int) ([]persistence.FleetEvent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tenantID != l.tenant {
		return nil, nil
	}
	var audit, imports, changes, configs []persistence.FleetEvent
	for _, e := range l.events {
		switch {
		case e.Import && e.Seq > c.Import:
			imports = append(imports, e)
		case e.ToolChange && e.Seq > c.Tool:
			changes = append(changes, e)
		case e.Config && e.Seq > c.Config:
			configs = append(configs, e)
		case !e.Import && !e.ToolChange && !e.Config && e.Seq > c.Audit:
			audit = append(audit, e)
		}
	}
	var out []persistence.FleetEvent
	for _, evs := range [][]persistence.FleetEvent{audit, imports, changes, configs} {
		sortSeq(evs)
		out = append(out, evs[:min(len(evs), limit)]...)
	}
	return out, nil
}

func sortSeq(evs []persistence.FleetEvent) {
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].Seq < evs[j-1].Seq; j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
}

func (l *fakeLog) LatestEventCursor(_ context.Context, tenantID uuid.UUID) (persistence.EventCursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c persistence.EventCursor
	for _, e := range l.events {
		switch {
		case e.Import:
			c.Import = max(c.Import, e.Seq)
		case e.ToolChange:
			c.Tool = max(c.Tool, e.Seq)
		case e.Config:
			c.Config = max(c.Config, e.Seq)
		default:
			c.Audit = max(c.Audit, e.Seq)
		}
	}
	return c, nil
}

type streamEnv struct {
	t      *testing.T
	api    *httpapi.Server
	srv    *httptest.Server
	log    *fakeLog
	keys   *fakeKeys
	key    string
	tenant uuid.UUID
}

// addKey makes a new key of tenant and returns it.
func (e *streamEnv) addKey(tenant uuid.UUID, role persistence.Role) string {
	e.t.Helper()
	key, hash, err := persistence.GenerateAPIKey()
	if err != nil {
		e.t.Fatal(err)
	}
	e.keys.mu.Lock()
	defer e.keys.mu.Unlock()
	e.keys.keys[string(hash)] = persistence.Principal{KeyID: uuid.New(), TenantID: tenant, Role: role}
	return key
}

func newStreamEnv(t *testing.T, cfg httpapi.EventStreamConfig) *streamEnv {
	t.Helper()
	key, hash, err := persistence.GenerateAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	tenant := uuid.New()
	keys := &fakeKeys{keys: map[string]persistence.Principal{string(hash): {KeyID: uuid.New(), TenantID: tenant, Role: persistence.RoleModule}}}
	log := &fakeLog{tenant: tenant}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	api := httpapi.New(httpapi.Config{HeartbeatInterval: 10 * time.Second, Events: cfg}, httpapi.Deps{Store: keys, Events: log})
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		api.CloseStreams()
		srv.Close()
	})
	return &streamEnv{t: t, api: api, srv: srv, log: log, keys: keys, key: key, tenant: tenant}
}

func ev(seq int64, kind, from, status string) persistence.FleetEvent {
	return persistence.FleetEvent{Seq: seq, Kind: kind, ServerID: uuid.MustParse("6f1d2c3e-0000-4000-8000-000000000001"),
		ModuleName: "mod", From: from, Status: status, At: time.Date(2026, 5, 17, 10, 0, int(seq), 0, time.UTC)}
}

func imp(seq int64, from, status string) persistence.FleetEvent {
	e := ev(seq, persistence.KindImported, from, status)
	e.Import = true
	return e
}

func toolChange(seq int64, cause string) persistence.FleetEvent {
	e := ev(seq, persistence.KindToolChanged, "enabled", "disabled")
	e.ToolChange, e.SkillID, e.Tool, e.Cause = true, uuid.MustParse("6f1d2c3e-0000-4000-8000-0000000000aa"), "echo", cause
	return e
}

func configChange(seq int64, from, status string) persistence.FleetEvent {
	e := ev(seq, persistence.KindConfigured, from, status)
	e.Config, e.ChangeID = true, uuid.MustParse("6f1d2c3e-0000-4000-8000-0000000000cc")
	e.Changes = []persistence.ConfigChange{{Field: "requires_approval", Old: true, New: false}}
	e.By = persistence.ByKey(uuid.MustParse("6f1d2c3e-0000-4000-8000-0000000000dd"))
	return e
}

// frame is one server-sent event (or comment) as a client reads it.
type frame struct {
	id, event, data, comment string
}

// open opens a stream with the env's key and returns its frames as they arrive.
func (e *streamEnv) open(lastID string, query string) (*http.Response, <-chan frame) {
	e.t.Helper()
	resp, frames, _ := e.openAs(e.key, lastID, query)
	return resp, frames
}

// openAs opens a stream with key and returns its frames as they arrive and a func that closes it. A
// refused stream's body is read and left in resp.Body.
func (e *streamEnv) openAs(key, lastID string, query string) (*http.Response, <-chan frame, context.CancelFunc) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+"/v1/mcp/events"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(chan frame, 100)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		close(out)
		return resp, out, cancel
	}
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var f frame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f != (frame{}) {
					out <- f
				}
				f = frame{}
			case strings.HasPrefix(line, ":"):
				f.comment += strings.TrimSpace(line[1:]) + ";"
			case strings.HasPrefix(line, "id: "):
				f.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			}
		}
	}()
	return resp, out, cancel
}

// next returns the next event frame (skipping comments), failing after a while.
func next(t *testing.T, frames <-chan frame) frame {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("the stream ended")
			}
			if f.id == "" && f.data == "" {
				continue
			}
			return f
		case <-timeout:
			t.Fatal("no event within 5 s")
		}
	}
}

func quiet(t *testing.T, frames <-chan frame, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case f, ok := <-frames:
			if ok && (f.id != "" || f.data != "") {
				t.Fatalf("unexpected event %+v", f)
			}
		case <-timeout:
			return
		}
	}
}

func TestEventStreamFromNow(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	e.log.add(ev(1, "mcp.server.registered", "", "healthy"))
	resp, frames := e.open("", "")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	quiet(t, frames, 100*time.Millisecond) // history before the connection is not replayed without an id
	e.log.add(ev(2, "mcp.server.degraded", "healthy", "degraded"))
	f := next(t, frames)
	if f.id != "t2-0-0" {
		t.Fatalf("id %q, want t2-0-0", f.id)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(f.data), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"kind": "mcp.server.degraded", "server_id": "6f1d2c3e-0000-4000-8000-000000000001", "module_name": "mod",
		"from": "healthy", "status": "degraded", "at": "2026-05-17T10:00:02Z", "trace_id": nil}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("data\n got %s\nwant %s", gb, wb)
	}
	e.log.add(imp(1, "never_imported", "succeeded"))
	if f := next(t, frames); f.id != "t2-1-0" || !strings.Contains(f.data, `"kind":"mcp.server.imported"`) {
		t.Fatalf("import event %+v", f)
	}
}

func TestEventStreamResumes(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	for i := int64(1); i <= 4; i++ {
		e.log.add(ev(i, "mcp.server.degraded", "healthy", "degraded"))
	}
	e.log.add(imp(1, "never_imported", "failed"))
	e.log.add(imp(2, "failed", "succeeded"))
	_, frames := e.open("t2-1-0", "")
	for _, want := range []string{"t3-1-0", "t4-1-0", "t4-2-0"} {
		if f := next(t, frames); f.id != want {
			t.Fatalf("resumed id %q, want %s", f.id, want)
		}
	}
	// ?last_event_id= does the same for a client that cannot set the header.
	_, frames = e.open("", "?last_event_id=t4-1-0")
	if f := next(t, frames); f.id != "t4-2-0" {
		t.Fatalf("resumed by query: %q", f.id)
	}
	// An id ahead of the log (another database) is a reset, then the stream goes on from the newest.
	_, frames = e.open("t99-0-0", "")
	if f := next(t, frames); f.event != "reset" || f.id != "t4-2-0" {
		t.Fatalf("ahead of the log: %+v", f)
	}
	e.log.add(ev(5, "mcp.server.recovered", "degraded", "healthy"))
	if f := next(t, frames); f.id != "t5-2-0" {
		t.Fatalf("after a reset: %q", f.id)
	}
	// An id of the numbering every tenant shared before is a reset too: its numbers mean nothing here.
	_, frames = e.open("3-1", "")
	if f := next(t, frames); f.event != "reset" || f.id != "t5-2-0" {
		t.Fatalf("an id of the old numbering: %+v", f)
	}
	// Garbage is refused.
	resp, _ := e.open("drop table", "")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a garbage id: %d", resp.StatusCode)
	}
}

func TestEventStreamKeepAliveLimitAndShutdown(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{KeepAlive: 30 * time.Millisecond, MaxStreams: 1})
	_, frames := e.open("", "")
	timeout := time.After(5 * time.Second)
	for kept := false; !kept; {
		select {
		case f := <-frames:
			kept = strings.Contains(f.comment, "keep-alive")
		case <-timeout:
			t.Fatal("no keep-alive comment")
		}
	}
	if resp, _, _ := e.openAs(e.addKey(uuid.New(), persistence.RoleOperator), "", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream past MaxStreams: %d", resp.StatusCode)
	}
	e.api.CloseStreams()
	timeout = time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				return // ended by the shutdown
			}
		case <-timeout:
			t.Fatal("the stream outlived CloseStreams")
		}
	}
}

// TestEventStreamOutlivesServerTimeouts runs the stream on a server with short read and write
// timeouts, as the service's http.Server has (30 s each): the stream must outlive both.
func TestEventStreamOutlivesServerTimeouts(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{KeepAlive: 50 * time.Millisecond})
	e.srv.Close()
	e.srv = httptest.NewUnstartedServer(e.api.Handler())
	e.srv.Config.ReadTimeout, e.srv.Config.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	_, frames := e.open("", "")
	deadline := time.After(time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				t.Fatal("the stream ended at the server's timeouts")
			}
		case <-deadline:
			e.log.add(ev(1, "mcp.server.registered", "", "healthy"))
			if f := next(t, frames); f.id != "t1-0-0" {
				t.Fatalf("after 1 s: %+v", f)
			}
			return
		}
	}
}

func TestEventStreamNeedsAKey(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	resp, err := http.Get(e.srv.URL + "/v1/mcp/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
}

// refusal checks that resp is a refused stream with status, problem type slug and a Retry-After.
func refusal(t *testing.T, what string, resp *http.Response, status int, slug string) {
	t.Helper()
	var p struct{ Type string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatalf("%s: %d, body: %v", what, resp.StatusCode, err)
	}
	if resp.StatusCode != status || p.Type != httpapi.ProblemBase+slug || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %q Retry-After %q %s, want %d %s with Retry-After", what, resp.StatusCode, p.Type,
			resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), status, slug)
	}
}

// TestEventStreamLimits crosses each stream limit: a key at its limit, a tenant at its limit (whatever
// key it uses next), and the total. Tenant A at its limits does not stop tenant B, and a stream closed
// frees its place.
func TestEventStreamLimits(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{MaxStreams: 5, MaxStreamsPerTenant: 3, MaxStreamsPerKey: 2})
	tenantA, tenantB := uuid.New(), uuid.New()
	a1, a2, a3 := e.addKey(tenantA, persistence.RoleModule), e.addKey(tenantA, persistence.RoleOperator), e.addKey(tenantA, persistence.RoleAdmin)
	b1, b2 := e.addKey(tenantB, persistence.RoleOperator), e.addKey(tenantB, persistence.RoleAdmin)
	opened := func(key string) context.CancelFunc {
		t.Helper()
		resp, _, cancel := e.openAs(key, "", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a stream within the limits: %d", resp.StatusCode)
		}
		return cancel
	}
	closeA1 := opened(a1)
	opened(a1)
	resp, _, _ := e.openAs(a1, "", "")
	refusal(t, "a key's third stream", resp, http.StatusTooManyRequests, "too_many_streams_per_key")
	opened(a2)
	resp, _, _ = e.openAs(a2, "", "")
	refusal(t, "a tenant's fourth stream", resp, http.StatusTooManyRequests, "too_many_streams_per_tenant")
	resp, _, _ = e.openAs(a3, "", "")
	refusal(t, "a tenant's fourth stream on a fresh key", resp, http.StatusTooManyRequests, "too_many_streams_per_tenant")
	// Tenant A holds all it may: tenant B still streams, up to the total.
	opened(b1)
	opened(b2)
	resp, _, _ = e.openAs(b2, "", "")
	refusal(t, "a stream past the total", resp, http.StatusServiceUnavailable, "too_many_streams")
	// Closing one of A's streams frees its place, once the service has seen the client go.
	closeA1()
	wait.For(t, "a closed stream to free its place", 5*time.Second, func() bool {
		resp, _, _ := e.openAs(b2, "", "")
		return resp.StatusCode == http.StatusOK
	})
}

// A recorded tool change is an event of its own log: mcp.tool.changed with the skill, the tool and the
// cause, numbered in the id's third part. An id of two parts (sent before tool changes were streamed)
// resumes the tool changes from the first, since none of them was sent on it.
func TestEventStreamToolChanges(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	e.key = e.addKey(e.tenant, persistence.RoleOperator) // a module key is sent no tool changes
	e.log.add(ev(1, "mcp.server.registered", "", "healthy"))
	_, frames := e.open("t1-0-0", "")
	e.log.add(toolChange(1, "endpoint"))
	f := next(t, frames)
	if f.id != "t1-0-1" {
		t.Fatalf("id %q, want t1-0-1", f.id)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(f.data), &got); err != nil {
		t.Fatal(err)
	}
	if got["kind"] != "mcp.tool.changed" || got["skill_id"] != "6f1d2c3e-0000-4000-8000-0000000000aa" || got["tool"] != "echo" ||
		got["cause"] != "endpoint" || got["from"] != "enabled" || got["status"] != "disabled" {
		t.Fatalf("tool change event %s", f.data)
	}
	e.log.add(toolChange(2, "definition"))
	if f := next(t, frames); f.id != "t1-0-2" {
		t.Fatalf("second change: %+v", f)
	}
	_, frames = e.open("t1-0", "")
	for _, want := range []string{"t1-0-1", "t1-0-2"} {
		if f := next(t, frames); f.id != want || f.event == "reset" {
			t.Fatalf("resumed from a two-part id: %+v, want %s", f, want)
		}
	}
	// Other events carry none of the tool change's members.
	e.log.add(ev(2, "mcp.server.degraded", "healthy", "degraded"))
	if f := next(t, frames); f.id != "t2-0-2" || strings.Contains(f.data, "skill_id") {
		t.Fatalf("an audit event after tool changes: %+v", f)
	}
}

// A recorded configuration change is an event of its own log: mcp.server.configured with the change, its
// fields old → new and who, numbered in the id's fourth part (an id of three parts has none yet).
func TestEventStreamConfigChanges(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	e.key = e.addKey(e.tenant, persistence.RoleAdmin)
	e.log.add(ev(1, "mcp.server.registered", "", "healthy"))
	_, frames := e.open("t1-0-0", "")
	e.log.add(configChange(1, "", "pending"))
	f := next(t, frames)
	want := `{"kind":"mcp.server.configured","server_id":"6f1d2c3e-0000-4000-8000-000000000001","module_name":"mod",` +
		`"from":null,"status":"pending","at":"2026-05-17T10:00:01Z","trace_id":null,"change_id":"6f1d2c3e-0000-4000-8000-0000000000cc",` +
		`"changes":[{"field":"requires_approval","old":true,"new":false}],"by":"6f1d2c3e-0000-4000-8000-0000000000dd"}`
	if f.id != "t1-0-0-1" || f.data != want {
		t.Fatalf("frame %+v\nwant data %s", f, want)
	}
	e.log.add(configChange(2, "pending", "confirmed"))
	if f := next(t, frames); f.id != "t1-0-0-2" || !strings.Contains(f.data, `"from":"pending","status":"confirmed"`) {
		t.Fatalf("the decision: %+v", f)
	}
	_, frames = e.open("t1-0-0", "")
	if f := next(t, frames); f.id != "t1-0-0-1" {
		t.Fatalf("resumed from a three-part id: %+v", f)
	}
}

// A module key's stream carries neither tool changes nor configuration changes (the endpoints that list
// them refuse module keys), while its position still moves past them; an operator's carries both.
func TestEventStreamModuleKeysSeeNoChanges(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	e.log.add(ev(1, "mcp.server.registered", "", "healthy"))
	_, module := e.open("t1-0-0", "")
	_, ops, _ := e.openAs(e.addKey(e.tenant, persistence.RoleOperator), "t1-0-0", "")
	e.log.add(toolChange(1, "definition"))
	e.log.add(configChange(1, "", "applied"))
	for _, want := range []string{"t1-0-1", "t1-0-1-1"} {
		if f := next(t, ops); f.id != want {
			t.Fatalf("operator: %+v, want %s", f, want)
		}
	}
	e.log.add(ev(2, "mcp.server.degraded", "healthy", "degraded"))
	if f := next(t, module); !strings.Contains(f.data, `"kind":"mcp.server.degraded"`) {
		t.Fatalf("module key: first frame %+v, want the degraded event", f)
	}
	// A later poll than the one that passed the changes: its id shows the stream went past them.
	e.log.add(ev(3, "mcp.server.recovered", "degraded", "healthy"))
	if f := next(t, module); f.id != "t3-0-1-1" || !strings.Contains(f.data, `"kind":"mcp.server.recovered"`) {
		t.Fatalf("module key: %+v, want the recovered event at t3-0-1-1", f)
	}
}

// TestEventStreamWatchesHeartbeats: with ?watch= the stream sends a watched server's last heartbeat
// on the first poll and each time it moves, as `event: heartbeat` frames without an id (they are not
// events of the log: a resumed stream's position is untouched), never for a server the store does not
// know for the caller's tenant; a bad watch list is refused before the stream opens.
func TestEventStreamWatchesHeartbeats(t *testing.T) {
	e := newStreamEnv(t, httpapi.EventStreamConfig{})
	a, stranger := uuid.New(), uuid.New()
	t1 := time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)
	e.log.beat(a, t1)
	_, frames := e.open("", "?watch="+a.String()+","+stranger.String()+","+a.String())
	beat := func(want time.Time) {
		t.Helper()
		f := next(t, frames)
		var d httpapi.HeartbeatEventJSON
		if err := json.Unmarshal([]byte(f.data), &d); err != nil || f.event != "heartbeat" || f.id != "" || d.ServerID != a || !d.LastHeartbeatAt.Equal(want) {
			t.Fatalf("frame %+v (%v), want a heartbeat of %s at %s", f, err, a, want)
		}
	}
	beat(t1)
	// The next frame is the moved heartbeat: the unchanged one is not sent again, the stranger never.
	e.log.beat(a, t1.Add(10*time.Second))
	beat(t1.Add(10 * time.Second))
	// A heartbeat frame leaves the event log's position alone: the next event has its own id.
	e.log.add(ev(1, "mcp.server.degraded", "healthy", "degraded"))
	if f := next(t, frames); f.id != "t1-0-0" || f.event != "" {
		t.Fatalf("frame after the heartbeats %+v", f)
	}

	many := make([]string, httpapi.MaxWatch+1)
	for i := range many {
		many[i] = uuid.NewString()
	}
	for _, q := range []string{"?watch=not-a-uuid", "?watch=" + a.String() + ",", "?watch=" + strings.Join(many, ",")} {
		resp, _ := e.open("", q)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"watch"`) {
			t.Errorf("%s: %d %s", q[:min(len(q), 40)], resp.StatusCode, body)
		}
	}
}
