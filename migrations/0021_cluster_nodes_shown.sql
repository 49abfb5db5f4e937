-- What the dashboard shows of a cluster's nodes (issue 12): each node's cluster address
-- (MCPFLEET_CLUSTER_ADDR) and the shards and servers it ran at its last renewal of its row
-- (persistence.Store.TouchNode, every 10 s). Written only by cluster nodes; single-node mode never
-- writes cluster_nodes, so its dashboard shows no nodes.

-- +goose Up
ALTER TABLE cluster_nodes
    ADD COLUMN addr          TEXT NOT NULL DEFAULT '' CHECK (length(addr) <= 300),
    ADD COLUMN shards_owned  INTEGER NOT NULL DEFAULT 0 CHECK (shards_owned BETWEEN 0 AND 64),
    ADD COLUMN servers_owned INTEGER NOT NULL DEFAULT 0 CHECK (servers_owned >= 0);
GRANT UPDATE (addr, shards_owned, servers_owned) ON cluster_nodes TO cyberos_app;

-- +goose Down
REVOKE UPDATE (addr, shards_owned, servers_owned) ON cluster_nodes FROM cyberos_app;
ALTER TABLE cluster_nodes DROP COLUMN addr, DROP COLUMN shards_owned, DROP COLUMN servers_owned;
