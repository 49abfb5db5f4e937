-- Registration cost that does not grow with the fleet (issue 14). A set-based group commit of 128
-- registrations spent most of its time in two per-row triggers:
--
-- 1. number_tenant_event looked up its log's last tenant_seq with max(), once per inserted row. In a fresh
--    or fast-growing database the planner, from the statistics of a nearly empty table, may answer that
--    max() by scanning the tenant's rows instead of the (tenant_id, tenant_seq) index, and plpgsql keeps
--    the plan for the session: numbering then reads the whole log per row (0.25–0.35 ms per event at a
--    few thousand servers, growing with the fleet). The look-up is now ORDER BY tenant_seq DESC LIMIT 1,
--    which only the ordered index answers cheaply whatever the statistics say; and the tenant's event lock
--    is taken directly (a SQL-language helper is planned again on every call). The function keeps one
--    generic plan (plan_cache_mode): the service's sessions plan every statement afresh
--    (force_custom_plan, persistence.Open), which here meant planning the look-up, with its row-level
--    security filter, once per inserted row (0.44 ms of 0.5 per event in the benchmark); the generic plan
--    of an ORDER BY … LIMIT 1 on the ordered index does not depend on statistics.
-- 2. mcp_servers_count upserted the tenant's counter once per inserted server. It is now a statement
--    trigger over the inserted rows (a transition table): one upsert per tenant per statement. The limit is
--    checked the same way (the statement fails with MF001 when the tenant is past it).
--
-- And statistics: analyze_fleet() lets the runtime role ANALYZE the tables a fleet grows, as their owner,
-- which persistence.Store does when the servers it created doubled (persistence/analyze.go): without
-- statistics (a fresh database; autovacuum off or behind) every keyed join under the tenant's row-level
-- security filter is planned as a whole-tenant scan.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION number_tenant_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_events' THEN
        PERFORM pg_advisory_xact_lock(1296433153, hashtext(NEW.tenant_id::text));
        NEW.tenant_seq := coalesce((SELECT e.tenant_seq FROM audit_events e WHERE e.tenant_id = NEW.tenant_id
            ORDER BY e.tenant_seq DESC LIMIT 1), 0) + 1;
    ELSIF TG_TABLE_NAME = 'tool_changes' THEN
        PERFORM pg_advisory_xact_lock(1296433155, hashtext(NEW.tenant_id::text));
        NEW.tenant_seq := coalesce((SELECT e.tenant_seq FROM tool_changes e WHERE e.tenant_id = NEW.tenant_id
            ORDER BY e.tenant_seq DESC LIMIT 1), 0) + 1;
    ELSE
        PERFORM pg_advisory_xact_lock(1296433154, hashtext(NEW.tenant_id::text));
        NEW.tenant_seq := coalesce((SELECT e.tenant_seq FROM import_events e WHERE e.tenant_id = NEW.tenant_id
            ORDER BY e.tenant_seq DESC LIMIT 1), 0) + 1;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION number_tenant_event() SET plan_cache_mode = force_generic_plan;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION mcp_servers_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    max BIGINT := nullif(current_setting('mcpfleet.max_servers_per_tenant', true), '')::bigint;
    r   RECORD;
BEGIN
    FOR r IN
        INSERT INTO tenant_server_counts AS t (tenant_id, servers)
            SELECT i.tenant_id, count(*) FROM inserted_servers i GROUP BY i.tenant_id ORDER BY i.tenant_id
            ON CONFLICT (tenant_id) DO UPDATE SET servers = t.servers + EXCLUDED.servers
            RETURNING t.tenant_id, t.servers
    LOOP
        IF max IS NOT NULL AND max > 0 AND r.servers > max THEN
            RAISE EXCEPTION 'tenant % would have % servers, the limit is %', r.tenant_id, r.servers, max USING ERRCODE = 'MF001';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP TRIGGER mcp_servers_count ON mcp_servers;
-- AFTER, so that a re-registration (INSERT ... ON CONFLICT DO UPDATE) is not counted: the transition
-- table of an INSERT trigger holds only the inserted rows.
CREATE TRIGGER mcp_servers_count AFTER INSERT ON mcp_servers REFERENCING NEW TABLE AS inserted_servers
    FOR EACH STATEMENT EXECUTE FUNCTION mcp_servers_count();

-- +goose StatementBegin
CREATE FUNCTION analyze_fleet() RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    ANALYZE public.mcp_servers, public.skill_registry, public.audit_events;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION analyze_fleet() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION analyze_fleet() TO cyberos_app;

-- +goose Down
DROP FUNCTION analyze_fleet();
ALTER FUNCTION number_tenant_event() RESET plan_cache_mode;
DROP TRIGGER mcp_servers_count ON mcp_servers;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION mcp_servers_count() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER mcp_servers_count AFTER INSERT ON mcp_servers FOR EACH ROW EXECUTE FUNCTION mcp_servers_count();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION number_tenant_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_events' THEN
        PERFORM event_seq_lock('audit', NEW.tenant_id);
        SELECT coalesce(max(tenant_seq), 0) + 1 INTO NEW.tenant_seq FROM audit_events WHERE tenant_id = NEW.tenant_id;
    ELSIF TG_TABLE_NAME = 'tool_changes' THEN
        PERFORM event_seq_lock('tool', NEW.tenant_id);
        SELECT coalesce(max(tenant_seq), 0) + 1 INTO NEW.tenant_seq FROM tool_changes WHERE tenant_id = NEW.tenant_id;
    ELSE
        PERFORM event_seq_lock('import', NEW.tenant_id);
        SELECT coalesce(max(tenant_seq), 0) + 1 INTO NEW.tenant_seq FROM import_events WHERE tenant_id = NEW.tenant_id;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
