-- Trust boundaries (issue 10): who owns a server, which module names a module key speaks for, tool
-- definitions pinned until an operator re-approves a change, and the servers-per-tenant quota.
--
-- server_config.origin says who created a server: 'module' (it registered itself; its catalogue is its
-- capability advertisement) or 'admin' (an administrator configured it; its catalogue is what an import
-- read with tools/list). A server without a server_config row is self-registered (configuring always
-- writes a row). The app role may INSERT it but never UPDATE it: a server's origin never changes.
--
-- api_keys.modules binds a module key to module names (empty: unbound). auth_lookup_key returns them.
--
-- skill_registry gains the tool's annotations and, when a re-registration or a re-import changed a
-- tool's definition (description, input schema, annotations), changed_at and previous_definition; the
-- change itself is appended to tool_changes (app role: INSERT and SELECT only), with who and which trace.
--
-- tenant_server_counts counts each tenant's mcp_servers rows (every status: a deregistered server keeps its
-- id and is revived by re-registration). A trigger keeps it and refuses an insert past the limit the
-- service sets per transaction in mcpfleet.max_servers_per_tenant (no setting: no limit), with SQLSTATE
-- MF001 so the store can tell it apart.

-- +goose Up
ALTER TABLE server_config ADD COLUMN origin TEXT NOT NULL DEFAULT 'module' CHECK (origin IN ('module', 'admin'));
-- Backfill: a configured server was created with no supported protocols, which a registration cannot send.
-- RLS is forced on both tables, for the owner too; lift it for the backfills only.
ALTER TABLE server_config NO FORCE ROW LEVEL SECURITY;
ALTER TABLE mcp_servers NO FORCE ROW LEVEL SECURITY;
UPDATE server_config c SET origin = 'admin' FROM mcp_servers m
    WHERE m.server_id = c.server_id AND m.supported_protocols = '{}'::text[];

ALTER TABLE api_keys ADD COLUMN modules TEXT[] NOT NULL DEFAULT '{}'::text[];
DROP FUNCTION auth_lookup_key(BYTEA);
-- +goose StatementBegin
CREATE FUNCTION auth_lookup_key(p_hash BYTEA)
RETURNS TABLE (key_id UUID, tenant_id UUID, role TEXT, modules TEXT[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT k.key_id, k.tenant_id, k.role, k.modules FROM public.api_keys k WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION auth_lookup_key(BYTEA) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION auth_lookup_key(BYTEA) TO cyberos_app;

ALTER TABLE skill_registry ADD COLUMN annotations JSONB,
    ADD COLUMN changed_at TIMESTAMPTZ,
    ADD COLUMN previous_definition JSONB;
GRANT UPDATE (annotations, changed_at, previous_definition) ON skill_registry TO cyberos_app;

CREATE TABLE tool_changes (
    change_id      UUID PRIMARY KEY,
    tenant_id      UUID NOT NULL,
    server_id      UUID NOT NULL REFERENCES mcp_servers (server_id),
    skill_id       UUID NOT NULL REFERENCES skill_registry (skill_id),
    name           TEXT NOT NULL,
    source         TEXT NOT NULL CHECK (source IN ('advertisement', 'import')),
    old_definition JSONB NOT NULL,
    new_definition JSONB NOT NULL,
    was_enabled    BOOLEAN NOT NULL,
    changed_by     UUID, -- the API key that caused it
    trace_id       CHAR(32),
    changed_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX tool_changes_skill ON tool_changes (tenant_id, skill_id, changed_at);
ALTER TABLE tool_changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE tool_changes FORCE ROW LEVEL SECURITY;
CREATE POLICY tool_changes_rls ON tool_changes
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON tool_changes TO cyberos_app;

CREATE TABLE tenant_server_counts (
    tenant_id UUID PRIMARY KEY REFERENCES tenants (tenant_id),
    servers   BIGINT NOT NULL
);
INSERT INTO tenant_server_counts (tenant_id, servers) SELECT tenant_id, count(*) FROM mcp_servers GROUP BY tenant_id;
ALTER TABLE tenant_server_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_server_counts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_server_counts_rls ON tenant_server_counts
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT, UPDATE (servers) ON tenant_server_counts TO cyberos_app;

ALTER TABLE server_config FORCE ROW LEVEL SECURITY;
ALTER TABLE mcp_servers FORCE ROW LEVEL SECURITY;

-- +goose StatementBegin
CREATE FUNCTION mcp_servers_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n   BIGINT;
    max BIGINT := nullif(current_setting('mcpfleet.max_servers_per_tenant', true), '')::bigint;
BEGIN
    INSERT INTO tenant_server_counts AS t (tenant_id, servers) VALUES (NEW.tenant_id, 1)
        ON CONFLICT (tenant_id) DO UPDATE SET servers = t.servers + 1
        RETURNING servers INTO n;
    IF max IS NOT NULL AND max > 0 AND n > max THEN
        RAISE EXCEPTION 'tenant % has % servers, the limit is %', NEW.tenant_id, n - 1, max USING ERRCODE = 'MF001';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- AFTER, so that a re-registration (INSERT ... ON CONFLICT DO UPDATE) is not counted.
CREATE TRIGGER mcp_servers_count AFTER INSERT ON mcp_servers FOR EACH ROW EXECUTE FUNCTION mcp_servers_count();

-- +goose Down
DROP TRIGGER mcp_servers_count ON mcp_servers;
DROP FUNCTION mcp_servers_count();
DROP TABLE tenant_server_counts;
DROP TABLE tool_changes;
ALTER TABLE skill_registry DROP COLUMN annotations, DROP COLUMN changed_at, DROP COLUMN previous_definition;
DROP FUNCTION auth_lookup_key(BYTEA);
-- +goose StatementBegin
CREATE FUNCTION auth_lookup_key(p_hash BYTEA)
RETURNS TABLE (key_id UUID, tenant_id UUID, role TEXT)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT k.key_id, k.tenant_id, k.role FROM public.api_keys k WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION auth_lookup_key(BYTEA) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION auth_lookup_key(BYTEA) TO cyberos_app;
ALTER TABLE api_keys DROP COLUMN modules;
ALTER TABLE server_config DROP COLUMN origin;
