// Command clusterbench measures mcpfleet as a cluster (bench/cluster.sh runs it; `make bench-cluster`):
// three `mcpfleet serve` nodes on a private etcd and one PostgreSQL database, on loopback. It registers
// -n modules spread over the nodes, then drives their heartbeats open loop (every module once per
// -interval, spread evenly over it), each heartbeat sent to a random node (so most are forwarded to
// the owner of the server's shard), and measures, over a steady phase of -duration: heartbeats/s,
// latency p50/p99, errors, false transitions (non-healthy answers for modules heartbeating on time,
// a final sweep of GET /v1/mcp/servers and the audit log), each node's RSS and owned servers (from
// /readyz), and the CPU per heartbeat of the nodes and of their PostgreSQL backends (/proc/<pid>/stat).
// Then it kills one node with SIGKILL under load (time until every server is owned again, heartbeat
// errors meanwhile), restarts it (time until it is ready with its share), and finally stops the cluster
// and drives one single-node `mcpfleet serve` on the same database with the same load for the same
// time: the baseline its CPU per heartbeat is compared with (the cost of forwarding). It writes a
// Markdown report (-out) with every figure, the load average, and an estimate "on paper" of what more
// machines would hold and where that stops scaling.
//
// The database must be migrated and hold the tenant of -module-key and -read-key; nothing else may use it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

type config struct {
	binary, etcd                string
	databaseURL, pgURL, dbName  string
	moduleKey, readKey          string
	n, workers, regWorkers      int
	nodes                       int
	interval, duration          time.Duration
	regLimit, requestTimeout    time.Duration
	out, dir                    string
	kill, baseline              bool
	monitorInterval, writeLimit time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.binary, "binary", "bin/mcpfleet", "the mcpfleet binary the nodes run")
	fs.StringVar(&c.etcd, "etcd", "etcd", "the etcd binary (Debian's etcd-server: /usr/bin/etcd)")
	fs.StringVar(&c.databaseURL, "database-url", "", "the nodes' MCPFLEET_DATABASE_URL (the app role on the bench database)")
	fs.StringVar(&c.pgURL, "pg-url", "", "a superuser URL of the bench database: PostgreSQL backends' CPU and the audit log (empty: not measured)")
	fs.StringVar(&c.moduleKey, "module-key", "", "a module API key of the bench tenant")
	fs.StringVar(&c.readKey, "read-key", "", "an operator API key of the bench tenant (the final sweep)")
	fs.IntVar(&c.n, "n", 100_000, "modules (servers)")
	fs.IntVar(&c.nodes, "nodes", 3, "cluster nodes")
	fs.DurationVar(&c.interval, "interval", 10*time.Second, "heartbeat interval H (the nodes get it as MCPFLEET_HEARTBEAT_INTERVAL)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "steady phase, and the baseline's")
	fs.IntVar(&c.workers, "workers", 512, "heartbeat workers (one request in flight each; while a killed node's shards move, forwarded heartbeats wait seconds)")
	fs.IntVar(&c.regWorkers, "register-workers", 128, "registrations in flight (they fill the nodes' group commits)")
	fs.DurationVar(&c.regLimit, "register-limit", 30*time.Minute, "registration stops after this")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 15*time.Second, "one heartbeat's timeout (a registration's is at least 60s)")
	fs.StringVar(&c.out, "out", "bench/CLUSTER.md", "the report")
	fs.StringVar(&c.dir, "dir", ".data/clusterbench", "etcd's data and the nodes' logs (emptied first)")
	fs.BoolVar(&c.kill, "kill", true, "kill -9 a node under load and restart it")
	fs.BoolVar(&c.baseline, "baseline", true, "drive one single node with the same load afterwards")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.databaseURL == "" || c.moduleKey == "" || c.readKey == "" {
		return c, errors.New("-database-url, -module-key and -read-key are required")
	}
	if c.n < 1 || c.nodes < 2 || c.workers < 1 || c.regWorkers < 1 || c.interval < 200*time.Millisecond || c.duration <= 0 {
		return c, errors.New("-n, -workers, -register-workers must be positive, -nodes at least 2, -interval at least 200ms, -duration positive")
	}
	var err error
	if c.monitorInterval, err = envDuration("MCPFLEET_MONITOR_INTERVAL", 5*time.Second); err != nil {
		return c, err
	}
	if c.writeLimit, err = envDuration("MCPFLEET_WRITE_TIMEOUT", 5*time.Second); err != nil {
		return c, err
	}
	if c.binary, err = exec.LookPath(c.binary); err != nil {
		return c, fmt.Errorf("-binary: %w (make build)", err)
	}
	if c.etcd, err = exec.LookPath(c.etcd); err != nil {
		return c, fmt.Errorf("-etcd: %w (apt-get install etcd-server)", err)
	}
	if c.pgURL != "" {
		pc, err := pgx.ParseConfig(c.pgURL)
		if err != nil {
			return c, fmt.Errorf("-pg-url: %w", err)
		}
		c.dbName = pc.Database
	}
	return c, nil
}

