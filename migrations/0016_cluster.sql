-- Several nodes on one database (issue 12): shard ownership with fencing epochs, a registry of live nodes,
-- the node of each tool call, and a claim token on alert deliveries.
--
-- Fencing. Servers are split into 64 shards (package shard: FNV-1a of the server id, modulo 64; the CHECK
-- below must follow shard.Count). A node that takes a shard bumps its epoch (persistence.Store.ClaimShard);
-- every durable write of a server is sent with the epoch its node holds (persistence.Fence) and starts with
-- one statement that takes the shard's row FOR SHARE where the epoch still matches, and sets the
-- transaction-local flag mcpfleet.fenced to 'on' when it does not. While that flag is on, the a_fence
-- trigger below drops every row any statement would insert, update or delete, in every table of the schema,
-- so the rest of the fenced command writes nothing and the other commands of the same group commit are
-- untouched; the command's last statement turns the flag off again. The FOR SHARE lock is held to COMMIT,
-- so a claim (an UPDATE of the row) waits for every write that passed the fence under the old epoch, and a
-- write that reaches the fence after the claim committed sees the new epoch: no write of an old epoch lands
-- after the claim that ended it.
--
-- The trigger is named a_fence so that it fires before every other BEFORE ROW trigger (PostgreSQL fires
-- them in name order), e.g. the audit numbering of 0012: a dropped row takes no number. A table added by
-- a later migration must get the same trigger (persistence's TestFenceTriggerOnEveryTable checks it).
--
-- cluster_nodes: each node's last sign of life (persistence.Store.TouchNode); a node not seen for a lease
-- is gone, and only a gone node's running tool calls are interrupted by another node's sweep (mcp_calls.node).
-- alert_outbox.claim_token: a deliverer claims one row at a time by pushing next_attempt_at past the time
-- its delivery can take and writing a fresh token; its outcome is recorded only while the token is its own.

-- +goose Up
CREATE TABLE shard_owners (
    shard      INTEGER PRIMARY KEY CHECK (shard >= 0 AND shard < 64),
    node       TEXT NOT NULL DEFAULT '' CHECK (length(node) <= 200),
    epoch      BIGINT NOT NULL DEFAULT 0,
    claimed_at TIMESTAMPTZ
);
INSERT INTO shard_owners (shard) SELECT generate_series(0, 63);
GRANT SELECT ON shard_owners TO cyberos_app;
GRANT UPDATE (node, epoch, claimed_at) ON shard_owners TO cyberos_app;

CREATE TABLE cluster_nodes (
    node       TEXT PRIMARY KEY CHECK (length(node) BETWEEN 1 AND 200),
    started_at TIMESTAMPTZ NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL
);
GRANT SELECT, INSERT, DELETE ON cluster_nodes TO cyberos_app;
GRANT UPDATE (seen_at) ON cluster_nodes TO cyberos_app;

ALTER TABLE mcp_calls ADD COLUMN node TEXT CHECK (length(node) <= 200);
GRANT UPDATE (node) ON mcp_calls TO cyberos_app;

ALTER TABLE alert_outbox ADD COLUMN claim_token UUID;
GRANT UPDATE (claim_token) ON alert_outbox TO cyberos_app;

-- +goose StatementBegin
CREATE FUNCTION fence_drop_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    t TEXT;
BEGIN
    FOR t IN SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
          AND c.relname NOT IN ('shard_owners', 'cluster_nodes', 'goose_db_version')
    LOOP
        EXECUTE format('CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON %I FOR EACH ROW
            WHEN (current_setting(''mcpfleet.fenced'', true) = ''on'') EXECUTE FUNCTION fence_drop_row()', t);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    t TEXT;
BEGIN
    FOR t IN SELECT c.relname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE g.tgname = 'a_fence'
    LOOP
        EXECUTE format('DROP TRIGGER a_fence ON %I', t);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION fence_drop_row();
ALTER TABLE alert_outbox DROP COLUMN claim_token;
ALTER TABLE mcp_calls DROP COLUMN node;
DROP TABLE cluster_nodes;
DROP TABLE shard_owners;
