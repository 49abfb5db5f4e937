// Package fleetclienttest provides an in-memory stand-in for the mcpfleet
// service's module API, for tests of code that uses fleetclient (the
// client, the demo modules, the load generator).
//
// It is NOT the service: the real one lives in the service packages of this
// repository (actors, persistence, httpapi) and is tested end to end
// elsewhere. The stand-in implements the HTTP contract minimally — register,
// heartbeat, deregister, list/get servers, skills, audit, problem answers with
// Retry-After — keeps everything in memory, and derives health from the lag
// since the last heartbeat with a monitor goroutine (lag < 2H healthy,
// < 3H degraded, else unhealthy). It adds knobs a test needs: injected
// failures and forgetting a server.
package fleetclienttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// Options configures a stand-in Server. The zero value is ready to use.
type Options struct {
	// APIKey is the only Bearer token accepted (default "test-key").
	APIKey string
	// Interval is the heartbeat interval H the stand-in announces and judges
	// by (default 1 s). It is announced in heartbeat_interval_seconds, with a
	// fraction when it is not a whole number of seconds.
	Interval time.Duration
	// MonitorPeriod is how often health is re-evaluated (default Interval/10).
	MonitorPeriod time.Duration
	// TenantID is reported in every server object.
	TenantID string
}

// Audit kinds the stand-in records, as the service names them.
const (
	KindRegistered   = "mcp.server.registered"
	KindDegraded     = "mcp.server.degraded"
	KindUnhealthy    = "mcp.server.unhealthy"
	KindRecovered    = "mcp.server.recovered"
	KindDeregistered = "mcp.server.deregistered"
)

// Stats counts the requests the stand-in answered, by operation. Failed
// (injected or invalid) requests count too.
type Stats struct {
	Registers, Reregisters, Heartbeats, Deregisters, Lists, Gets int
}

type record struct {
	srv      fleetclient.Server
	lastBeat time.Time // monotonic
	beats    int
}

type fault struct {
	remaining  int
	status     int
	retryAfter time.Duration
}

// Server is a running stand-in. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to give fleetclient.New.
	URL string
	// APIKey is the accepted key.
	APIKey string

	opts Options
	ts   *httptest.Server
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	byID   map[string]*record
	byName map[string]*record
	order  []string // server ids in registration order, for paging
	audit  []fleetclient.AuditEvent
	faults map[string]*fault // by operation: "register", "heartbeat", "deregister"
	stalls map[string]*stall // by operation: "register"
	stats  Stats
}

// NewServer starts a stand-in on a loopback port; tb's cleanup closes it.
func NewServer(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.APIKey == "" {
		opts.APIKey = "test-key"
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.MonitorPeriod <= 0 {
		opts.MonitorPeriod = max(opts.Interval/10, time.Millisecond)
	}
	if opts.TenantID == "" {
		opts.TenantID = "00000000-0000-4000-8000-000000000001"
	}
	s := &Server{
		APIKey: opts.APIKey,
		opts:   opts,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		byID:   map[string]*record{},
		byName: map[string]*record{},
		faults: map[string]*fault{},
		stalls: map[string]*stall{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/mcp/servers/register", s.auth(s.stalled("register", s.register)))
	mux.HandleFunc("POST /v1/mcp/servers/heartbeat", s.auth(s.heartbeat))
	mux.HandleFunc("POST /v1/mcp/servers/deregister", s.auth(s.deregister))
	mux.HandleFunc("GET /v1/mcp/servers", s.auth(s.list))
	mux.HandleFunc("GET /v1/mcp/servers/{id}", s.auth(s.get))
	mux.HandleFunc("GET /v1/mcp/servers/{id}/skills", s.auth(s.skills))
	mux.HandleFunc("GET /v1/mcp/audit", s.auth(s.auditList))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ready"}) })
	s.ts = httptest.NewServer(mux)
	s.URL = s.ts.URL
	go s.monitor()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the monitor and the HTTP server. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.ts.Close()
	})
}

// Stats returns the request counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ServerByName returns the record of a module, if it ever registered.
func (s *Server) ServerByName(module string) (fleetclient.Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byName[module]
	if !ok {
		return fleetclient.Server{}, false
	}
	return r.srv, true
}

// Servers returns every record, in registration order.
func (s *Server) Servers() []fleetclient.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]fleetclient.Server, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.byID[id].srv)
	}
	return out
}

// HeartbeatCount returns how many heartbeats the server accepted.
func (s *Server) HeartbeatCount(serverID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.byID[serverID]; ok {
		return r.beats
	}
	return 0
}

// StatusHistory returns the statuses the server went through, in order,
// starting with the one it registered with (from the audit log).
func (s *Server) StatusHistory(serverID string) []fleetclient.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fleetclient.Status
	for _, ev := range s.audit {
		if ev.ServerID == serverID {
			out = append(out, ev.Status)
		}
	}
	return out
}

