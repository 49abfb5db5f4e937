package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// failoverBound is the bound docs/cluster.md states from kill -9 of a node to all its shards owned again.
const failoverBound = 15 * time.Second

// Full-run settings: a run with less is marked a smoke run at the top of its report.
const (
	fullN        = 100_000
	fullDuration = 60 * time.Second
)

// report builds the Markdown report.
type report struct {
	r  *results
	sb strings.Builder
}

func (p *report) line(format string, a ...any) { fmt.Fprintf(&p.sb, format+"\n", a...) }

// row adds a figure: | phase | figure | value | unit |.
func (p *report) row(phase, figure, value, unit string) {
	p.line("| %s | %s | %s | %s |", phase, figure, value, unit)
}

// markdown renders the report.
func (r *results) markdown() string {
	p := &report{r: r}
	p.header()
	p.targets()
	p.shortfalls()
	p.figures()
	p.nodes()
	p.errorsByKind()
	p.howToRead()
	p.onPaper()
	if len(r.notes) > 0 {
		p.line("\n## Notes\n")
		for _, n := range r.notes {
			p.line("- %s", n)
		}
	}
	return p.sb.String()
}

// smoke reports whether the run is smaller than the benchmark, and how.
func (r *results) smoke() (bool, string) {
	var why []string
	if r.n < fullN {
		why = append(why, fmt.Sprintf("N = %s < %s", count(r.n), count(fullN)))
	}
	if r.duration < fullDuration {
		why = append(why, fmt.Sprintf("steady phase %s < %s", r.duration, fullDuration))
	}
	if !r.kill.done {
		why = append(why, "no completed kill -9 and restart")
	}
	if !r.baselineDone {
		why = append(why, "no single-node baseline")
	}
	return len(why) > 0, strings.Join(why, ", ")
}

// loaded reports whether the machine's 1-minute load average was above its CPU count at the start or end.
func (r *results) loaded() bool {
	for _, l := range r.load {
		f := strings.Fields(l)
		if len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil && v > float64(r.cpus) {
				return true
			}
		}
	}
	return false
}

func (p *report) header() {
	r := p.r
	p.line("# mcpfleet cluster benchmark")
	p.line("")
	if r.failure != "" {
		p.line("> **THE RUN STOPPED EARLY**: %s. What it measured until then is below; the rest is missing.", r.failure)
		p.line("")
	}
	if smoke, why := r.smoke(); smoke {
		p.line("> **SMOKE RUN — not the benchmark** (%s). It shows that `make bench-cluster` works end to end; its figures", why)
		p.line("> say nothing about capacity. The benchmark is `make bench-cluster` with its defaults on a quiet machine.")
		p.line("")
	}
	p.line("Run started %s by `bench/clusterbench` (`make bench-cluster`): %d `mcpfleet serve` nodes in cluster mode on a private", r.started.Format(time.RFC3339), r.nodes)
	p.line("etcd and one PostgreSQL database, all on loopback; N = %s modules, H = %s, steady phase %s, %d heartbeat workers,", count(r.n), r.interval, r.duration, r.workers)
	p.line("each heartbeat sent to a random node in rotation. %s, %d CPUs; the load generator, the nodes, etcd and PostgreSQL share them.", r.goVersion, r.cpus)
	p.line("")
	p.line("The machine's load average (1, 5, 15 min) was %s at the start and %s at the end.", r.load[0], r.load[1])
	if r.loaded() {
		p.line("**It was loaded by other work (load above its %d CPUs): every figure is indicative, an upper bound on latency and CPU.**", r.cpus)
	}
	p.line("")
}

// falseTransitions is every sign of a false transition the run saw.
func (r *results) falseTransitions() (answers uint64, swept int) {
	for _, f := range []phaseFigures{r.regHeartbeats, r.steady, r.kill.failover, r.kill.rejoin, r.kill.after} {
		answers += f.nonHealthyOnTime
	}
	return answers, r.sweep.onTime
}

// lagging reports whether the load generator fell behind its schedule in a measured phase (p99 lag above
// H/10): modules then heartbeat late, and a transition of theirs is no false alarm.
func (r *results) lagging() bool {
	for _, f := range []phaseFigures{r.steady, r.kill.after} {
		if f.lagP99 > r.interval/10 {
			return true
		}
	}
	return false
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**NOT met**"
}

