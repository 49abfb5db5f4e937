package main

import (
	"maps"
	"slices"
	"time"
)

// phaseFigures is what one phase of the heartbeat load measured.
type phaseFigures struct {
	name                                              string
	seconds                                           float64
	sent, ok, forwarded, nonHealthy, nonHealthyOnTime uint64
	rate, expected                                    float64 // 2xx answers per second; N/H (0: not a steady phase)
	p50, p99, p999, max, lagP99                       time.Duration
	errs                                              map[string]uint64
}

func (p phaseFigures) errors() uint64 {
	var n uint64
	for _, v := range p.errs {
		n += v
	}
	return n
}

// summarize takes a finished phase's figures; expected is the rate the schedule asks for (0: none).
func summarize(p *phase, expected float64) phaseFigures {
	el := p.elapsed()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := phaseFigures{name: p.name, seconds: el.Seconds(), sent: p.sent.Load(), ok: p.ok.Load(), forwarded: p.forwarded.Load(),
		nonHealthy: p.nonHealthy.Load(), nonHealthyOnTime: p.nonHealthyOnTime.Load(), expected: expected, errs: maps.Clone(p.errs)}
	if el > 0 {
		f.rate = float64(f.ok) / el.Seconds()
	}
	f.p50, f.p99, f.p999 = quantile(p.lat, 0.5), quantile(p.lat, 0.99), quantile(p.lat, 0.999)
	if len(p.lat) > 0 {
		f.max = slices.Max(p.lat)
	}
	f.lagP99 = quantile(p.lag, 0.99)
	return f
}

// cpuFigures is the CPU a phase cost.
type cpuFigures struct {
	measured      bool
	nodeSeconds   []float64 // per node, user + system
	pgMeasured    bool
	pgSeconds     float64
	pgBackends    int
	pgExited      int
	clientSeconds float64 // this program
	heartbeats    uint64  // answered 2xx in the phase
}

func (c cpuFigures) nodesSeconds() float64 {
	var s float64
	for _, v := range c.nodeSeconds {
		s += v
	}
	return s
}

// perHeartbeat is CPU milliseconds per heartbeat answered.
func (c cpuFigures) perHeartbeat(seconds float64) float64 {
	if c.heartbeats == 0 {
		return 0
	}
	return 1000 * seconds / float64(c.heartbeats)
}

// nodeFigures is one node's state after the steady phase.
type nodeFigures struct {
	name          string
	pid           int
	rssStart, rss int64 // KiB: once the cluster was ready and empty; after the steady phase
	shards, owned int
}

// killFigures is what the kill -9 of a node and its restart measured.
type killFigures struct {
	done                    bool
	victim                  string
	shards, servers         int
	ownedAgain, readyAgain  time.Duration
	ownedErr, readyErr      string
	shardsBack, serversBack int
	failover, rejoin, after phaseFigures
}

// sweepFigures is what the final GET /v1/mcp/servers?status=… sweep found.
type sweepFigures struct {
	done                         bool
	err                          string
	degraded, unhealthy, foreign int
	onTime                       int // of degraded + unhealthy: modules heartbeated on time
}

// results is everything a run measured.
type results struct {
	started            time.Time
	n, nodes, workers  int
	interval, duration time.Duration
	goVersion          string
	cpus               int
	load               [2]string

	clusterReady  time.Duration
	idlePercent   []float64 // each node's CPU while the cluster was empty, % of one core
	rssStart      []int64
	reg           registration
	inDatabase    int // servers in the database (not deregistered) after registration
	ownedAfterReg int // servers the nodes ran then, together
	regHeartbeats phaseFigures
	steady        phaseFigures
	steadyCPU     cpuFigures
	nodeFigs      []nodeFigures
	kill          killFigures
	sweep         sweepFigures
	auditCluster  int
	auditMeasured bool

	baselineDone  bool
	baselineReady time.Duration
	baselinePhase phaseFigures
	baselineCPU   cpuFigures
	baselineRSS   int64
	auditBaseline int

	notes   []string
	failure string // why the run stopped early; empty when it completed
}
