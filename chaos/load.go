package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// api sends the suite's requests to the service and records each of them. In a cluster schedule nodes
// is the load balancer in front of the nodes: every request goes to a node drawn at random among those in
// rotation, and one that got no answer for a reason other than a timeout (refused, reset: the node died
// under it) is sent once more to another node, as a balancer retries an idempotent request.
type api struct {
	base   string
	client *http.Client // no overall timeout: each call sets its own
	rec    *recorder
	inc    func() int
	nodes  *balancer // cluster schedules; nil for one process
}

type answer struct {
	Code    int
	Body    []byte
	Retry   string
	Problem string
	Detail  string
}

// describeConn says which connection an unanswered request went out on: a new one, or one reused from
// the pool after how long idle — an answer lost on a reused connection that the service closed while the
// request was on its way is a client race, not the service dropping a request.
func describeConn(i httptrace.GotConnInfo) string {
	switch {
	case i.Conn == nil:
		return "no connection"
	case !i.Reused:
		return "new connection"
	case i.WasIdle:
		return fmt.Sprintf("connection reused after %s idle", i.IdleTime.Round(time.Millisecond))
	}
	return "connection reused"
}

// call sends one request with its own timeout and records it as q (Kind, Module, ServerID preset).
// It returns the answer, or ok=false when none came.
func (a *api) call(ctx context.Context, q Request, method, path, key string, body any, timeout time.Duration) (answer, bool) {
	if a.nodes == nil {
		ans, ok, _ := a.callAt(ctx, -1, q, method, path, key, body, timeout)
		return ans, ok
	}
	n := a.nodes.pick(-1)
	ans, ok, retry := a.callAt(ctx, n, q, method, path, key, body, timeout)
	if !ok && retry && ctx.Err() == nil {
		if m := a.nodes.pick(n); m >= 0 && m != n {
			ans, ok, _ = a.callAt(ctx, m, q, method, path, key, body, timeout)
		}
	}
	return ans, ok
}