func (p *report) targets() {
	r := p.r
	p.line("## Targets\n")
	p.line("| target | threshold | measured | result |")
	p.line("|---|---|---|---|")
	p.line("| modules registered | %s | %s | %s |", count(r.n), count(r.reg.registered), verdict(r.reg.registered == r.n))
	exp := r.steady.expected
	p.line("| steady heartbeat rate | ≥ 99 %% of N/H = %.0f/s | %.1f/s | %s |", exp, r.steady.rate, verdict(exp > 0 && r.steady.rate >= 0.99*exp))
	p.line("| steady heartbeat p99 latency | < 50 ms (the single node's target) | %s ms | %s |", msf(r.steady.p99), verdict(r.steady.ok > 0 && r.steady.p99 < 50*time.Millisecond))
	p.line("| steady heartbeat errors | 0 | %d | %s |", r.steady.errors(), verdict(r.steady.errors() == 0))
	answers, swept := r.falseTransitions()
	audit := "not read"
	if r.auditMeasured {
		audit = strconv.Itoa(r.auditCluster)
	}
	ft := fmt.Sprintf("%d non-healthy answers on time, %d on-time servers swept non-healthy; %s degraded/unhealthy audit events", answers, swept, audit)
	// The audit log cannot tell a late module from an on-time one: it counts only while the client kept up.
	auditOK := !r.auditMeasured || r.auditCluster == 0 || r.lagging()
	p.line("| false transitions (cluster phases) | 0 | %s | %s |", ft, verdict(answers == 0 && r.sweep.done && swept == 0 && auditOK))
	k := r.kill
	if k.victim == "" {
		p.line("| kill -9: every server owned again | ≤ %s | not run | not measured |", failoverBound)
		p.line("")
		return
	}
	p.line("| kill -9 of %s: every server owned again | ≤ %s (stated bound) | %s | %s |", k.victim, failoverBound, secs(k.ownedAgain, k.ownedErr), verdict(k.ownedErr == "" && k.ownedAgain <= failoverBound))
	p.line("| heartbeat errors from the kill until owned again | 0 | %d of %s | %s |", k.failover.errors(), count64(k.failover.sent), verdict(k.failover.errors() == 0))
	if k.ownedErr == "" {
		p.line("| restarted %s ready with its share | ≤ %s | %s | %s |", k.victim, failoverBound, secs(k.readyAgain, k.readyErr), verdict(k.done && k.readyAgain <= failoverBound))
		p.line("| heartbeat errors during the restart and after it (3H + M) | 0 | %d | %s |", k.rejoin.errors()+k.after.errors(), verdict(k.rejoin.errors()+k.after.errors() == 0))
	}
	p.line("")
}

