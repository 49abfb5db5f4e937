-- Configuration and observed contact of MCP servers (ADR-154, issue 3). mcp_servers stays append-only except
-- its status columns; everything an operator edits and everything observed about the far side lives here,
-- one row per server, created when a server is configured, or registers with an endpoint, or is first edited.
-- A server without a row reads as the defaults below: requires_approval true (it holds for every server,
-- including one that existed before this table), enabled, push liveness, never imported.
--
-- auth_mode is plain text on purpose: the API writes '', 'bearer' or 'header', and any other stored value is
-- shown verbatim and marked unsupported rather than silently read as a fallback. credential is sealed with
-- AES-256-GCM under MCPFLEET_SECRET_KEY; the database never sees it in clear.
--
-- The app role may SELECT, INSERT and UPDATE (not the keys); it has no DELETE. A row's tenant is copied from
-- its mcp_servers row by the app (INSERT ... SELECT under RLS), and RLS keeps every tenant to its own rows.

-- +goose Up
CREATE TABLE server_config (
    server_id             UUID PRIMARY KEY REFERENCES mcp_servers (server_id),
    tenant_id             UUID NOT NULL,
    endpoint              TEXT CHECK (endpoint IS NULL OR length(endpoint) BETWEEN 1 AND 2048),
    auth_mode             TEXT NOT NULL DEFAULT '',
    auth_header_name      TEXT NOT NULL DEFAULT '',
    credential            BYTEA,
    data_class            TEXT CHECK (data_class IN ('public','internal','confidential','restricted')),
    requires_approval     BOOLEAN NOT NULL DEFAULT true,
    enabled               BOOLEAN NOT NULL DEFAULT true,
    liveness              TEXT NOT NULL DEFAULT 'push' CHECK (liveness IN ('push','probe')),
    import_status         TEXT NOT NULL DEFAULT 'never_imported'
                          CHECK (import_status IN ('never_imported','succeeded','failed')),
    import_error          TEXT,
    last_imported         TIMESTAMPTZ,
    tool_count            INTEGER NOT NULL DEFAULT 0,
    catalogue_ttl_ms      BIGINT,
    catalogue_fresh_until TIMESTAMPTZ,
    last_contact          TIMESTAMPTZ,
    last_latency_ms       BIGINT,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX server_config_probe ON server_config (tenant_id, server_id) WHERE liveness = 'probe';

ALTER TABLE server_config ENABLE ROW LEVEL SECURITY;
ALTER TABLE server_config FORCE ROW LEVEL SECURITY;
CREATE POLICY server_config_rls ON server_config
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);

-- RLS checks the new row's tenant against the caller's, and the foreign key checks the server exists, but
-- the key check does not see RLS: this trigger (running as the caller, so under RLS) refuses a row for a
-- server the caller's tenant cannot see, or with another tenant's id.
-- +goose StatementBegin
CREATE FUNCTION server_config_tenant_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mcp_servers m WHERE m.server_id = NEW.server_id AND m.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'server_config: no server % in tenant %', NEW.server_id, NEW.tenant_id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER server_config_tenant BEFORE INSERT ON server_config
    FOR EACH ROW EXECUTE FUNCTION server_config_tenant_check();

GRANT SELECT, INSERT ON server_config TO cyberos_app;
GRANT UPDATE (endpoint, auth_mode, auth_header_name, credential, data_class, requires_approval, enabled, liveness,
              import_status, import_error, last_imported, tool_count, catalogue_ttl_ms, catalogue_fresh_until,
              last_contact, last_latency_ms, updated_at) ON server_config TO cyberos_app;

-- +goose Down
DROP TABLE server_config;
DROP FUNCTION server_config_tenant_check();
