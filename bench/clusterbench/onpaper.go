package main

import (
	"fmt"
	"math"
	"time"
)

// etcdLease is the etcd lease TTL of protoactor's provider (docs/cluster.md): a killed member's key
// lives this long.
const etcdLease = 3 * time.Second

// planUtilisation is the share of a machine's CPU the estimate plans to use: a survivor must take a
// failed node's share, and bursts need room.
const planUtilisation = 0.5

// paper is the arithmetic of the "On paper" section, from the measured figures.
type paper struct {
	cores       float64
	h           float64 // seconds
	single      float64 // node CPU ms per heartbeat, one node (the baseline); 0: not measured
	cluster     float64 // node CPU ms per heartbeat, summed over the cluster's nodes
	forwarded   float64 // share of the cluster's heartbeats forwarded
	fwdExtra    float64 // node CPU ms a forwarded heartbeat costs beyond a local one
	pg          float64 // PostgreSQL CPU ms per heartbeat (the cluster's); 0: not measured
	clusterSize int
}

func (r *results) paper() paper {
	p := paper{cores: float64(r.cpus), h: r.interval.Seconds(), clusterSize: r.nodes,
		cluster: r.steadyCPU.perHeartbeat(r.steadyCPU.nodesSeconds())}
	if r.steady.sent > 0 {
		p.forwarded = float64(r.steady.forwarded) / float64(r.steady.sent)
	}
	if r.baselineDone {
		p.single = r.baselineCPU.perHeartbeat(r.baselineCPU.nodesSeconds())
	}
	if p.single > 0 && p.forwarded > 0 {
		p.fwdExtra = max(0, (p.cluster-p.single)/p.forwarded)
	}
	if r.steadyCPU.pgMeasured {
		p.pg = r.steadyCPU.perHeartbeat(r.steadyCPU.pgSeconds)
	}
	return p
}

// nodeCost is a node's CPU ms per heartbeat in a cluster of m nodes: (m−1)/m of heartbeats reach a node
// that does not own the server. Without a baseline the measured cluster figure stands for every m.
func (p paper) nodeCost(m int) float64 {
	if p.single == 0 {
		return p.cluster
	}
	return p.single + float64(m-1)/float64(m)*p.fwdExtra
}

// servers is how many servers m node machines hold at planUtilisation, and the PostgreSQL CPU (cores) that
// many heartbeats need.
func (p paper) servers(m int) (held, pgCores float64) {
	c := p.nodeCost(m)
	if c <= 0 {
		return 0, 0
	}
	rate := float64(m) * p.cores * 1000 * planUtilisation / c
	return rate * p.h, rate * p.pg / 1000
}

// pgLimit is the heartbeats/s (and servers) one PostgreSQL machine of this size holds at planUtilisation.
func (p paper) pgLimit() (rate, held float64) {
	if p.pg <= 0 {
		return 0, 0
	}
	rate = p.cores * 1000 * planUtilisation / p.pg
	return rate, rate * p.h
}

func (pr *report) onPaper() {
	r := pr.r
	p := r.paper()
	pr.line("## On paper: N machines of this size\n")
	if smoke, _ := r.smoke(); smoke {
		pr.line("*Computed from a smoke run: the arithmetic is right, the inputs are not the benchmark's.*\n")
	}
	if p.cluster <= 0 {
		pr.line("Not computed: the steady phase's CPU was not measured.\n")
		return
	}
	pr.line("Assumptions: each node on a machine of its own with these %.0f CPUs, PostgreSQL on one more, every machine planned at", p.cores)
	pr.line("%.0f %% CPU (a survivor takes a failed node's share; bursts need room); heartbeats spread evenly over the nodes by a", 100*planUtilisation)
	pr.line("balancer that does not know the owners, so (M−1)/M of them are forwarded; H = %s.\n", r.interval)
	if p.single > 0 {
		pr.line("Measured: a node's CPU per heartbeat is %.4f ms alone (the baseline) and %.4f ms in the cluster of %d, where %.1f %% were",
			p.single, p.cluster, p.clusterSize, 100*p.forwarded)
		pr.line("forwarded: a forwarded heartbeat costs %.4f ms more (its receiving node and the owner together), so a node of an", p.fwdExtra)
		pr.line("M-node cluster spends %.4f + (M−1)/M × %.4f ms per heartbeat.", p.single, p.fwdExtra)
	} else {
		pr.line("Measured: a node's CPU per heartbeat is %.4f ms in the cluster of %d (no baseline: the same figure is used for every M).", p.cluster, p.clusterSize)
	}
	if len(r.idlePercent) > 0 && r.steady.rate > 0 {
		var idle float64
		for _, v := range r.idlePercent {
			idle += v / 100
		}
		pr.line("Part of it is fixed: the empty cluster's nodes spent %.1f %% of a core together with nothing to do, %.4f ms of", 100*idle, 1000*idle/r.steady.rate)
		pr.line("each heartbeat at this run's rate (less at a higher rate: the estimate below is conservative there).")
	}
	if p.pg > 0 {
		pr.line("PostgreSQL spends %.4f ms per heartbeat (mostly the batched heartbeat stamps: a healthy heartbeat writes nothing else).", p.pg)
	}
	pr.line("")
	pr.line("| nodes M | node CPU per heartbeat | heartbeats/s held | servers held at H | PostgreSQL CPU needed |")
	pr.line("|---|---|---|---|---|")
	for _, m := range []int{1, 2, 3, 5, 10, 20, 64} {
		held, pgc := p.servers(m)
		pgs := "not measured"
		if p.pg > 0 {
			pgs = fmt.Sprintf("%.2f cores (%.0f %% of one machine)", pgc, 100*pgc/p.cores)
		}
		pr.line("| %d | %.4f ms | %s | %s | %s |", m, p.nodeCost(m), count64(uint64(held/p.h)), count64(uint64(held)), pgs)
	}
	pr.line("")
	pr.whereItStops(p)
}