// Forget drops a server as if the service had lost it: its next heartbeat
// answers 404 server_not_registered and a registration creates a new id.
func (s *Server) Forget(serverID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[serverID]
	if !ok {
		return
	}
	delete(s.byID, serverID)
	delete(s.byName, r.srv.ModuleName)
	s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == serverID })
}

// FailNext makes the next n requests of one operation ("register",
// "heartbeat" or "deregister") answer a problem with the given status and,
// if retryAfter > 0, a Retry-After header (whole seconds, rounded up).
func (s *Server) FailNext(op string, n, status int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = &fault{remaining: n, status: status, retryAfter: retryAfter}
}

// A stall holds back the answers of an operation's next requests.
type stall struct {
	remaining int
	delay     time.Duration
}

// StallNext makes the next n requests of one operation (only "register" so far) take effect as usual
// but answer only after delay — a service whose commit outlived the client's patience. A request whose
// client goes away meanwhile gets no answer; its effect stays.
func (s *Server) StallNext(op string, n int, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalls[op] = &stall{remaining: n, delay: delay}
}

// stalled serves op with h, holding the answer back as StallNext said.
func (s *Server) stalled(op string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		var delay time.Duration
		if st := s.stalls[op]; st != nil && st.remaining > 0 {
			st.remaining--
			delay = st.delay
		}
		s.mu.Unlock()
		if delay == 0 {
			h(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h(rec, r)
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
}

// injected returns the fault to answer with for op, if any; s.mu held.
func (s *Server) injected(op string) *fault {
	f := s.faults[op]
	if f == nil || f.remaining <= 0 {
		return nil
	}
	f.remaining--
	return f
}

func (s *Server) monitor() {
	defer close(s.done)
	t := time.NewTicker(s.opts.MonitorPeriod)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		for _, id := range s.order {
			r := s.byID[id]
			if r.srv.Status == fleetclient.StatusDeregistered {
				continue
			}
			lag := now.Sub(r.lastBeat)
			st := fleetclient.StatusHealthy
			switch {
			case lag >= 3*s.opts.Interval:
				st = fleetclient.StatusUnhealthy
			case lag >= 2*s.opts.Interval:
				st = fleetclient.StatusDegraded
			}
			if st != r.srv.Status {
				kind := KindRecovered
				switch st {
				case fleetclient.StatusDegraded:
					kind = KindDegraded
				case fleetclient.StatusUnhealthy:
					kind = KindUnhealthy
				}
				r.srv.Status = st
				s.addAudit(r, kind)
			}
		}
		s.mu.Unlock()
	}
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	want := "Bearer " + s.opts.APIKey
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "missing or unknown API key", 0)
			return
		}
		h(w, r)
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req fleetclient.RegisterRequest
	if !decode(w, r, &req) {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Registers++
	if f := s.injected("register"); f != nil {
		writeProblem(w, f.status, "injected", http.StatusText(f.status), "injected by the test", f.retryAfter)
		return
	}
	if req.ModuleName == "" || req.Version == "" || len(req.SupportedProtocols) == 0 {
		writeProblem(w, http.StatusUnprocessableEntity, "invalid_registration", "Invalid registration",
			"module_name, version and supported_protocols are required", 0)
		return
	}
	status := http.StatusOK
	rec, ok := s.byName[req.ModuleName]
	if ok {
		s.stats.Reregisters++
	} else {
		status = http.StatusCreated
		rec = &record{srv: fleetclient.Server{
			ServerID:     newID(),
			TenantID:     s.opts.TenantID,
			ModuleName:   req.ModuleName,
			RegisteredAt: now.UTC(),
			TraceID:      traceID(),
		}}
		s.byName[req.ModuleName] = rec
		s.byID[rec.srv.ServerID] = rec
		s.order = append(s.order, rec.srv.ServerID)
	}
	rec.srv.Version = req.Version
	rec.srv.SupportedProtocols = req.SupportedProtocols
	rec.srv.CapabilityAdvertisement = req.CapabilityAdvertisement
	rec.srv.Endpoint = req.Endpoint
	rec.srv.Status = fleetclient.StatusHealthy
	rec.srv.DeregisteredAt = nil
	rec.srv.LastHeartbeatAt = now.UTC()
	rec.lastBeat = now
	s.addAudit(rec, KindRegistered)
	writeJSON(w, status, fleetclient.RegisterResponse{
		Server:                   rec.srv,
		HeartbeatIntervalSeconds: s.opts.Interval.Seconds(),
	})
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ServerID string `json:"server_id"`
	}
	if !decode(w, r, &req) {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Heartbeats++
	if f := s.injected("heartbeat"); f != nil {
		writeProblem(w, f.status, "injected", http.StatusText(f.status), "injected by the test", f.retryAfter)
		return
	}
	rec, ok := s.byID[req.ServerID]
	switch {
	case !ok:
		writeProblem(w, http.StatusNotFound, fleetclient.SlugServerNotRegistered, "Server not registered",
			"register again", 0)
		return
	case rec.srv.Status == fleetclient.StatusDeregistered:
		writeProblem(w, http.StatusConflict, fleetclient.SlugServerDeregistered, "Server deregistered", "", 0)
		return
	}
	rec.beats++
	rec.lastBeat = now
	rec.srv.LastHeartbeatAt = now.UTC()
	if rec.srv.Status != fleetclient.StatusHealthy {
		rec.srv.Status = fleetclient.StatusHealthy
		s.addAudit(rec, KindRecovered)
	}
	writeJSON(w, http.StatusOK, fleetclient.HeartbeatResponse{
		ServerID: rec.srv.ServerID, Status: rec.srv.Status, LastHeartbeatAt: rec.srv.LastHeartbeatAt,
	})
}

