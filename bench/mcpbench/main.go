// Command mcpbench measures mcpfleet's MCP endpoint (/mcp) against a running service (bench/run.sh starts
// one): tools/list of a tenant with -servers × -tools listed tools (latency of a whole listing, every page,
// and its bytes); the fan-out of notifications/tools/list_changed to -sessions connected SDK sessions after
// an operator change (time from the change's API answer to each session's notification, to the last
// one); and the latency the endpoint adds to a tool call against calling the same remote MCP server
// directly with the same SDK client (p50, p99). It prints a Markdown section for bench/REPORT.md.
//
// It sets its tenant up itself with the keys it is given: -servers modules register with the module key,
// each advertising -tools tools and an endpoint on an MCP server this program serves on loopback (the
// official Go SDK's server), an operator enables every tool, an administrator gives the first server a
// data class, no approval and a budget of 1,000 calls per run. The service must allow 127.0.0.1 as an
// endpoint (MCPFLEET_ENDPOINT_ALLOWLIST) and enough sessions and streams per key
// (MCPFLEET_MCP_SESSIONS_PER_KEY, MCPFLEET_MCP_STREAMS_PER_KEY) for -sessions.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	ctx := context.Background()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}

type config struct {
	baseURL, adminKey, operatorKey, moduleKey string
	secondAdminKey                            string
	servers, tools, sessions, lists, calls    int
	changes                                   int
	servicePID                                int
	out                                       string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("mcpbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.baseURL, "base-url", "http://127.0.0.1:18181", "the service")
	fs.StringVar(&c.adminKey, "admin-key", "", "an administrator's API key of the bench tenant")
	fs.StringVar(&c.secondAdminKey, "second-admin-key", "", "another administrator's API key of the bench tenant: it confirms switching approval off")
	fs.StringVar(&c.operatorKey, "operator-key", "", "an operator's API key of the bench tenant")
	fs.StringVar(&c.moduleKey, "module-key", "", "a module API key of the bench tenant")
	fs.IntVar(&c.servers, "servers", 200, "servers to register")
	fs.IntVar(&c.tools, "tools", 20, "tools per server")
	fs.IntVar(&c.sessions, "sessions", 1000, "connected sessions for the list_changed fan-out")
	fs.IntVar(&c.lists, "lists", 100, "whole tools/list listings to time")
	fs.IntVar(&c.calls, "calls", 400, "tool calls to time, each way (direct and through /mcp)")
	fs.IntVar(&c.changes, "changes", 6, "operator changes to time the fan-out of")
	fs.IntVar(&c.servicePID, "service-pid", 0, "the service's pid, for its CPU and RSS (0: not read)")
	fs.StringVar(&c.out, "out", "", "write the Markdown section here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.adminKey == "" || c.secondAdminKey == "" || c.operatorKey == "" || c.moduleKey == "" {
		return errors.New("-admin-key, -second-admin-key, -operator-key and -module-key are required")
	}
	b := &bench{c: c, log: stderr, api: &http.Client{Timeout: 30 * time.Second}}
	md, err := b.run(ctx)
	if err != nil {
		return err
	}
	if c.out == "" {
		_, err = io.WriteString(stdout, md)
		return err
	}
	return os.WriteFile(c.out, []byte(md), 0o644)
}

type bench struct {
	c      config
	log    io.Writer
	api    *http.Client
	remote string // the loopback MCP server's base URL
	notes  []string
}

func (b *bench) logf(format string, a ...any) { fmt.Fprintf(b.log, "mcpbench: "+format+"\n", a...) }

// do calls the service's API and decodes a 2xx answer into out (if not nil).
func (b *bench) do(method, path, key string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.c.baseURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// serveRemote serves the MCP server every registered module points at: -tools tools named t00, t01, …,
// each answering its "q" argument back.
func (b *bench) serveRemote() (func(), error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-remote", Version: "1"}, nil)
	for i := range b.c.tools {
		srv.AddTool(&mcp.Tool{Name: toolName(i), Description: "answers its q argument back",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var args struct{ Q string }
				_ = json.Unmarshal(req.Params.Arguments, &args)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok " + args.Q}}}, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	b.remote = "http://" + ln.Addr().String()
	return func() { _ = hs.Close() }, nil
}

func toolName(i int) string   { return fmt.Sprintf("t%02d", i) }
func moduleName(i int) string { return fmt.Sprintf("bench-%03d", i) }

// setup registers the servers, enables every tool and readies the first server for calls. It returns
// the first server's id.
func (b *bench) setup() (string, error) {
	tools := make([]map[string]any, b.c.tools)
	for i := range tools {
		tools[i] = map[string]any{"name": toolName(i), "description": "answers its q argument back",
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
	}
	ids := make([]string, b.c.servers)
	err := parallel(b.c.servers, 8, func(i int) error {
		var out struct {
			ServerID string `json:"server_id"`
		}
		err := b.do("POST", "/v1/mcp/servers/register", b.c.moduleKey, map[string]any{
			"module_name": moduleName(i), "version": "1", "supported_protocols": []string{"2025-11-25"},
			"endpoint": fmt.Sprintf("%s/s/%d/mcp", b.remote, i), "capability_advertisement": map[string]any{"tools": tools},
		}, &out)
		ids[i] = out.ServerID
		return err
	})
	if err != nil {
		return "", fmt.Errorf("register: %w", err)
	}
	var skills []string
	var mu sync.Mutex
	err = parallel(b.c.servers, 8, func(i int) error {
		var out struct {
			Skills []struct {
				SkillID string `json:"skill_id"`
			} `json:"skills"`
		}
		if err := b.do("GET", "/v1/mcp/servers/"+ids[i]+"/skills", b.c.operatorKey, nil, &out); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range out.Skills {
			skills = append(skills, k.SkillID)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read skills: %w", err)
	}
	if err := parallel(len(skills), 8, func(i int) error {
		return b.do("POST", "/v1/mcp/skills/"+skills[i]+"/enable", b.c.operatorKey, nil, nil)
	}); err != nil {
		return "", fmt.Errorf("enable: %w", err)
	}
	var patched struct {
		Pending *struct {
			ChangeID string `json:"change_id"`
		} `json:"pending_change"`
	}
	if err := b.do("PATCH", "/v1/mcp/servers/"+ids[0], b.c.adminKey, map[string]any{"data_class": "internal", "requires_approval": false}, &patched); err != nil {
		return "", err
	}
	if patched.Pending != nil { // switching approval off waits for a second administrator
		if err := b.do("POST", "/v1/mcp/servers/"+ids[0]+"/config-changes/"+patched.Pending.ChangeID+"/confirm", b.c.secondAdminKey, nil, nil); err != nil {
			return "", err
		}
	}
	if err := b.do("PUT", "/v1/mcp/settings", b.c.adminKey, map[string]any{"max_calls_per_run": 1000}, nil); err != nil {
		return "", err
	}
	b.logf("%d servers registered, %d tools enabled", len(ids), len(skills))
	return ids[0], nil
}

// parallel runs f(0..n-1) on k workers and returns the first error.
func parallel(n, k int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// countingTransport adds the bearer key and counts the bytes of answers to POST requests.
type countingTransport struct {
	key   string
	bytes atomic.Int64
	next  http.RoundTripper
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.key != "" {
		r.Header.Set("Authorization", "Bearer "+t.key)
	}
	resp, err := t.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

var sharedTransport = &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}

// connect opens an SDK client session (MCP 2025-11-25, with a session and its notification stream).
func connect(ctx context.Context, url string, tr *countingTransport, onChanged func()) (*mcp.ClientSession, error) {
	opts := &mcp.ClientOptions{}
	if onChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { onChanged() }
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpbench", Version: "1"}, opts)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// listAll lists every tool, page by page, and returns how many and how many pages.
func listAll(ctx context.Context, s *mcp.ClientSession) (int, int, error) {
	n, pages := 0, 0
	params := &mcp.ListToolsParams{}
	for {
		res, err := s.ListTools(ctx, params)
		if err != nil {
			return n, pages, err
		}
		pages++
		n += len(res.Tools)
		if res.NextCursor == "" {
			return n, pages, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64)
}

// cpuTicks is the service's user+system CPU time in clock ticks, and its RSS in KiB.
func cpuTicks(pid int) (int64, int64) {
	if pid == 0 {
		return 0, 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	var rss int64
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				rss, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	return ut + st, rss
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func (b *bench) run(ctx context.Context) (string, error) {
	started := time.Now().UTC()
	loadStart := uptime()
	stop, err := b.serveRemote()
	if err != nil {
		return "", err
	}
	defer stop()
	firstID, err := b.setup()
	if err != nil {
		return "", err
	}
	endpoint := b.c.baseURL + "/mcp"
	want := b.c.servers * b.c.tools

	// tools/list: one session, whole listings.
	lt := &countingTransport{key: b.c.adminKey, next: sharedTransport}
	ls, err := connect(ctx, endpoint, lt, nil)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer ls.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, _, err := listAll(ctx, ls)
		if err != nil {
			return "", fmt.Errorf("tools/list: %w", err)
		}
		if n == want {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("tools/list lists %d tools, want %d", n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var listTimes []time.Duration
	var pages int
	var listBytes int64
	for i := range b.c.lists + 5 {
		before := lt.bytes.Load()
		t0 := time.Now()
		_, p, err := listAll(ctx, ls)
		if err != nil {
			return "", err
		}
		if i >= 5 { // the first five warm up
			listTimes = append(listTimes, time.Since(t0))
		}
		pages, listBytes = p, lt.bytes.Load()-before
	}
	b.logf("tools/list: %d tools in %d pages, %d bytes, p50 %s ms", want, pages, listBytes, ms(quantile(listTimes, 0.5)))

	// Calls: the same tool directly and through /mcp, interleaved.
	dt := &countingTransport{next: sharedTransport}
	direct, err := connect(ctx, fmt.Sprintf("%s/s/0/mcp", b.remote), dt, nil)
	if err != nil {
		return "", err
	}
	defer direct.Close()
	var directTimes, viaTimes []time.Duration
	callOnce := func(s *mcp.ClientSession, name string) (time.Duration, error) {
		t0 := time.Now()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"q": "x"}})
		d := time.Since(t0)
		if err == nil && res.IsError {
			var sb strings.Builder
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					sb.WriteString(tc.Text)
				}
			}
			err = errors.New(sb.String())
		}
		return d, err
	}
	via := ls
	viaCalls := 0
	for i := range b.c.calls + 10 {
		if viaCalls == 990 { // a session is a run of at most 1,000 calls: take a new one
			if via, err = connect(ctx, endpoint, lt, nil); err != nil {
				return "", err
			}
			viaCalls = 0
		}
		d1, err := callOnce(direct, toolName(0))
		if err != nil {
			return "", fmt.Errorf("direct call: %w", err)
		}
		d2, err := callOnce(via, moduleName(0)+"."+toolName(0))
		if err != nil {
			return "", fmt.Errorf("call through /mcp: %w", err)
		}
		viaCalls++
		if i >= 10 {
			directTimes, viaTimes = append(directTimes, d1), append(viaTimes, d2)
		}
	}
	b.logf("calls: direct p50 %s ms, through /mcp p50 %s ms", ms(quantile(directTimes, 0.5)), ms(quantile(viaTimes, 0.5)))

	// Fan-out: -sessions sessions, each timing its list_changed.
	_, rss0 := cpuTicks(b.c.servicePID)
	type sess struct {
		s  *mcp.ClientSession
		at atomic.Int64 // unix nanos of the last list_changed
	}
	all := make([]*sess, b.c.sessions)
	ft := &countingTransport{key: b.c.adminKey, next: sharedTransport}
	t0 := time.Now()
	err = parallel(b.c.sessions, 16, func(i int) error {
		ss := &sess{}
		s, err := connect(ctx, endpoint, ft, func() { ss.at.Store(time.Now().UnixNano()) })
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		ss.s = s
		all[i] = ss
		return nil
	})
	if err != nil {
		return "", err
	}
	connectTime := time.Since(t0)
	defer func() {
		_ = parallel(len(all), 16, func(i int) error {
			if all[i] != nil {
				_ = all[i].s.Close()
			}
			return nil
		})
	}()
	b.logf("%d sessions connected in %s", len(all), connectTime.Round(time.Millisecond))
	// Idle cost: the service's CPU with every session connected and nothing happening.
	idleTicks0, _ := cpuTicks(b.c.servicePID)
	time.Sleep(10 * time.Second)
	idleTicks1, rss1 := cpuTicks(b.c.servicePID)

	var skills struct {
		Skills []struct {
			SkillID string `json:"skill_id"`
		} `json:"skills"`
	}
	if err := b.do("GET", "/v1/mcp/servers/"+firstID+"/skills", b.c.operatorKey, nil, &skills); err != nil {
		return "", err
	}
	target := skills.Skills[len(skills.Skills)-1].SkillID
	type round struct {
		first, last, p50, p99 time.Duration
		missed                int
	}
	var rounds []round
	for r := range b.c.changes {
		op := "disable"
		if r%2 == 1 {
			op = "enable"
		}
		for _, ss := range all {
			ss.at.Store(0)
		}
		t0 := time.Now()
		if err := b.do("POST", "/v1/mcp/skills/"+target+"/"+op, b.c.operatorKey, nil, nil); err != nil {
			return "", err
		}
		answered := time.Now()
		end := answered.Add(10 * time.Second)
		for time.Now().Before(end) {
			done := true
			for _, ss := range all {
				if ss.at.Load() == 0 {
					done = false
					break
				}
			}
			if done {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		var lat []time.Duration
		missed := 0
		for _, ss := range all {
			if at := ss.at.Load(); at == 0 {
				missed++
			} else {
				lat = append(lat, time.Unix(0, at).Sub(answered))
			}
		}
		rd := round{missed: missed}
		if len(lat) > 0 {
			rd.first, rd.last, rd.p50, rd.p99 = slices.Min(lat), slices.Max(lat), quantile(lat, 0.5), quantile(lat, 0.99)
		}
		rounds = append(rounds, rd)
		b.logf("change %d (%s, API answered in %s): first session notified after %s ms, last after %s ms, %d missed", r+1, op, answered.Sub(t0).Round(time.Millisecond), ms(rd.first), ms(rd.last), missed)
		time.Sleep(time.Second)
	}

	loadEnd := uptime()
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format+"\n", a...) }
	p("## /mcp endpoint")
	p("")
	p("Measured by `bench/mcpbench` (`BENCH_MODE=mcp make bench`; `make bench` runs it after the load) on %s against a service", started.Format(time.RFC3339))
	p("started for it on a fresh database (`bin/mcpfleet serve`, MCP endpoint in `keep` mode; an operator change on the node wakes the tenant's read, the poll every 250 ms is the fallback).")
	p("%d self-registered servers × %d tools, all enabled (%d listed tools); the remote MCP server is this program's, on", b.c.servers, b.c.tools, want)
	p("loopback (the official Go SDK's server); clients are the official Go SDK's, speaking 2025-11-25 (sessions). %s, GOMAXPROCS %d, %d CPUs.", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU())
	p("")
	p("The machine's load (`uptime`) at the start: `%s`; at the end: `%s`. Anything else running on it (the load", loadStart, loadEnd)
	p("benchmark's last phases, when `make bench` runs both) shows in every figure.")
	p("")
	p("| figure | value | unit |")
	p("|---|---|---|")
	p("| tools/list, whole listing of %d tools: pages | %d | pages |", want, pages)
	p("| tools/list, whole listing: bytes on the wire (answer bodies, SSE framing included) | %d | bytes |", listBytes)
	p("| tools/list, whole listing: latency p50 / p99 (%d listings) | %s / %s | ms |", len(listTimes), ms(quantile(listTimes, 0.5)), ms(quantile(listTimes, 0.99)))
	lastAll, missedAll := time.Duration(0), 0
	var p50s, p99s []time.Duration
	for _, r := range rounds {
		lastAll = max(lastAll, r.last)
		missedAll += r.missed
		p50s, p99s = append(p50s, r.p50), append(p99s, r.p99)
	}
	p("| list_changed fan-out to %d sessions: time to the last session's notification, worst of %d operator changes | %s | ms |", len(all), len(rounds), ms(lastAll))
	p("| list_changed fan-out: per change, time to the last session | %s | ms |", joinRounds(rounds, func(r round) time.Duration { return r.last }))
	p("| list_changed fan-out: per change, time to the first session (the read's share) | %s | ms |", joinRounds(rounds, func(r round) time.Duration { return r.first }))
	p("| list_changed fan-out: median session, p99 session (worst change) | %s / %s | ms |", ms(slices.Max(p50s)), ms(slices.Max(p99s)))
	p("| list_changed fan-out: sessions not notified within 10 s | %d | sessions |", missedAll)
	p("| %d sessions: time to connect (16 at a time) | %s | ms |", len(all), ms(connectTime))
	if b.c.servicePID != 0 {
		p("| service CPU while idle, %d sessions connected, %d tools polled every 250 ms (10 s) | %.1f | %% of one core |", len(all), want, float64(idleTicks1-idleTicks0)/10.0)
		p("| service RSS before / after connecting %d sessions | %d / %d | KiB |", len(all), rss0, rss1)
	}
	p("| tool call directly to the remote server: p50 / p99 (%d calls) | %s / %s | ms |", len(directTimes), ms(quantile(directTimes, 0.5)), ms(quantile(directTimes, 0.99)))
	p("| tool call through /mcp (gateway: checks, call record, events, remote call): p50 / p99 | %s / %s | ms |", ms(quantile(viaTimes, 0.5)), ms(quantile(viaTimes, 0.99)))
	p("| latency added by the endpoint: p50 / p99 (through /mcp − direct) | %s / %s | ms |", ms(quantile(viaTimes, 0.5)-quantile(directTimes, 0.5)), ms(quantile(viaTimes, 0.99)-quantile(directTimes, 0.99)))
	p("")
	p("How to read it: a listing is every page of `tools/list` in one session, timed from the first request to the last")
	p("page's answer. A fan-out is timed from the operator's API answer (the change is committed then) to each")
	p("session's `notifications/tools/list_changed`; each change disables or enables one tool of the first server. The")
	p("change's commit wakes the tenant's read of its tools at once (mcpendpoint.Endpoint.Changed), so the time to the first")
	p("session is that read and its application; the last session follows as the SDK notifies the sessions one by one.")
	p("Calls alternate direct and through /mcp, one at a time, so both see the same machine load.")
	for _, n := range b.notes {
		p("- %s", n)
	}
	return sb.String(), nil
}

func joinRounds[T any](rs []T, f func(T) time.Duration) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, ms(f(r)))
	}
	return strings.Join(parts, ", ")
}