// shortfalls lists what the run did not meet, and the run's own caveats, in words.
func (p *report) shortfalls() {
	r := p.r
	var out []string
	if r.reg.registered < r.n {
		out = append(out, fmt.Sprintf("only %s of %s modules registered within the run's limit", count(r.reg.registered), count(r.n)))
	}
	if extra := r.inDatabase - r.reg.registered; extra > 0 {
		out = append(out, fmt.Sprintf("%s servers exist whose every registration attempt was answered 503 (docs/cluster.md: \"503 unavailable with nothing "+
			"recorded\"): the owner committed after the forward had given up", count(extra)))
	}
	if idle := r.inDatabase - r.ownedAfterReg; idle > 0 && r.ownedAfterReg > 0 {
		out = append(out, fmt.Sprintf("%s servers in the database were run by no node after registration (the nodes' servers_owned add up to %s of %s): "+
			"a server nobody runs is monitored by nobody until a topology change loads its shard again", count(idle), count(r.ownedAfterReg), count(r.inDatabase)))
	}
	if n := sum(r.reg.errs); n > 0 {
		out = append(out, fmt.Sprintf("%d registration attempts refused after 4 tries (%d later rounds of trying again)", n, r.reg.laterRounds))
	}
	if again := r.reg.registered - r.reg.created; again > 0 {
		out = append(out, fmt.Sprintf("%s registrations of modules new to this fresh database were answered 200 (registered again), not 201: "+
			"an earlier attempt of the module was answered 503 (its forward got no answer within cluster.ForwardTimeout, 3 s, or its "+
			"write did not start before its deadline) but committed at the owner all the same, and the module's next attempt found "+
			"the server it had created (a forward with no answer is not sent again to the same owner)", count(again)))
	}
	if r.steady.expected > 0 && r.steady.rate < 0.99*r.steady.expected {
		out = append(out, fmt.Sprintf("the steady rate was %.1f/s of %.1f/s", r.steady.rate, r.steady.expected))
	}
	if r.steady.p99 >= 50*time.Millisecond {
		out = append(out, fmt.Sprintf("steady p99 %s ms (≥ 50 ms); the single node's in the same run: %s ms", msf(r.steady.p99), msf(r.baselinePhase.p99)))
	}
	if n := r.steady.errors(); n > 0 {
		out = append(out, fmt.Sprintf("%d steady heartbeat errors", n))
	}
	if a, s := r.falseTransitions(); a > 0 || s > 0 {
		out = append(out, fmt.Sprintf("false transitions: %d non-healthy answers to modules on time, %d on-time servers swept non-healthy", a, s))
	}
	if r.lagging() {
		out = append(out, fmt.Sprintf("the load generator fell behind its schedule (p99 lag %s ms steady, %s ms after the restart, above H/10): "+
			"modules then heartbeat late, so the rate is low and the %d degraded/unhealthy audit events may be true ones; the machine "+
			"could not run this load", msf(r.steady.lagP99), msf(r.kill.after.lagP99), r.auditCluster))
	} else if r.auditCluster > 0 {
		out = append(out, fmt.Sprintf("%d degraded/unhealthy audit events while every module heartbeated on schedule", r.auditCluster))
	}
	k := r.kill
	if k.victim != "" && (k.ownedErr != "" || k.ownedAgain > failoverBound) {
		out = append(out, "after kill -9 the servers were not owned again within the stated bound: "+secs(k.ownedAgain, k.ownedErr))
	}
	if n := k.failover.errors() + k.rejoin.errors() + k.after.errors(); n > 0 {
		out = append(out, fmt.Sprintf("%d heartbeat errors across the kill -9 and the restart", n))
	}
	if k.ownedErr == "" && k.victim != "" && (!k.done || k.readyAgain > failoverBound) {
		out = append(out, "the restarted node was not ready with its share within the bound: "+secs(k.readyAgain, k.readyErr))
	}
	pp := r.paper()
	if pp.single > 0 {
		ratio := pp.cluster / pp.single
		one, _ := pp.servers(1)
		m := 2
		for ; m <= shardCount; m++ {
			if h, _ := pp.servers(m); h > one {
				break
			}
		}
		even := fmt.Sprintf("so by the arithmetic below M nodes hold more than one single node only from M = %d", m)
		if m > shardCount {
			even = "so by the arithmetic below no cluster of up to 64 nodes holds more than one single node"
		}
		out = append(out, fmt.Sprintf("the cluster's nodes spend %.2f× the single node's CPU per heartbeat (forwarding, and %d nodes' fixed costs), %s", ratio, r.nodes, even))
	}
	p.line("## What fell short\n")
	if len(out) == 0 {
		p.line("Nothing measured here.")
	}
	for _, o := range out {
		p.line("- %s.", o)
	}
	p.line("")
}