func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ServerID string `json:"server_id"`
	}
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Deregisters++
	if f := s.injected("deregister"); f != nil {
		writeProblem(w, f.status, "injected", http.StatusText(f.status), "injected by the test", f.retryAfter)
		return
	}
	rec, ok := s.byID[req.ServerID]
	if !ok {
		writeProblem(w, http.StatusNotFound, fleetclient.SlugServerNotRegistered, "Server not registered", "", 0)
		return
	}
	if rec.srv.Status != fleetclient.StatusDeregistered {
		now := time.Now().UTC()
		rec.srv.Status = fleetclient.StatusDeregistered
		rec.srv.DeregisteredAt = &now
		s.addAudit(rec, KindDeregistered)
	}
	writeJSON(w, http.StatusOK, rec.srv)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeProblem(w, http.StatusBadRequest, "invalid_query", "Invalid query", "limit must be a positive integer", 0)
			return
		}
		limit = min(n, 1000)
	}
	start := 0
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeProblem(w, http.StatusBadRequest, "invalid_query", "Invalid query", "bad cursor", 0)
			return
		}
		start = n
	}
	want := fleetclient.Status(q.Get("status"))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Lists++
	page := fleetclient.ServerPage{Servers: []fleetclient.Server{}}
	i := start
	for ; i < len(s.order) && len(page.Servers) < limit; i++ {
		rec := s.byID[s.order[i]]
		if want == "" || rec.srv.Status == want {
			srv := rec.srv
			if q.Get("include") != "capability_advertisement" { // as the service: left out unless asked
				srv.CapabilityAdvertisement = fleetclient.CapabilityAdvertisement{}
			}
			page.Servers = append(page.Servers, srv)
		}
	}
	if i < len(s.order) {
		page.NextCursor = strconv.Itoa(i)
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Gets++
	rec, ok := s.byID[r.PathValue("id")]
	if !ok {
		writeProblem(w, http.StatusNotFound, "server_not_found", "Server not found", "", 0)
		return
	}
	writeJSON(w, http.StatusOK, rec.srv)
}

func (s *Server) skills(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.byID[r.PathValue("id")]
	if !ok {
		writeProblem(w, http.StatusNotFound, "server_not_found", "Server not found", "", 0)
		return
	}
	available := rec.srv.Status == fleetclient.StatusHealthy || rec.srv.Status == fleetclient.StatusDegraded
	out := struct {
		Skills []fleetclient.Skill `json:"skills"`
	}{Skills: []fleetclient.Skill{}}
	for _, t := range rec.srv.CapabilityAdvertisement.Tools {
		out.Skills = append(out.Skills, fleetclient.Skill{
			SkillID: rec.srv.ServerID + "/" + t.Name, ServerID: rec.srv.ServerID, Name: t.Name,
			Description: t.Description, InputSchema: t.InputSchema, Available: available, UpdatedAt: rec.srv.RegisteredAt,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) auditList(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("server_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	out := struct {
		Events []fleetclient.AuditEvent `json:"events"`
	}{Events: []fleetclient.AuditEvent{}}
	for _, ev := range s.audit {
		if id == "" || ev.ServerID == id {
			out.Events = append(out.Events, ev)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// addAudit appends an event for rec's current status; s.mu held.
func (s *Server) addAudit(rec *record, kind string) {
	s.audit = append(s.audit, fleetclient.AuditEvent{
		EventID: newID(), Kind: kind, ServerID: rec.srv.ServerID, ModuleName: rec.srv.ModuleName,
		Version: rec.srv.Version, Status: rec.srv.Status, TraceID: rec.srv.TraceID, OccurredAt: time.Now().UTC(),
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeProblem(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Unsupported media type", ct, 0)
		return false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_json", "Invalid JSON", err.Error(), 0)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, slug, title, detail string, retryAfter time.Duration) {
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": fleetclient.ProblemTypeBase + slug, "title": title, "status": status, "detail": detail,
	})
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

func traceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