// callAt sends one request to node n (-1: the one process) and records it. retry reports a transport
// error other than a timeout.
func (a *api) callAt(ctx context.Context, n int, q Request, method, path, key string, body any, timeout time.Duration) (ans answer, ok, retry bool) {
	var rdr io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rdr = bytes.NewReader(b)
	}
	base := a.base
	if n >= 0 {
		base = a.nodes.url(n)
		q.Node = n
		q.Inc = a.nodes.inc(n)
	} else {
		q.Inc = a.inc()
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, method, base+path, rdr)
	if err != nil {
		return answer{}, false, false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	var conn httptrace.GotConnInfo
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i }}))
	q.Sent = time.Now()
	resp, err := a.client.Do(req)
	if err != nil {
		q.Done = time.Now()
		if ctx.Err() != nil {
			return answer{}, false, false // the run is over: not part of the history
		}
		q.Err, q.Timeout = classify(err)
		q.Conn = describeConn(conn)
		a.rec.request(q)
		return answer{}, false, !q.Timeout
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	resp.Body.Close()
	q.Done = time.Now()
	if rerr != nil && ctx.Err() != nil {
		return answer{}, false, false
	}
	if rerr != nil {
		q.Err, q.Timeout = classify(rerr)
		q.Conn = describeConn(conn)
		q.Code = 0
		a.rec.request(q)
		return answer{}, false, !q.Timeout
	}
	ans = answer{Code: resp.StatusCode, Body: b, Retry: resp.Header.Get("Retry-After")}
	q.Code = resp.StatusCode
	if resp.StatusCode >= 400 {
		var p struct {
			Type   string `json:"type"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(b, &p)
		ans.Problem = p.Type[strings.LastIndex(p.Type, "/")+1:]
		ans.Detail = p.Detail
		q.Problem, q.Retry = ans.Problem, ans.Retry
		q.Detail = shorten(p.Detail, 100)
	}
	switch q.Kind {
	case ReqRegister, ReqHeartbeat, ReqDeregister:
		if resp.StatusCode < 300 {
			var s struct {
				ServerID string `json:"server_id"`
				Status   string `json:"status"`
			}
			_ = json.Unmarshal(b, &s)
			q.Status = s.Status
			if q.ServerID == "" {
				q.ServerID = s.ServerID
			}
			q.Created = resp.StatusCode == http.StatusCreated
		}
	case ReqReadyz:
		var s struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(b, &s)
		q.Status = s.Status
	}
	a.rec.request(q)
	return ans, true, false
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// module is one simulated MCP module: it registers, heartbeats every H, and — when the schedule says
// so — goes silent (a drop fault) or deregisters and registers again (churn).
type module struct {
	idx   int
	name  string
	churn bool

	silent atomic.Bool // set by a drop fault: no heartbeats are sent
	churns chan time.Duration

	beats  sync.WaitGroup // asynchronous heartbeats in flight (cluster schedules)
	flying atomic.Int32
	regMu  sync.Mutex // one re-registration at a time

	mu       sync.Mutex
	serverID string
	first    string // server id of the first acknowledged registration
	active   bool   // registered and not deregistered by itself
}

func (m *module) id() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.serverID
}

// isActive reports whether the module is registered and heartbeating (not churning, not silent).
func (m *module) isActive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active && !m.silent.Load()
}

type moduleConfig struct {
	H                time.Duration
	HeartbeatTimeout time.Duration
	CommandTimeout   time.Duration
	Key              string
	// Async sends each heartbeat on its tick without waiting for the previous one's answer (at most 4 in
	// flight), as a module with a timer does: in a cluster schedule a heartbeat hanging at a node that was
	// just stopped must not hold back the next one, which the balancer sends to another node.
	Async bool
}

var registerTools = []map[string]any{
	{"name": "search", "description": "search the index", "inputSchema": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}},
	{"name": "fetch", "description": "fetch a document", "inputSchema": map[string]any{"type": "object"}},
}

func (m *module) registerBody() map[string]any {
	return map[string]any{
		"module_name": m.name, "version": "1.0.0", "supported_protocols": []string{"2025-06-18"},
		"capability_advertisement": map[string]any{"tools": registerTools},
	}
}

// register registers the module, retrying until it is acknowledged or ctx ends.
func (m *module) register(ctx context.Context, a *api, cfg moduleConfig) bool {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ans, ok := a.call(ctx, Request{Kind: ReqRegister, Module: m.idx}, http.MethodPost, "/v1/mcp/servers/register", cfg.Key, m.registerBody(), cfg.CommandTimeout)
		if ok && ans.Code < 300 {
			var s struct {
				ServerID string `json:"server_id"`
			}
			_ = json.Unmarshal(ans.Body, &s)
			m.mu.Lock()
			m.serverID = s.ServerID
			if m.first == "" {
				m.first = s.ServerID
			}
			m.active = true
			m.mu.Unlock()
			return true
		}
		sleep(ctx, time.Duration(200+rand.IntN(300))*time.Millisecond)
	}
	return false
}

// run is the module's life: register, then a heartbeat every H until ctx ends.
func (m *module) run(ctx context.Context, a *api, cfg moduleConfig, rec *recorder) {
	sleep(ctx, time.Duration(rand.Int64N(int64(cfg.H)))) // spread the fleet over the interval
	if !m.register(ctx, a, cfg) {
		return
	}
	t := time.NewTicker(cfg.H)
	defer t.Stop()
	defer m.beats.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case gap := <-m.churns:
			m.doChurn(ctx, a, cfg, rec, gap)
		case <-t.C:
			if m.silent.Load() {
				continue
			}
			if !cfg.Async {
				m.heartbeat(ctx, a, cfg)
				continue
			}
			if m.flying.Load() >= 4 {
				continue
			}
			m.flying.Add(1)
			m.beats.Go(func() {
				defer m.flying.Add(-1)
				m.heartbeat(ctx, a, cfg)
			})
		}
	}
}

func (m *module) heartbeat(ctx context.Context, a *api, cfg moduleConfig) {
	id := m.id()
	ans, ok := a.call(ctx, Request{Kind: ReqHeartbeat, Module: m.idx, ServerID: id}, http.MethodPost, "/v1/mcp/servers/heartbeat", cfg.Key,
		map[string]string{"server_id": id}, cfg.HeartbeatTimeout)
	if !ok {
		return
	}
	switch ans.Code {
	case http.StatusNotFound, http.StatusConflict:
		// Not registered (any more): a real module registers again (once, if heartbeats overlap).
		if !m.regMu.TryLock() {
			return
		}
		defer m.regMu.Unlock()
		if m.id() == id {
			m.register(ctx, a, cfg)
		}
	}
}

// doChurn deregisters the module, stays away for gap, and registers it again.
func (m *module) doChurn(ctx context.Context, a *api, cfg moduleConfig, rec *recorder, gap time.Duration) {
	m.beats.Wait() // no heartbeat of the old registration answers after the deregistration
	id := m.id()
	m.mu.Lock()
	m.active = false
	m.mu.Unlock()
	rec.silence(m.idx, true, SilenceDeregister, time.Now())
	for range 5 {
		ans, ok := a.call(ctx, Request{Kind: ReqDeregister, Module: m.idx, ServerID: id}, http.MethodPost, "/v1/mcp/servers/deregister", cfg.Key,
			map[string]string{"server_id": id}, cfg.CommandTimeout)
		if ok && ans.Code < 500 {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	sleep(ctx, gap)
	if m.register(ctx, a, cfg) {
		rec.silence(m.idx, false, SilenceDeregister, time.Now())
	}
}

// fleet is the set of simulated modules.
type fleet struct {
	mods []*module
	wg   sync.WaitGroup
}

func newFleet(n, churn int, prefix string) *fleet {
	f := &fleet{}
	for i := range n {
		f.mods = append(f.mods, &module{idx: i, name: fmt.Sprintf("%s-%04d", prefix, i), churn: i < churn, churns: make(chan time.Duration, 1)})
	}
	return f
}

func (f *fleet) start(ctx context.Context, a *api, cfg moduleConfig, rec *recorder) {
	for _, m := range f.mods {
		f.wg.Go(func() { m.run(ctx, a, cfg, rec) })
	}
}

// registered waits until every module has registered once, up to limit.
func (f *fleet) registered(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		for _, m := range f.mods {
			if m.id() != "" {
				n++
			}
		}
		if n == len(f.mods) {
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("not every module registered within %s", limit)
}

// pick returns up to n modules drawn at random from those heartbeating normally (not churn modules).
func (f *fleet) pick(n int) []*module {
	var cands []*module
	for _, m := range f.mods {
		if !m.churn && m.isActive() {
			cands = append(cands, m)
		}
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return cands[:min(n, len(cands))]
}

// steady returns how many non-churn modules there are.
func (f *fleet) steady() int {
	n := 0
	for _, m := range f.mods {
		if !m.churn {
			n++
		}
	}
	return n
}

func (f *fleet) infos() []ModuleInfo {
	out := make([]ModuleInfo, len(f.mods))
	for i, m := range f.mods {
		m.mu.Lock()
		out[i] = ModuleInfo{Index: i, Name: m.name, ServerID: m.first, Churn: m.churn}
		m.mu.Unlock()
	}
	return out
}