func secs(d time.Duration, err string) string {
	if err != "" {
		return "not reached: " + err
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func (p *report) figures() {
	r := p.r
	p.line("## Figures\n")
	p.line("| phase | figure | value | unit |")
	p.line("|---|---|---|---|")
	p.row("start", fmt.Sprintf("%d empty nodes started until all agree and own the %d shards", r.nodes, shardCount), fmt.Sprintf("%.2f", r.clusterReady.Seconds()), "s")
	if len(r.idlePercent) > 0 {
		var per []string
		for _, v := range r.idlePercent {
			per = append(per, fmt.Sprintf("%.1f", v))
		}
		p.row("start", fmt.Sprintf("nodes' CPU while the cluster is empty (%s, each)", idleWindow), strings.Join(per, " / "), "% of one core")
	}
	p.row("registration", "modules registered (answered 201 new / 200 again)", fmt.Sprintf("%s (%s / %s)", count(r.reg.registered), count(r.reg.created), count(r.reg.registered-r.reg.created)), "servers")
	p.row("registration", "duration", fmt.Sprintf("%.1f", r.reg.elapsed.Seconds()), "s")
	p.row("registration", "rate, through every node", fmt.Sprintf("%.1f", float64(r.reg.registered)/max(r.reg.elapsed.Seconds(), 1e-9)), "registrations/s")
	lat := slices.Clone(r.reg.lat)
	p.row("registration", "latency p50 / p99", msf(quantile(lat, 0.5))+" / "+msf(quantile(lat, 0.99)), "ms")
	p.row("registration", "modules refused after 4 tries (then tried again later) / attempts repeated", fmt.Sprintf("%d / %d", sum(r.reg.errs), r.reg.retries), "requests")
	p.row("registration", "servers then in the database / run by the nodes", count(r.inDatabase)+" / "+count(r.ownedAfterReg), "servers")
	p.row("registration", "heartbeats meanwhile: answered / errors", fmt.Sprintf("%s / %d", count64(r.regHeartbeats.ok), r.regHeartbeats.errors()), "heartbeats")
	p.phaseRows("steady", r.steady, true)
	if r.steady.sent > 0 {
		p.row("steady", "sent to a node that does not own the server (forwarded)", fmt.Sprintf("%.1f", 100*float64(r.steady.forwarded)/float64(r.steady.sent)), "% of heartbeats")
	}
	p.cpuRows("steady", r.steadyCPU, r.steady.seconds)
	p.killRows()
	p.row("sweep", "final sweep (cluster): this run's servers degraded / unhealthy", sweepValue(r.sweep), "servers")
	p.row("sweep", "of those, modules heartbeated on time (false transitions)", strconv.Itoa(r.sweep.onTime), "servers")
	p.row("sweep", "final sweep: other tenants' or runs' non-healthy servers", strconv.Itoa(r.sweep.foreign), "servers")
	if r.auditMeasured {
		p.row("audit", "degraded / unhealthy transitions recorded, cluster phases", strconv.Itoa(r.auditCluster), "events")
	}
	if r.baselineDone {
		p.row("baseline", fmt.Sprintf("single node started on the same database until ready with %s servers", count(r.reg.registered)), fmt.Sprintf("%.2f", r.baselineReady.Seconds()), "s")
		p.phaseRows("baseline", r.baselinePhase, true)
		p.cpuRows("baseline", r.baselineCPU, r.baselinePhase.seconds)
		p.row("baseline", "single node RSS after its steady phase", count64(uint64(r.baselineRSS)), "KiB")
		p.row("baseline", "degraded / unhealthy transitions recorded during it", strconv.Itoa(r.auditBaseline), "events")
		p.compareRows()
	}
	p.line("")
}

func sweepValue(s sweepFigures) string {
	if !s.done {
		return "not done: " + s.err
	}
	return fmt.Sprintf("%d / %d", s.degraded, s.unhealthy)
}

func (p *report) phaseRows(name string, f phaseFigures, steady bool) {
	p.row(name, "duration", fmt.Sprintf("%.1f", f.seconds), "s")
	p.row(name, "heartbeats sent / answered 200", count64(f.sent)+" / "+count64(f.ok), "heartbeats")
	if steady {
		p.row(name, "heartbeat rate achieved / expected (N/H)", fmt.Sprintf("%.1f / %.1f", f.rate, f.expected), "heartbeats/s")
	}
	p.row(name, "latency p50 / p99 / p99.9 / max", strings.Join([]string{msf(f.p50), msf(f.p99), msf(f.p999), msf(f.max)}, " / "), "ms")
	p.row(name, "errors", strconv.FormatUint(f.errors(), 10), "requests")
	p.row(name, "non-healthy answers: module on time (false transitions) / all", fmt.Sprintf("%d / %d", f.nonHealthyOnTime, f.nonHealthy), "answers")
	if steady {
		p.row(name, "client schedule lag p99 (sent − due)", msf(f.lagP99), "ms")
	}
}

func (p *report) cpuRows(name string, c cpuFigures, seconds float64) {
	if !c.measured || seconds <= 0 {
		p.row(name, "CPU", "not measured", "")
		return
	}
	var per []string
	for _, s := range c.nodeSeconds {
		per = append(per, fmt.Sprintf("%.1f", 100*s/seconds))
	}
	p.row(name, "nodes' CPU (each)", strings.Join(per, " / "), "% of one core")
	p.row(name, "nodes' CPU per heartbeat", fmt.Sprintf("%.4f", c.perHeartbeat(c.nodesSeconds())), "CPU ms/heartbeat")
	if c.pgMeasured {
		p.row(name, fmt.Sprintf("PostgreSQL backends' CPU (%d backends, %d exited)", c.pgBackends, c.pgExited), fmt.Sprintf("%.1f", 100*c.pgSeconds/seconds), "% of one core")
		p.row(name, "PostgreSQL CPU per heartbeat", fmt.Sprintf("%.4f", c.perHeartbeat(c.pgSeconds)), "CPU ms/heartbeat")
		p.row(name, "total (nodes + PostgreSQL) CPU per heartbeat", fmt.Sprintf("%.4f", c.perHeartbeat(c.nodesSeconds()+c.pgSeconds)), "CPU ms/heartbeat")
	}
	p.row(name, "load generator's CPU", fmt.Sprintf("%.1f", 100*c.clientSeconds/seconds), "% of one core")
}

func (p *report) compareRows() {
	r := p.r
	cn, sn := r.steadyCPU.perHeartbeat(r.steadyCPU.nodesSeconds()), r.baselineCPU.perHeartbeat(r.baselineCPU.nodesSeconds())
	if sn > 0 && cn > 0 {
		p.row("cluster ÷ single", "nodes' CPU per heartbeat (the cost of forwarding)", fmt.Sprintf("%.2f", cn/sn), "×")
	}
	if r.steadyCPU.pgMeasured && r.baselineCPU.pgMeasured {
		ct := r.steadyCPU.perHeartbeat(r.steadyCPU.nodesSeconds() + r.steadyCPU.pgSeconds)
		st := r.baselineCPU.perHeartbeat(r.baselineCPU.nodesSeconds() + r.baselineCPU.pgSeconds)
		cp, sp := r.steadyCPU.perHeartbeat(r.steadyCPU.pgSeconds), r.baselineCPU.perHeartbeat(r.baselineCPU.pgSeconds)
		if st > 0 && sp > 0 {
			p.row("cluster ÷ single", "PostgreSQL CPU per heartbeat", fmt.Sprintf("%.2f", cp/sp), "×")
			p.row("cluster ÷ single", "total CPU per heartbeat", fmt.Sprintf("%.2f", ct/st), "×")
		}
	}
	if r.baselinePhase.p99 > 0 {
		p.row("cluster ÷ single", "heartbeat latency p50 / p99", fmt.Sprintf("%.2f / %.2f", ratio(r.steady.p50, r.baselinePhase.p50), ratio(r.steady.p99, r.baselinePhase.p99)), "×")
	}
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func (p *report) killRows() {
	k := p.r.kill
	if k.victim == "" {
		return
	}
	p.row("kill -9", fmt.Sprintf("node killed: %s, owning", k.victim), fmt.Sprintf("%d shards, %s servers", k.shards, count(k.servers)), "")
	p.row("kill -9", "until the survivors own every server (their /readyz: members, shards, servers_owned)", secs(k.ownedAgain, k.ownedErr), "")
	p.row("kill -9", "heartbeats sent / errors meanwhile", fmt.Sprintf("%s / %d", count64(k.failover.sent), k.failover.errors()), "heartbeats")
	p.row("kill -9", "latency p50 / p99 / max meanwhile", msf(k.failover.p50)+" / "+msf(k.failover.p99)+" / "+msf(k.failover.max), "ms")
	p.row("kill -9", "client schedule lag p99 meanwhile (workers waiting on forwards to the dead owner)", msf(k.failover.lagP99), "ms")
	if k.ownedErr != "" {
		return
	}
	p.row("restart", "from the process's start until it is ready with its share and every node agrees", secs(k.readyAgain, k.readyErr), "")
	if k.done {
		p.row("restart", "its share then", fmt.Sprintf("%d shards, %s servers", k.shardsBack, count(k.serversBack)), "")
	}
	p.row("restart", "heartbeats sent / errors meanwhile (it is in rotation once ready)", fmt.Sprintf("%s / %d", count64(k.rejoin.sent), k.rejoin.errors()), "heartbeats")
	p.row("restart", "latency p50 / p99 / max meanwhile", msf(k.rejoin.p50)+" / "+msf(k.rejoin.p99)+" / "+msf(k.rejoin.max), "ms")
	p.row("after", fmt.Sprintf("%.0f s of load after the restart: heartbeats answered / errors", k.after.seconds), fmt.Sprintf("%s / %d", count64(k.after.ok), k.after.errors()), "heartbeats")
	p.row("after", "non-healthy answers, module on time", strconv.FormatUint(k.after.nonHealthyOnTime, 10), "answers")
}

func (p *report) nodes() {
	r := p.r
	if len(r.nodeFigs) == 0 {
		return
	}
	p.line("## Nodes after the steady phase\n")
	p.line("| node | pid | shards | servers owned | RSS when ready, empty | RSS after the steady phase | RSS growth per owned server | CPU in the steady phase |")
	p.line("|---|---|---|---|---|---|---|---|")
	for i, n := range r.nodeFigs {
		growth, cpu := "—", "—"
		if n.owned > 0 {
			growth = fmt.Sprintf("%.2f KiB", float64(n.rss-n.rssStart)/float64(n.owned))
		}
		if i < len(r.steadyCPU.nodeSeconds) && r.steady.seconds > 0 {
			cpu = fmt.Sprintf("%.1f %% of one core", 100*r.steadyCPU.nodeSeconds[i]/r.steady.seconds)
		}
		p.line("| %s | %d | %d | %s | %s KiB | %s KiB | %s | %s |", n.name, n.pid, n.shards, count(n.owned), count64(uint64(n.rssStart)), count64(uint64(n.rss)), growth, cpu)
	}
	p.line("")
}

func (p *report) errorsByKind() {
	r := p.r
	p.line("## Errors by kind\n")
	found := false
	for _, f := range []phaseFigures{r.regHeartbeats, r.steady, r.kill.failover, r.kill.rejoin, r.kill.after, r.baselinePhase} {
		if len(f.errs) == 0 {
			continue
		}
		found = true
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(f.errs)) {
			parts = append(parts, fmt.Sprintf("%s × %d", k, f.errs[k]))
		}
		p.line("- %s (heartbeats): %s", f.name, strings.Join(parts, ", "))
	}
	if len(r.reg.errs) > 0 {
		found = true
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.reg.errs)) {
			parts = append(parts, fmt.Sprintf("%s × %d", k, r.reg.errs[k]))
		}
		p.line("- registration: %s", strings.Join(parts, ", "))
	}
	if !found {
		p.line("None.")
	}
	p.line("")
}

