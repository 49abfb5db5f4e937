package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/mcpfleet/mcpfleet/cluster"
	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/httpapi"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/telemetry"
)

// ClusterConfig switches cluster mode on (docs/cluster.md). All three settings are given together or
// none is: a node with only some of them would start alone and monitor servers another node owns.
type ClusterConfig struct {
	Etcd []string // MCPFLEET_CLUSTER_ETCD: comma-separated etcd endpoints (host:port or http(s)://host:port)
	Name string   // MCPFLEET_CLUSTER_NAME: the cluster's name; nodes of one name share the shards
	Addr string   // MCPFLEET_CLUSTER_ADDR: host:port for cluster traffic, listened on and advertised to the others
}

// Enabled reports whether cluster mode is on.
func (c ClusterConfig) Enabled() bool { return len(c.Etcd) > 0 }

// clusterFromEnv reads the cluster settings into c. A partial configuration is an error naming what is
// missing, so a node never starts alone by accident.
func (c *Config) clusterFromEnv(e *config.Env) {
	c.Cluster = ClusterConfig{
		Etcd: splitList(e.String("MCPFLEET_CLUSTER_ETCD", "")),
		Name: e.String("MCPFLEET_CLUSTER_NAME", ""),
		Addr: e.String("MCPFLEET_CLUSTER_ADDR", ""),
	}
}

// validateCluster checks the cluster settings: none (single-node mode) or all three, each well formed.
func (c Config) validateCluster() []error {
	cc := c.Cluster
	set := map[string]bool{"MCPFLEET_CLUSTER_ETCD": len(cc.Etcd) > 0, "MCPFLEET_CLUSTER_NAME": cc.Name != "", "MCPFLEET_CLUSTER_ADDR": cc.Addr != ""}
	var missing []string
	for _, name := range []string{"MCPFLEET_CLUSTER_ETCD", "MCPFLEET_CLUSTER_NAME", "MCPFLEET_CLUSTER_ADDR"} {
		if !set[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 3 {
		return nil
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("cluster mode needs MCPFLEET_CLUSTER_ETCD, MCPFLEET_CLUSTER_NAME and MCPFLEET_CLUSTER_ADDR together; missing: %v (unset all three for single-node mode)", missing))
	}
	for _, ep := range cc.Etcd {
		if config.CheckAddr(ep) != nil && config.CheckHTTPURL(ep) != nil {
			errs = append(errs, fmt.Errorf("MCPFLEET_CLUSTER_ETCD: %q is not host:port or an http(s) URL", ep))
		}
	}
	if cc.Name != "" && !clusterNameRE.MatchString(cc.Name) {
		errs = append(errs, fmt.Errorf("MCPFLEET_CLUSTER_NAME=%q: want 1 to 63 letters, digits, '-' or '_'", cc.Name))
	}
	if cc.Addr != "" {
		if err := checkAdvertisedAddr(cc.Addr); err != nil {
			errs = append(errs, fmt.Errorf("MCPFLEET_CLUSTER_ADDR=%q: %w", cc.Addr, err))
		}
	}
	return errs
}

// clusterNameRE is what a cluster name may be: it becomes part of etcd keys.
var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// checkAdvertisedAddr accepts host:port where the others can reach host (not empty, not a wildcard)
// and port is a fixed number (not 0: the address is advertised before anything listens).
func checkAdvertisedAddr(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return errors.New("want a host the other nodes can reach, not a wildcard")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("want a port from 1 to 65535")
	}
	return nil
}

// joinCluster joins the cluster (cluster mode): the node takes its share of the shards, loading
// their servers into the fleet, before Start goes on, and requests for servers are routed from then on.
func (s *Service) joinCluster(ctx context.Context, cfg Config, log *slog.Logger) error {
	s.routed = &routedFleet{local: s.fleet, modules: s.store, timeout: cfg.WriteTimeout, replays: newReplays(2 * cfg.WriteTimeout)}
	node, err := cluster.Start(ctx, cluster.Config{Etcd: cfg.Cluster.Etcd, Name: cfg.Cluster.Name, Addr: cfg.Cluster.Addr, Log: log},
		s.routed.serve, func(ctx context.Context, shards []int) error {
			return s.fleet.SetOwned(ctx, shards, s.store, s.node) // each shard's epoch claimed as it is taken
		})
	if err != nil {
		return err
	}
	s.member, s.routed.node = node, node
	s.fleet.SetMembership(node.Confirmed) // no server is judged on a silence seen while the membership is unconfirmed
	if err := s.startTouching(ctx); err != nil {
		return err
	}
	return s.metrics.ObserveCluster(func() telemetry.ClusterView {
		st := node.Status()
		return telemetry.ClusterView{Members: st.Members, Shards: len(st.Owned), Servers: s.fleet.OwnedServers(), Rejoins: st.Rejoins}
	})
}

// clusterStatus is the cluster part of /readyz (nil in single-node mode).
func (s *Service) clusterStatus() func() httpapi.ClusterStatus {
	if s.member == nil {
		return nil
	}
	return func() httpapi.ClusterStatus {
		st := s.member.Status()
		return httpapi.ClusterStatus{Node: st.Self, Members: st.Members, Shards: st.Owned, ServersOwned: s.fleet.OwnedServers(), Rejoins: st.Rejoins, Ready: st.Ready}
	}
}

// Member is the cluster membership (nil in single-node mode).
func (s *Service) Member() *cluster.Node { return s.member }

// touchInterval is how often a cluster node renews its row in cluster_nodes: a third of
// persistence.NodeLease, so two missed renewals do not make the others sweep its running calls.
const touchInterval = persistence.NodeLease / 3

// startTouching records this node in cluster_nodes now and every touchInterval until Close (see
// persistence.Store.TouchNode): the gateways of the other nodes interrupt the running calls of a node
// only once it has not been seen for NodeLease.
func (s *Service) startTouching(ctx context.Context) error {
	started := time.Now()
	self := func() persistence.ClusterNode {
		return persistence.ClusterNode{Node: s.node, Addr: s.member.Status().Self, StartedAt: started,
			Shards: len(s.fleet.Owned()), Servers: s.fleet.OwnedServers()}
	}
	if err := s.store.TouchNode(ctx, self()); err != nil {
		return fmt.Errorf("cluster: record this node: %w", err)
	}
	s.touchStop, s.touchDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.touchDone)
		t := time.NewTicker(touchInterval)
		defer t.Stop()
		for {
			select {
			case <-s.touchStop:
				return
			case <-t.C:
			}
			c, cancel := context.WithTimeout(context.Background(), touchInterval)
			if err := s.store.TouchNode(c, self()); err != nil {
				s.log.Warn("could not renew this node's row in cluster_nodes", "err", err)
			}
			cancel()
		}
	}()
	return nil
}

// stopTouching ends the renewals and deletes this node's row, so the others know at once it is gone.
// It runs after the gateway stopped: no call of this node is running any more.
func (s *Service) stopTouching(ctx context.Context) error {
	if s.touchStop == nil {
		return nil
	}
	close(s.touchStop)
	<-s.touchDone
	s.touchStop = nil
	return s.store.LeaveNode(ctx, s.node)
}
