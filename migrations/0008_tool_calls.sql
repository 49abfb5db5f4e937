-- The tool-call gateway (issue 4): calls an administrator makes through the service to a remote MCP server's
-- tools, the run events that record them, the per-run call budget and the tenant's settings.
--
-- mcp_calls holds one row per accepted call. A remote call is a non-idempotent write: a row is never sent
-- twice. Its state only moves forward (a trigger refuses anything else):
--   awaiting_approval -> running | denied | failed (approval expired, or a precondition no longer held)
--                        | cancelled
--   running           -> running (started_at stamped) | succeeded | failed | cancelled
-- and the terminal states (succeeded, failed, denied, cancelled) never change again. A row found running when
-- the service starts is marked failed with outcome_class 'interrupted' and is never re-sent. A client retry
-- that carries the same Idempotency-Key finds its row through UNIQUE (tenant_id, run_id, idempotency_key)
-- instead of making a second call.
--
-- mcp_run_budgets counts the calls each run was allowed (one row per run, incremented under its row lock in
-- the transaction that inserts the call), so concurrent calls of one run cannot exceed the budget.
-- tenant_settings.max_calls_per_run overrides the service's default budget for one tenant.
--
-- mcp_run_events is append-only, like audit_events: the app role may INSERT and SELECT only. event_id orders
-- one tenant's events (it is an identity: a rolled-back insert leaves a gap).
--
-- Every table has RLS forced on auth.tenant_id. The foreign keys do not see RLS, so a trigger (running as
-- the caller, under RLS) refuses a call for a server the caller's tenant cannot see.

-- +goose Up
CREATE TABLE tenant_settings (
    tenant_id         UUID PRIMARY KEY REFERENCES tenants (tenant_id),
    max_calls_per_run INTEGER CHECK (max_calls_per_run BETWEEN 1 AND 1000),
    updated_at        TIMESTAMPTZ NOT NULL
);
ALTER TABLE tenant_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_settings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_settings_rls ON tenant_settings
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON tenant_settings TO cyberos_app;
GRANT UPDATE (max_calls_per_run, updated_at) ON tenant_settings TO cyberos_app;

CREATE TABLE mcp_calls (
    call_id             UUID PRIMARY KEY,
    tenant_id           UUID NOT NULL,
    run_id              TEXT NOT NULL CHECK (length(run_id) BETWEEN 1 AND 128),
    server_id           UUID NOT NULL REFERENCES mcp_servers (server_id),
    skill_id            UUID REFERENCES skill_registry (skill_id),
    tool                TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
    arguments           JSONB NOT NULL,
    idempotency_key     TEXT CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    state               TEXT NOT NULL
                        CHECK (state IN ('awaiting_approval','running','succeeded','failed','denied','cancelled')),
    outcome_class       TEXT,
    reason              TEXT,
    result_content      TEXT,
    result_is_error     BOOLEAN,
    result_dropped      JSONB,
    result_truncated    BOOLEAN NOT NULL DEFAULT false,
    latency_ms          BIGINT,
    requested_by        UUID NOT NULL,
    decided_by          UUID,
    created_at          TIMESTAMPTZ NOT NULL,
    approval_expires_at TIMESTAMPTZ,
    decided_at          TIMESTAMPTZ,
    started_at          TIMESTAMPTZ,
    finished_at         TIMESTAMPTZ,
    UNIQUE (tenant_id, run_id, idempotency_key)
);
CREATE INDEX mcp_calls_run ON mcp_calls (tenant_id, run_id, created_at);
CREATE INDEX mcp_calls_recent ON mcp_calls (tenant_id, created_at DESC, call_id);
CREATE INDEX mcp_calls_parked ON mcp_calls (tenant_id, approval_expires_at) WHERE state = 'awaiting_approval';
CREATE INDEX mcp_calls_running ON mcp_calls (tenant_id) WHERE state = 'running';

ALTER TABLE mcp_calls ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_calls FORCE ROW LEVEL SECURITY;
CREATE POLICY mcp_calls_rls ON mcp_calls
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON mcp_calls TO cyberos_app;
GRANT UPDATE (state, outcome_class, reason, result_content, result_is_error, result_dropped, result_truncated,
              latency_ms, decided_by, decided_at, started_at, finished_at) ON mcp_calls TO cyberos_app;

-- +goose StatementBegin
CREATE FUNCTION mcp_calls_tenant_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mcp_servers m WHERE m.server_id = NEW.server_id AND m.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'mcp_calls: no server % in tenant %', NEW.server_id, NEW.tenant_id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER mcp_calls_tenant BEFORE INSERT ON mcp_calls
    FOR EACH ROW EXECUTE FUNCTION mcp_calls_tenant_check();

-- +goose StatementBegin
CREATE FUNCTION mcp_calls_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state = 'awaiting_approval' AND NEW.state IN ('running','denied','failed','cancelled'))
         OR (OLD.state = 'running' AND NEW.state IN ('running','succeeded','failed','cancelled'))) THEN
        RAISE EXCEPTION 'mcp_calls: call % cannot go from % to %', OLD.call_id, OLD.state, NEW.state
            USING ERRCODE = '23514';
    END IF;
    IF OLD.started_at IS NOT NULL AND NEW.started_at IS DISTINCT FROM OLD.started_at THEN
        RAISE EXCEPTION 'mcp_calls: call % was already started', OLD.call_id USING ERRCODE = '23514';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER mcp_calls_forward BEFORE UPDATE ON mcp_calls
    FOR EACH ROW EXECUTE FUNCTION mcp_calls_forward_only();

CREATE TABLE mcp_run_budgets (
    tenant_id  UUID NOT NULL,
    run_id     TEXT NOT NULL CHECK (length(run_id) BETWEEN 1 AND 128),
    calls_used INTEGER NOT NULL CHECK (calls_used >= 0),
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, run_id)
);
ALTER TABLE mcp_run_budgets ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_run_budgets FORCE ROW LEVEL SECURITY;
CREATE POLICY mcp_run_budgets_rls ON mcp_run_budgets
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON mcp_run_budgets TO cyberos_app;
GRANT UPDATE (calls_used, updated_at) ON mcp_run_budgets TO cyberos_app;

CREATE TABLE mcp_run_events (
    event_id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     UUID NOT NULL,
    run_id        TEXT NOT NULL CHECK (length(run_id) BETWEEN 1 AND 128),
    kind          TEXT NOT NULL CHECK (kind IN ('call.requested','call.awaiting_approval','call.started',
                                               'call.succeeded','call.failed','call.cancelled','call.refused')),
    call_id       UUID,
    server_id     UUID,
    tool          TEXT,
    state         TEXT,
    outcome_class TEXT,
    latency_ms    BIGINT,
    detail        TEXT,
    occurred_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX mcp_run_events_run ON mcp_run_events (tenant_id, run_id, event_id);
CREATE INDEX mcp_run_events_tenant ON mcp_run_events (tenant_id, event_id);
ALTER TABLE mcp_run_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_run_events FORCE ROW LEVEL SECURITY;
CREATE POLICY mcp_run_events_rls ON mcp_run_events
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON mcp_run_events TO cyberos_app;

-- +goose Down
DROP TABLE mcp_run_events;
DROP TABLE mcp_run_budgets;
DROP TRIGGER mcp_calls_forward ON mcp_calls;
DROP FUNCTION mcp_calls_forward_only();
DROP TRIGGER mcp_calls_tenant ON mcp_calls;
DROP FUNCTION mcp_calls_tenant_check();
DROP TABLE mcp_calls;
DROP TABLE tenant_settings;