func (p *report) howToRead() {
	p.line("## How to read it\n")
	p.line("- Latency is measured by the load generator from sending a heartbeat to reading its whole answer, for 200 answers; it")
	p.line("  includes the client's own queueing on the machine it shares with the nodes. The schedule is open loop: module i")
	p.line("  is due every H at its own phase i·H/N, whatever the previous answer; the schedule lag says how late the client sent.")
	p.line("- A false transition is a heartbeat answered with a status other than healthy for a module whose previous 200 had been")
	p.line("  sent less than 2H before; a server of this run that the final `GET /v1/mcp/servers?status=degraded|unhealthy` sweep")
	p.line("  lists; or a degraded/unhealthy event in the audit log (the database is this run's alone, every module heartbeats).")
	p.line("- CPU is utime + stime from /proc/<pid>/stat of each node, and of every PostgreSQL backend of the database")
	p.line("  (pg_stat_activity), over the phase, divided by the heartbeats answered 200 in it. The baseline is one single-node")
	p.line("  `mcpfleet serve` on the same database after the cluster stopped, driven by the same schedule for the same time,")
	p.line("  so the ratio is the cost of a cluster node receiving a heartbeat for another node's server and forwarding it.")
	p.line("- kill -9: the node owning the most servers leaves the balancer's rotation as it is killed (in-flight requests to")
	p.line("  it fail); the time runs until the survivors' /readyz agree on the members, partition the %d shards and own every", shardCount)
	p.line("  server. The restart runs the same command on the same addresses; it joins the rotation once every node agrees again.")
	p.line("")
}

func count(n int) string { return count64(uint64(max(n, 0))) }

// count64 writes n with thousands separators.
func count64(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func msf(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64)
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