// envDuration is the duration in environment variable name (the nodes read the same), or def.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	b := &bench{c: c, log: stderr, regHC: newHTTPClient(c.regWorkers, max(c.requestTimeout, time.Minute))}
	b.d = &driver{mods: make([]module, c.n), interval: c.interval, slot: min(10*time.Millisecond, c.interval/20),
		auth: "Bearer " + c.moduleKey, t0: time.Now(), hc: newHTTPClient(c.workers, c.requestTimeout)}
	b.d.setRotation(nil, nil)
	if c.pgURL != "" {
		conn, err := pgx.Connect(ctx, c.pgURL)
		if err != nil {
			return fmt.Errorf("-pg-url: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		b.pg = conn
	}
	res, err := b.run(ctx)
	if res != nil {
		if err != nil {
			res.failure = err.Error()
		}
		if werr := os.WriteFile(c.out, []byte(res.markdown()), 0o644); werr != nil {
			return errors.Join(err, werr)
		}
		b.logf("report written to %s", c.out)
	}
	return err
}

// bench is one run.
type bench struct {
	c     config
	log   io.Writer
	logMu sync.Mutex
	d     *driver
	regHC *http.Client
	pg    *pgx.Conn // superuser on the bench database; nil: PostgreSQL not measured
	res   *results
}

func (b *bench) logf(format string, a ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	fmt.Fprintf(b.log, "clusterbench %s: "+format+"\n", append([]any{time.Since(b.d.t0).Truncate(100 * time.Millisecond)}, a...)...)
}

func (b *bench) note(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	b.res.notes = append(b.res.notes, msg)
	b.logf("note: %s", msg)
}

// progress logs line() every 5 s until stop is called.
func (b *bench) progress(line func() string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				b.logf("%s", line())
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// phaseProgress is a progress line of a running phase.
func phaseProgress(ph *phase) string {
	el := ph.elapsed()
	return fmt.Sprintf("[%s %s] %.0f heartbeats/s, %d errors, %d non-healthy on time", ph.name, el.Truncate(time.Second),
		float64(ph.ok.Load())/el.Seconds(), ph.errors(), ph.nonHealthyOnTime.Load())
}

// newNode describes node name on free loopback ports, logging under the run's directory.
func (b *bench) newNode(name string, cluster bool) (*node, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &node{name: name, httpAddr: fmt.Sprintf("127.0.0.1:%d", hp), logPath: filepath.Join(b.c.dir, name+".log")}
	n.url = "http://" + n.httpAddr
	if cluster {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		n.clusterAddr = fmt.Sprintf("127.0.0.1:%d", cp)
	}
	return n, nil
}

// nodeEnv is node n's environment beyond the caller's: etcdURL empty for a single node.
func (b *bench) nodeEnv(n *node, etcdURL string) []string {
	env := []string{"MCPFLEET_DATABASE_URL=" + b.c.databaseURL, "MCPFLEET_HTTP_ADDR=" + n.httpAddr,
		"MCPFLEET_METRICS_ADDR=off", "MCPFLEET_PPROF_ADDR=", "MCPFLEET_HEARTBEAT_INTERVAL=" + b.c.interval.String(),
		"MCPFLEET_MONITOR_INTERVAL=" + b.c.monitorInterval.String(),
		"MCPFLEET_DB_MAX_CONNS=" + or(os.Getenv("MCPFLEET_DB_MAX_CONNS"), "16"),
		"MCPFLEET_LOG_LEVEL=" + or(os.Getenv("MCPFLEET_LOG_LEVEL"), "warn")}
	if etcdURL != "" {
		env = append(env, "MCPFLEET_CLUSTER_ETCD="+etcdURL, "MCPFLEET_CLUSTER_NAME=clusterbench", "MCPFLEET_CLUSTER_ADDR="+n.clusterAddr)
	}
	return env
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
