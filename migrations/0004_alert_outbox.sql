-- Outbox of alerts (TASK-OBS-007): a row is written in the same transaction as the transition that causes it,
-- and delivered at least once by the alert dispatcher. event_id is stable across retries (receivers de-duplicate).

-- +goose Up
CREATE TABLE alert_outbox (
    event_id        UUID PRIMARY KEY,
    tenant_id       UUID NOT NULL,
    server_id       UUID,
    kind            TEXT NOT NULL,
    payload         JSONB NOT NULL,
    trace_id        CHAR(32),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at    TIMESTAMPTZ,
    last_error      TEXT
);
CREATE INDEX alert_outbox_pending ON alert_outbox (tenant_id, next_attempt_at) WHERE delivered_at IS NULL;

ALTER TABLE alert_outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_outbox FORCE ROW LEVEL SECURITY;
CREATE POLICY outbox_rls ON alert_outbox
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON alert_outbox TO cyberos_app;
GRANT UPDATE (attempts, next_attempt_at, delivered_at, last_error) ON alert_outbox TO cyberos_app;

-- +goose Down
DROP TABLE alert_outbox;
