package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// module is one simulated module. id and body are written once, before registered is set.
type module struct {
	id         string
	body       []byte // the pre-encoded heartbeat body
	shard      int
	registered atomic.Bool
	// lastOK is when (run-relative ns) the last request answered 2xx for this module was sent.
	lastOK atomic.Int64
}

// dueRange returns the modules due at tick in a schedule that spreads n modules evenly over a period
// of p ticks: module i is due at every tick t with t mod p = ⌊i·p/n⌋, so modules lo..hi-1 are due at
// tick (each module exactly once per period, in order).
func dueRange(n int, p, tick int64) (lo, hi int) {
	s := tick % p
	ceilDiv := func(a, b int64) int64 { return (a + b - 1) / b }
	return int(ceilDiv(s*int64(n), p)), int(ceilDiv((s+1)*int64(n), p))
}

// phase collects the heartbeat figures of one phase. Safe for concurrent use.
type phase struct {
	name string

	sent, ok, forwarded          atomic.Uint64
	nonHealthyOnTime, nonHealthy atomic.Uint64

	mu         sync.Mutex
	lat        []time.Duration // of 2xx answers
	lag        []time.Duration // schedule lag: sent − due
	errs       map[string]uint64
	start, end time.Time
}

func newPhase(name string) *phase {
	return &phase{name: name, start: time.Now(), errs: map[string]uint64{}}
}

func (p *phase) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.IsZero() {
		p.end = time.Now()
	}
}

func (p *phase) elapsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.IsZero() {
		return time.Since(p.start)
	}
	return p.end.Sub(p.start)
}

func (p *phase) record(lat, lag time.Duration, errKind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = append(p.lag, lag)
	if errKind != "" {
		p.errs[errKind]++
		return
	}
	p.lat = append(p.lat, lat)
}

func (p *phase) errors() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n uint64
	for _, v := range p.errs {
		n += v
	}
	return n
}

// quantile returns the q-quantile of d (nearest rank), or 0 for none. d is sorted in place.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

// target is one node in the balancer's rotation, with the shards it owns (for counting forwarded heartbeats).
type target struct {
	n      *node
	hbURL  string
	shards [shardCount]bool
}

// driver sends the heartbeats: a dispatcher walks the schedule and hands due modules to workers, each of
// which sends the module's heartbeat to a random node of the current rotation.
type driver struct {
	mods     []module
	interval time.Duration
	slot     time.Duration
	auth     string
	t0       time.Time
	hc       *http.Client

	cur      atomic.Pointer[phase]
	rotation atomic.Pointer[[]*target]
}

func (d *driver) now() int64 { return int64(time.Since(d.t0)) }

// setRotation makes the balancer send to these nodes, with the shards each owns per owned (may be nil:
// then every heartbeat to a cluster node counts as forwarded).
func (d *driver) setRotation(nodes []*node, owned []readyz) {
	ts := make([]*target, len(nodes))
	for i, n := range nodes {
		ts[i] = &target{n: n, hbURL: n.url + "/v1/mcp/servers/heartbeat"}
		if n.clusterAddr == "" { // a single node owns every shard
			for s := range ts[i].shards {
				ts[i].shards[s] = true
			}
		} else if i < len(owned) {
			for _, s := range owned[i].Cluster.Shards {
				if s >= 0 && s < shardCount {
					ts[i].shards[s] = true
				}
			}
		}
	}
	d.rotation.Store(&ts)
}

type workItem struct {
	idx int
	due int64 // run-relative ns
}

// run drives heartbeats until ctx ends, with workers goroutines; it returns when all have stopped.
func (d *driver) run(ctx context.Context, workers int) {
	work := make(chan workItem, 4*workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { d.worker(ctx, work, uint64(w)) })
	}
	p := int64(d.interval / d.slot)
	t := time.NewTicker(d.slot)
	defer t.Stop()
	last := d.now() / int64(d.slot)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
		now := d.now() / int64(d.slot)
		for tick := last + 1; tick <= now; tick++ {
			lo, hi := dueRange(len(d.mods), p, tick)
			for i := lo; i < hi; i++ {
				if !d.mods[i].registered.Load() {
					continue
				}
				select {
				case work <- workItem{idx: i, due: tick * int64(d.slot)}:
				case <-ctx.Done():
					break loop
				}
			}
		}
		last = now
	}
	wg.Wait()
}

var healthyStatus = []byte(`"status":"healthy"`)

func (d *driver) worker(ctx context.Context, work <-chan workItem, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	buf := make([]byte, 0, 1024)
	hdr := http.Header{"Authorization": {d.auth}, "Content-Type": {"application/json"}}
	for {
		var it workItem
		select {
		case <-ctx.Done():
			return
		case it = <-work:
		}
		ts := *d.rotation.Load()
		if len(ts) == 0 {
			continue // no node in rotation (between the cluster and the baseline): not sent, not counted
		}
		t := ts[rng.IntN(len(ts))]
		m := &d.mods[it.idx]
		ph := d.cur.Load()
		sent := d.now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.hbURL, bytes.NewReader(m.body))
		req.Header = hdr
		start := time.Now()
		status, answer, err := post(d.hc, req, buf[:0])
		lat := time.Since(start)
		if err != nil && ctx.Err() != nil {
			return
		}
		buf = answer
		ph.sent.Add(1)
		if !t.shards[m.shard] {
			ph.forwarded.Add(1)
		}
		if err != nil || status != http.StatusOK {
			ph.record(0, time.Duration(sent-it.due), errorKind(status, answer, err))
			continue
		}
		ph.record(lat, time.Duration(sent-it.due), "")
		ph.ok.Add(1)
		prev := m.lastOK.Swap(sent)
		if !bytes.Contains(answer, healthyStatus) {
			ph.nonHealthy.Add(1)
			if prev > 0 && sent-prev < int64(2*d.interval) {
				ph.nonHealthyOnTime.Add(1)
			}
		}
	}
}

// post sends req and reads the answer (at most 64 KiB) into buf.
func post(hc *http.Client, req *http.Request, buf []byte) (int, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, buf, err
	}
	defer resp.Body.Close()
	b := bytes.NewBuffer(buf)
	_, err = b.ReadFrom(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, b.Bytes(), err
}

// errorKind names a failed request: "timeout", "connection refused", "connection reset", "transport", or
// "HTTP <status>" with the problem type's last path element.
func errorKind(status int, body []byte, err error) string {
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			return "timeout"
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused"
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return "connection reset"
		}
		return "transport"
	}
	kind := fmt.Sprintf("HTTP %d", status)
	if i := bytes.Index(body, []byte(`"type":"`)); i >= 0 {
		rest := body[i+8:]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			t := rest[:j]
			if k := bytes.LastIndexByte(t, '/'); k >= 0 {
				t = t[k+1:]
			}
			kind += " " + string(t)
		}
	}
	return kind
}

// newHTTPClient returns a client keeping up to conns idle connections per node.
func newHTTPClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}
