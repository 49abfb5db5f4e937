package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// freePort returns a loopback port that was free a moment ago (from the kernel's ephemeral range, so
// never one of `make cluster`'s fixed ports or bench/run.sh's).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a private single-member etcd on free loopback ports with a fresh data directory under
// dir, logging to dir/etcd.log, and returns its client URL once it answers /health.
func startEtcd(ctx context.Context, bin, dir string) (url string, stop func(), err error) {
	cp, err1 := freePort()
	pp, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return "", nil, err
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench="+peer)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return "", nil, fmt.Errorf("start etcd: %w", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); log.Close() }
	err = waitFor(ctx, 20*time.Second, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("etcd on %s did not answer /health: %w", client, err)
	}
	return client, stop, nil
}

// waitFor polls cond every 100 ms until it holds, limit passes or ctx ends.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// node is one `mcpfleet serve` process: a cluster node (etcd set) or the single-node baseline.
type node struct {
	name        string
	httpAddr    string // host:port of its HTTP API
	clusterAddr string // host:port of its cluster traffic; empty for a single node
	url         string
	logPath     string

	cmd     *exec.Cmd
	exited  chan struct{}
	started time.Time
}

// readyz is what /readyz answers (the cluster part only in cluster mode).
type readyz struct {
	Status  string `json:"status"`
	Cluster struct {
		Node         string   `json:"node"`
		Members      []string `json:"members"`
		Shards       []int    `json:"shards"`
		ServersOwned int      `json:"servers_owned"`
		Ready        bool     `json:"ready"`
	} `json:"cluster"`
}

var probe = &http.Client{Timeout: 2 * time.Second}

// readyz reads the node's /readyz (its 503 answers too); a node that does not answer gives the zero value.
func (n *node) readyz() readyz {
	var r readyz
	resp, err := probe.Get(n.url + "/readyz")
	if err != nil {
		return r
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r
}

func (n *node) pid() int { return n.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (n *node) alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// start runs `binary serve` with env (the caller's environment plus these), logging to n.logPath.
func (n *node) start(binary string, env []string) error {
	log, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.cmd, n.exited, n.started = cmd, make(chan struct{}), time.Now()
	go func() { _ = cmd.Wait(); log.Close(); close(n.exited) }()
	return nil
}

// kill9 kills the process with SIGKILL and waits for it.
func (n *node) kill9() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// terminate sends SIGTERM (a graceful leave) and waits up to limit, then kills.
func (n *node) terminate(limit time.Duration) {
	if n.cmd == nil || !n.alive() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(limit):
		n.kill9()
	}
}

// settled reports whether the nodes agree on their membership (exactly these nodes), each is ready, their
// shards partition all shardCount shards and the servers they own add up to at least servers. It returns
// what each node owns (servers, shards), and why not when it is not settled.
func settled(nodes []*node, servers int) (owned []readyz, ok bool, why string) {
	var want []string
	for _, n := range nodes {
		want = append(want, n.clusterAddr)
	}
	slices.Sort(want)
	seen := map[int]string{}
	total := 0
	var states []string
	for _, n := range nodes {
		r := n.readyz()
		owned = append(owned, r)
		states = append(states, fmt.Sprintf("%s (%s): status=%q ready=%v members=%v shards=%d servers=%d",
			n.name, n.clusterAddr, r.Status, r.Cluster.Ready, r.Cluster.Members, len(r.Cluster.Shards), r.Cluster.ServersOwned))
	}
	for i, n := range nodes {
		r := owned[i]
		if !r.Cluster.Ready || !slices.Equal(r.Cluster.Members, want) {
			return owned, false, strings.Join(states, "; ")
		}
		for _, s := range r.Cluster.Shards {
			if o, dup := seen[s]; dup {
				return owned, false, fmt.Sprintf("shard %d owned by %s and %s", s, o, n.name)
			}
			seen[s] = n.name
		}
		total += r.Cluster.ServersOwned
	}
	if len(seen) != shardCount || total < servers {
		return owned, false, fmt.Sprintf("%d shards owned, %d servers (want %d, at least %d)", len(seen), total, shardCount, servers)
	}
	return owned, true, ""
}

// ownedTotal is the servers the nodes say they own, together.
func ownedTotal(owned []readyz) int {
	t := 0
	for _, r := range owned {
		t += r.Cluster.ServersOwned
	}
	return t
}
