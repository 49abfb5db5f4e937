-- The operator dashboard (issue 6): a durable record of catalogue imports for the event stream, dashboard
-- sessions, and indexes that let the fleet overview page and filter 100,000 servers by module name and by
-- registration time.
--
-- import_events is append-only like audit_events (the app role may INSERT and SELECT only) and is written by a
-- trigger on server_config in the same transaction as the import outcome it records, so an import that
-- committed has its event and one that rolled back has none, whoever wrote it. seq orders one tenant's events
-- for readers of GET /v1/mcp/events, which resume from it.
--
-- ui_sessions maps the SHA-256 of an opaque random session id (the cookie holds the id, the table only its
-- hash) to the API key that signed in. The app role reads a session only through ui_session_lookup, a
-- SECURITY DEFINER function that also refuses the session of a revoked key; like api_keys, the table has RLS
-- enabled but not forced so that function can look a session up before any tenant is known. The app role
-- inserts, revokes (revoked_at) and purges expired sessions of its own tenant only.
--
-- The indexes: module_name in the "C" collation (module names are ASCII; a prefix becomes a range scan and the
-- sort a walk of the index whatever the database's collation), and registered_at, which is never updated
-- (it is not in the app role's UPDATE grant), so the index costs heartbeat stamps nothing: they stay HOT.
-- last_heartbeat_at is deliberately not indexed — every heartbeat would stop being a HOT update.

-- +goose Up
CREATE TABLE import_events (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     UUID NOT NULL,
    server_id     UUID NOT NULL,
    module_name   TEXT NOT NULL,
    from_status   TEXT NOT NULL CHECK (from_status IN ('never_imported','succeeded','failed')),
    import_status TEXT NOT NULL CHECK (import_status IN ('succeeded','failed')),
    tool_count    INTEGER NOT NULL,
    trace_id      CHAR(32),
    occurred_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX import_events_tenant ON import_events (tenant_id, seq);

ALTER TABLE import_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE import_events FORCE ROW LEVEL SECURITY;
CREATE POLICY import_events_rls ON import_events
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON import_events TO cyberos_app;

-- Runs as the caller, so under RLS: the event's tenant is the row's, checked by the policy. A transaction may
-- name its trace with set_config('mcpfleet.trace_id', <32 hex>, true); anything else is ignored.
-- +goose StatementBegin
CREATE FUNCTION server_config_import_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    trace TEXT := current_setting('mcpfleet.trace_id', true);
BEGIN
    IF trace IS NULL OR trace !~ '^[0-9a-f]{32}$' THEN
        trace := NULL;
    END IF;
    INSERT INTO import_events (tenant_id, server_id, module_name, from_status, import_status, tool_count, trace_id, occurred_at)
    SELECT NEW.tenant_id, NEW.server_id, m.module_name, OLD.import_status, NEW.import_status, NEW.tool_count, trace,
           coalesce(NEW.last_imported, now())
    FROM mcp_servers m WHERE m.server_id = NEW.server_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER server_config_imported AFTER UPDATE OF import_status, last_imported ON server_config
    FOR EACH ROW
    WHEN (NEW.import_status <> 'never_imported' AND (OLD.import_status IS DISTINCT FROM NEW.import_status
          OR OLD.last_imported IS DISTINCT FROM NEW.last_imported))
    EXECUTE FUNCTION server_config_import_event();

CREATE TABLE ui_sessions (
    session_hash BYTEA PRIMARY KEY CHECK (length(session_hash) = 32),
    tenant_id    UUID NOT NULL REFERENCES tenants (tenant_id),
    key_id       UUID NOT NULL REFERENCES api_keys (key_id),
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ
);
CREATE INDEX ui_sessions_tenant_expiry ON ui_sessions (tenant_id, expires_at);
ALTER TABLE ui_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY ui_sessions_rls ON ui_sessions
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT, DELETE ON ui_sessions TO cyberos_app;
GRANT UPDATE (revoked_at) ON ui_sessions TO cyberos_app;

-- +goose StatementBegin
CREATE FUNCTION ui_session_lookup(p_hash BYTEA, p_now TIMESTAMPTZ)
RETURNS TABLE (key_id UUID, tenant_id UUID, role TEXT, expires_at TIMESTAMPTZ)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT s.key_id, s.tenant_id, k.role, s.expires_at
    FROM public.ui_sessions s JOIN public.api_keys k ON k.key_id = s.key_id AND k.tenant_id = s.tenant_id
    WHERE s.session_hash = p_hash AND s.revoked_at IS NULL AND s.expires_at > p_now AND k.revoked_at IS NULL
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION ui_session_lookup(BYTEA, TIMESTAMPTZ) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ui_session_lookup(BYTEA, TIMESTAMPTZ) TO cyberos_app;

CREATE INDEX mcp_servers_tenant_module_c ON mcp_servers (tenant_id, module_name COLLATE "C", server_id);
CREATE INDEX mcp_servers_tenant_registered ON mcp_servers (tenant_id, registered_at, server_id);

-- +goose Down
DROP INDEX mcp_servers_tenant_registered;
DROP INDEX mcp_servers_tenant_module_c;
DROP FUNCTION ui_session_lookup(BYTEA, TIMESTAMPTZ);
DROP TABLE ui_sessions;
DROP TRIGGER server_config_imported ON server_config;
DROP FUNCTION server_config_import_event();
DROP TABLE import_events;
