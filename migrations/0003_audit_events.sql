-- Append-only audit of server lifecycle (DEC-2354): exactly five kinds. The app role may INSERT and SELECT only.
-- seq orders events of one tenant in commit order for readers; event_id makes a retried write idempotent.

-- +goose Up
CREATE TABLE audit_events (
    event_id    UUID PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    tenant_id   UUID NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('mcp.server.registered','mcp.server.degraded','mcp.server.unhealthy',
                                              'mcp.server.recovered','mcp.server.deregistered')),
    server_id   UUID NOT NULL,
    module_name TEXT NOT NULL,
    version     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('healthy','degraded','unhealthy','deregistered')),
    from_status TEXT CHECK (from_status IN ('healthy','degraded','unhealthy','deregistered')),
    trace_id    CHAR(32),
    occurred_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_events_server ON audit_events (tenant_id, server_id, seq);
CREATE INDEX audit_events_tenant ON audit_events (tenant_id, seq);

ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
CREATE POLICY audit_rls ON audit_events
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON audit_events TO cyberos_app;

-- +goose Down
DROP TABLE audit_events;
