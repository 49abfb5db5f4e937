package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcpfleet/mcpfleet/service"
)

// Where `demo --nodes N` (make cluster) puts its etcd and its nodes: all on loopback.
const (
	demoEtcdClient  = "127.0.0.1:23790"
	demoEtcdPeer    = "127.0.0.1:23800"
	demoClusterPort = 7101 // node i's cluster address is 127.0.0.1:7101+i
)

// startDemoEtcd starts a private single-member etcd (Debian's etcd-server: /usr/bin/etcd) with a fresh
// data directory under dir, and returns once it answers. stop kills it.
func startDemoEtcd(ctx context.Context, dir string, log io.Writer) (stop func(), err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("demo --nodes: etcd not found: install it (apt-get install etcd-server)")
	}
	data := filepath.Join(dir, "etcd")
	if err := os.RemoveAll(data); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	client, peer := "http://"+demoEtcdClient, "http://"+demoEtcdPeer
	cmd := exec.Command(bin, "--name", "demo", "--data-dir", data, "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "demo="+peer)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: Ctrl-C must reach the nodes, which leave through etcd, and not etcd first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start etcd: %w", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, fmt.Errorf("demo: etcd on %s did not answer (is the port taken?)", demoEtcdClient)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// demoNodeConfig is node i's configuration (i from 0) of a demo cluster on the etcd above: HTTP on the
// port after base's, the metrics listener only on node 0.
func demoNodeConfig(cfg service.Config, i int, httpPort int) service.Config {
	cfg.Cluster = service.ClusterConfig{Etcd: []string{"http://" + demoEtcdClient}, Name: "demo", Addr: fmt.Sprintf("127.0.0.1:%d", demoClusterPort+i)}
	if i > 0 {
		cfg.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", httpPort+i)
		cfg.MetricsAddr = ""
		cfg.PprofAddr = ""
	}
	return cfg
}
