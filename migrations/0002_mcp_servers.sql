-- mcp_servers exactly as TASK-MCP-002 writes it. The app role may INSERT and SELECT, and UPDATE only the
-- columns granted below (append-only except status columns, AC 14); it has no DELETE.
-- FORCE makes the policy apply to the table owner as well.

-- +goose Up
CREATE TABLE mcp_servers (
    server_id UUID PRIMARY KEY,
    tenant_id UUID NOT NULL,
    module_name TEXT NOT NULL,
    version TEXT NOT NULL,
    supported_protocols TEXT[] NOT NULL,
    capability_advertisement JSONB,
    status TEXT NOT NULL DEFAULT 'healthy' CHECK (status IN ('healthy','degraded','unhealthy','deregistered')),
    last_heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    registered_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    deregistered_at TIMESTAMPTZ,
    trace_id CHAR(32),
    UNIQUE (tenant_id, module_name)
);
ALTER TABLE mcp_servers ENABLE ROW LEVEL SECURITY;
CREATE POLICY servers_rls ON mcp_servers
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT UPDATE (version, supported_protocols, capability_advertisement, status, last_heartbeat_at, deregistered_at) ON mcp_servers TO cyberos_app;

ALTER TABLE mcp_servers FORCE ROW LEVEL SECURITY;
GRANT SELECT, INSERT ON mcp_servers TO cyberos_app;
CREATE INDEX mcp_servers_tenant_status ON mcp_servers (tenant_id, status, server_id);

ALTER TABLE skill_registry
    ADD CONSTRAINT skill_registry_server_fk FOREIGN KEY (server_id) REFERENCES mcp_servers (server_id);

-- +goose Down
ALTER TABLE skill_registry DROP CONSTRAINT skill_registry_server_fk;
DROP TABLE mcp_servers;
