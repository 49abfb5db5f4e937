package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// ProbeResult is the outcome of the last probe of a server. It is held in memory only: a probe that
// fails is a missed heartbeat, stored nowhere.
type ProbeResult struct {
	At           time.Time
	Reachable    bool
	LatencyMS    int64
	FailureClass mcpclient.Class
	Reason       string
}

// prober performs the MCP handshake with every probe server once per heartbeat interval, outside any
// actor: each probe is a goroutine that waits a random delay (up to half the interval, so probes of a
// large fleet spread out and a server's probes stay less than 2H apart), then a slot (at most
// ProbeConcurrency probes at once). A server whose previous probe is still running is skipped. A
// success is recorded like any contact and counts as a heartbeat; a failure is a miss and changes
// nothing.
type prober struct {
	s       *Service
	timeout time.Duration
	slots   chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	waiting atomic.Int64 // probes waiting for a slot

	mu       sync.Mutex
	inflight map[uuid.UUID]bool
	last     map[uuid.UUID]ProbeResult
	started  bool
	loopDone chan struct{}
}

func newProber(s *Service) *prober {
	ctx, cancel := context.WithCancel(context.Background())
	return &prober{
		s: s, timeout: min(s.cfg.Timeout, s.cfg.ProbeInterval), slots: make(chan struct{}, s.cfg.ProbeConcurrency),
		ctx: ctx, cancel: cancel, inflight: map[uuid.UUID]bool{}, last: map[uuid.UUID]ProbeResult{},
	}
}

// StartProbing starts probing probe servers every probe interval, until Stop.
func (s *Service) StartProbing() {
	p := s.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.ctx.Err() != nil {
		return
	}
	p.started = true
	p.loopDone = make(chan struct{})
	go p.loop()
}

// Stop stops probing and waits, bounded by ctx, for running probes to end (they are cancelled).
func (s *Service) Stop(ctx context.Context) error {
	p := s.probes
	p.mu.Lock() // a round adds its probes under mu after checking ctx: none is added after this
	p.cancel()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("remote: probes did not stop in time")
	}
}

// RunProbes probes every probe server now, without jitter, and returns when every probe has ended.
// Tests drive probing with it.
func (s *Service) RunProbes(ctx context.Context) error {
	return s.probes.round(ctx, 0)
}

// ProbesWaiting returns how many probes are waiting for one of the ProbeConcurrency slots (none of
// them has contacted its server yet).
func (s *Service) ProbesWaiting() int { return int(s.probes.waiting.Load()) }

func (p *prober) loop() {
	interval := p.s.cfg.ProbeInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			go func() {
				if err := p.round(p.ctx, interval/2); err != nil && p.ctx.Err() == nil {
					p.s.log.Warn("probe round failed; the next one retries", "err", err)
				}
			}()
		}
	}
}

// round starts one probe per target not already being probed, each after a random delay below jitter,
// and waits for them.
func (p *prober) round(ctx context.Context, jitter time.Duration) error {
	targets, err := p.s.store.ProbeTargets(ctx)
	if err != nil {
		return err
	}
	seen := make(map[uuid.UUID]bool, len(targets))
	var round sync.WaitGroup
	p.mu.Lock()
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		return p.ctx.Err()
	}
	for _, t := range targets {
		id := t.Config.ServerID
		seen[id] = true
		if p.inflight[id] {
			continue
		}
		p.inflight[id] = true
		var delay time.Duration
		if jitter > 0 {
			delay = rand.N(jitter)
		}
		p.wg.Add(1)
		round.Add(1)
		go func() {
			defer p.wg.Done()
			defer round.Done()
			defer p.done(id)
			p.probeAfter(ctx, t, delay)
		}()
	}
	for id := range p.last {
		if !seen[id] && !p.inflight[id] {
			delete(p.last, id) // no longer a probe server
		}
	}
	p.mu.Unlock()
	round.Wait()
	return nil
}

func (p *prober) done(id uuid.UUID) {
	p.mu.Lock()
	delete(p.inflight, id)
	p.mu.Unlock()
}

func (p *prober) probeAfter(ctx context.Context, t persistence.ProbeTarget, delay time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	if delay > 0 {
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return
		}
	}
	p.waiting.Add(1)
	select {
	case p.slots <- struct{}{}:
		p.waiting.Add(-1)
	case <-ctx.Done():
		p.waiting.Add(-1)
		return
	}
	defer func() { <-p.slots }()
	res := p.probe(ctx, t.Config, t.ModuleName)
	p.mu.Lock()
	p.last[t.Config.ServerID] = res
	p.mu.Unlock()
}

// probe performs one handshake with the server configured by c.
func (p *prober) probe(ctx context.Context, c persistence.ServerConfig, module string) ProbeResult {
	log := p.s.log
	cl, _, err := p.s.client(c, opProbe, p.timeout)
	if err != nil {
		log.Warn("probe not possible", "server_id", c.ServerID, "err", err)
		return ProbeResult{At: p.s.wallNow(), Reason: "The probe could not be made: " + err.Error()}
	}
	defer cl.CloseIdleConnections()
	octx, op := p.s.obs.Start(ctx, telemetry.MCPHandshake, c.TenantID, module, "")
	rep, err := cl.Handshake(octx)
	op.End(octx, err)
	if err != nil {
		res := ProbeResult{At: p.s.wallNow(), Reason: err.Error()}
		var me *mcpclient.Error
		if errors.As(err, &me) {
			res.FailureClass, res.Reason = me.Class, me.Reason
		}
		log.Debug("probe missed", "server_id", c.ServerID, "failure_class", res.FailureClass)
		return res
	}
	return ProbeResult{At: p.s.wallNow(), Reachable: true, LatencyMS: rep.LatencyMS}
}

// lastResult returns the last probe result of serverID, or nil.
func (p *prober) lastResult(serverID uuid.UUID) *ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.last[serverID]
	if !ok {
		return nil
	}
	return &r
}
