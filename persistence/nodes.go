package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// NodeLease is how long a node counts as live after its last TouchNode: a cluster node touches its row
// well within it (every NodeLease/3 or more often). Past it the node is gone, and another node's sweep
// interrupts its running tool calls (InterruptRunning).
const NodeLease = 30 * time.Second

// ClusterNode is a row of cluster_nodes.
type ClusterNode struct {
	Node      string
	Addr      string // its cluster address (MCPFLEET_CLUSTER_ADDR), for the dashboard
	Shards    int    // the shards it owned at its last TouchNode
	Servers   int    // the servers it ran at its last TouchNode
	StartedAt time.Time
	SeenAt    time.Time // set by TouchNode (PostgreSQL's clock); ignored on the way in
}

// TouchNode records that n.Node is alive now (PostgreSQL's clock), with its address and what it owns,
// creating its row on the first call with n.StartedAt. Only cluster mode calls it; see InterruptRunning.
func (s *Store) TouchNode(ctx context.Context, n ClusterNode) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO cluster_nodes (node, started_at, seen_at, addr, shards_owned, servers_owned)
		VALUES ($1, $2, now(), $3, $4, $5)
		ON CONFLICT (node) DO UPDATE SET seen_at = now(), addr = $3, shards_owned = $4, servers_owned = $5`,
		n.Node, n.StartedAt, n.Addr, n.Shards, n.Servers)
	if err != nil {
		return fmt.Errorf("touch node: %w", translate(err))
	}
	return nil
}

// LeaveNode deletes node's row: a node leaving gracefully (its calls were finished or interrupted by its
// own gateway's Stop) is gone at once rather than after NodeLease.
func (s *Store) LeaveNode(ctx context.Context, node string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM cluster_nodes WHERE node = $1`, node); err != nil {
		return fmt.Errorf("leave node: %w", err)
	}
	return nil
}

// ClusterNodes returns the nodes seen within NodeLease, by name, and forgets (deletes) those not seen for
// ten leases.
func (s *Store) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	if _, err := s.pool.Exec(ctx, `DELETE FROM cluster_nodes WHERE seen_at < now() - 10 * $1::interval`, NodeLease); err != nil {
		return nil, fmt.Errorf("cluster nodes: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT node, started_at, seen_at, addr, shards_owned, servers_owned FROM cluster_nodes
		WHERE seen_at >= now() - $1::interval ORDER BY addr, node`, NodeLease)
	if err != nil {
		return nil, fmt.Errorf("cluster nodes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClusterNode, error) {
		var n ClusterNode
		err := r.Scan(&n.Node, &n.StartedAt, &n.SeenAt, &n.Addr, &n.Shards, &n.Servers)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster nodes: %w", err)
	}
	return out, nil
}
