package ui

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/shard"
)

// nodeView is one row of the fleet page's nodes panel.
type nodeView struct {
	Name     string // the node's name (host/pid/…), as it claims shards in PostgreSQL
	Addr     string // its cluster address
	Shards   int
	Servers  int    // servers it runs (every tenant's), as of its last renewal
	LastSeen string // its last renewal of its row
}

// clusterView is what the dashboard knows of the cluster's nodes, read from PostgreSQL (so every node
// answers the same): the live nodes (cluster_nodes) and which node holds each shard's epoch
// (shard_owners). A single node never writes cluster_nodes, so there it is empty and nothing is shown.
type clusterView struct {
	nodes  []nodeView
	owners [shard.Count]string // the owner of each shard: its node's address, or why there is none
}

// clustered reports whether there is a cluster to show.
func (v *clusterView) clustered() bool { return v != nil && len(v.nodes) > 0 }

// owner returns the label of the node that owns server id ("" when not clustered).
func (v *clusterView) owner(id uuid.UUID) string {
	if !v.clustered() {
		return ""
	}
	return v.owners[shard.Of(id)]
}

// cluster reads the cluster's nodes and shard owners; nil (and the error logged) when they cannot be
// read: the panel is left out rather than failing the page.
func (u *UI) cluster(ctx context.Context) *clusterView {
	nodes, err := u.deps.Store.ClusterNodes(ctx)
	if err != nil {
		u.deps.Log.WarnContext(ctx, "dashboard: cluster nodes not read", "err", err)
		return nil
	}
	if len(nodes) == 0 {
		return &clusterView{}
	}
	owners, err := u.deps.Store.ShardOwners(ctx)
	if err != nil {
		u.deps.Log.WarnContext(ctx, "dashboard: shard owners not read", "err", err)
		return nil
	}
	v := &clusterView{}
	label := map[string]string{}
	for _, n := range nodes {
		v.nodes = append(v.nodes, nodeView{Name: n.Node, Addr: orDash(n.Addr), Shards: n.Shards, Servers: n.Servers, LastSeen: fmtTime(n.SeenAt)})
		label[n.Node] = orDash(n.Addr)
	}
	for _, o := range owners {
		if o.Shard < 0 || o.Shard >= shard.Count {
			continue
		}
		switch l, ok := label[o.Node]; {
		case o.Node == "":
			v.owners[o.Shard] = "none (between owners)"
		case ok:
			v.owners[o.Shard] = l
		default:
			v.owners[o.Shard] = fmt.Sprintf("%s (not seen within %s)", o.Node, fmtDuration(persistence.NodeLease))
		}
	}
	return v
}