func (pr *report) whereItStops(p paper) {
	r := pr.r
	pr.line("Where it stops scaling:\n")
	if rate, held := p.pgLimit(); rate > 0 {
		m := 1
		for ; m < 64; m++ {
			if h, _ := p.servers(m); h >= held {
				break
			}
		}
		pr.line("1. **PostgreSQL's write rate** — one database for every node. At %.4f ms per heartbeat one machine of this size", p.pg)
		pr.line("   at %.0f %% takes %s heartbeats/s, %s servers at H = %s: the node machines reach that at about M = %d. Past it, more", 100*planUtilisation, count64(uint64(rate)), count64(uint64(held)), r.interval, m)
		pr.line("   nodes add nothing; a bigger database machine (or a longer stamp window, fewer stamp rows) does. Transitions,")
		regRate := float64(r.reg.registered) / max(r.reg.elapsed.Seconds(), 1e-9)
		pr.line("   registrations and the audit log go there too: registration ran at %.0f/s through the cluster, so a mass", regRate)
		pr.line("   re-registration of %s servers (every module after a platform restart) takes %.0f s.", count64(uint64(held)), held/max(regRate, 1e-9))
	} else {
		pr.line("1. **PostgreSQL's write rate**: not estimated (its CPU was not measured).")
	}
	pr.line("2. **etcd** is off the heartbeat path: each node holds one lease (TTL 3 s, kept alive about once a second) and one watch;")
	pr.line("   etcd writes only on a join or a leave. A single etcd member takes thousands of writes/s, so for tens of nodes etcd")
	pr.line("   is not the limit; the limit is what a membership change costs the nodes (next).")
	if r.kill.ownedErr == "" && r.kill.victim != "" && r.reg.registered > 0 {
		loadPart := max(0, r.kill.ownedAgain-etcdLease)
		at := func(f float64) float64 {
			return (etcdLease + time.Duration(float64(loadPart)*f/float64(r.reg.registered))).Seconds()
		}
		pr.line("3. **Membership churn**: a change moves about 1/M of the shards, but every node that gains shards loads them with a")
		pr.line("   scan of every server of every tenant (docs/cluster.md: a per-shard query is not built), so the cost of a change")
		pr.line("   grows with the fleet, not with the share. Here kill -9 → owned again took %.2f s for %s servers: %.2f s of etcd", r.kill.ownedAgain.Seconds(), count(r.reg.registered), etcdLease.Seconds())
		pr.line("   lease and %.2f s of claims and loading. Scaled linearly with the fleet: %.1f s at 1,000,000 servers, %.1f s at", loadPart.Seconds(), at(1e6), at(1e7))
		pr.line("   10,000,000 (an upper estimate: the claims, one transaction per shard, do not grow with the fleet; the smaller")
		pr.line("   the run, the more of that time they are). Where it passes the stated %s bound, and with nodes joining or failing", failoverBound)
		pr.line("   often (a rolling restart of M nodes is 2M changes), the shards in motion are judged by nobody for that long each")
		pr.line("   time. A per-shard load is the fix.")
	} else {
		pr.line("3. **Membership churn**: not estimated (the kill -9 phase did not complete).")
	}
	maxShare := 0.0
	if len(r.nodeFigs) > 0 && r.reg.registered > 0 {
		mean := float64(r.reg.registered) / float64(len(r.nodeFigs))
		for _, n := range r.nodeFigs {
			maxShare = math.Max(maxShare, float64(n.owned)/mean)
		}
	}
	pr.line("4. **%d shards**: at most %d nodes own anything, and the share is in steps of 1/%d of the fleet. Rendezvous hashing", shardCount, shardCount, shardCount)
	pr.line("   is uneven at this count: here the busiest node owned %.2f× the mean; every node must be sized for the largest share,", maxShare)
	pr.line("   and beyond ~20 nodes a node holds 1–5 shards, so one shard more or less is 20–100 %% of its load.")
	inFlight := r.steady.rate / float64(max(r.nodes, 1)) * r.steady.p99.Seconds()
	pr.line("5. **Forwarding** is bounded by 4,096 requests in flight per node's router; at the measured rate and p99 a node has")
	pr.line("   about %.0f heartbeats in flight, so the bound is not the limit before CPU is.", inFlight)
	pr.line("")
}
