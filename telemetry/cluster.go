package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ClusterView is what a cluster node reports about itself on every collection.
type ClusterView struct {
	Members []string // the members the node sees (addresses), itself included while it is one
	Shards  int      // shards it owns
	Servers int      // servers it runs
	Rejoins int      // times it joined again after losing its membership key
}

// ObserveCluster registers the cluster gauges, read from view on every collection:
// mcpfleet.cluster.members (1 per member the node sees, labelled member: a closed set, the cluster's
// size), mcpfleet.cluster.shards.owned, mcpfleet.cluster.servers.owned and mcpfleet.cluster.rejoins.
func (m *Metrics) ObserveCluster(view func() ClusterView) error {
	if m == nil {
		return nil
	}
	members, err1 := m.meter.Int64ObservableGauge("mcpfleet.cluster.members",
		metric.WithDescription("Cluster members this node sees (1 per member, labelled member=host:port)."))
	shards, err2 := m.meter.Int64ObservableGauge("mcpfleet.cluster.shards.owned",
		metric.WithDescription("Shards this node owns."))
	servers, err3 := m.meter.Int64ObservableGauge("mcpfleet.cluster.servers.owned",
		metric.WithDescription("Servers this node runs (the servers of the shards it owns)."))
	rejoins, err4 := m.meter.Int64ObservableGauge("mcpfleet.cluster.rejoins",
		metric.WithDescription("Times this node joined the cluster again after its membership key expired in etcd."))
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return fmt.Errorf("cluster metrics: %w", err)
		}
	}
	_, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := view()
		for _, mem := range v.Members {
			o.ObserveInt64(members, 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("member", mem))))
		}
		o.ObserveInt64(shards, int64(v.Shards))
		o.ObserveInt64(servers, int64(v.Servers))
		o.ObserveInt64(rejoins, int64(v.Rejoins))
		return nil
	}, members, shards, servers, rejoins)
	if err != nil {
		return fmt.Errorf("cluster metrics: %w", err)
	}
	return nil
}
