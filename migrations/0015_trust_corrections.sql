-- Trust boundaries, corrections after review (issue 10).
--
-- 1. Origins, fixed forward. 0010 recognised an administrator's server only by supported_protocols = '{}', which a
--    module's re-registration overwrites: an administrator's server that a module once re-registered was marked
--    'module', so module keys could rewrite it. Whatever an operator did to a server that only an operator can do
--    marks it as an administrator's too: an import was attempted (import_status other than never_imported), a
--    credential is stored, or an authentication mode is set. This errs on the safe side: a self-registered server
--    an operator imported or gave a credential to is from now on an administrator's (a module key may no longer
--    re-register or deregister it; a key bound to its module name may still heartbeat it).
--
-- 2. An endpoint move is a tool change. A registration that moves a self-registered server's endpoint disables
--    the server's enabled tools until an operator enables them again, and records one tool_changes row per tool
--    it disabled, with cause 'endpoint' and the endpoint before and after (old_endpoint, new_endpoint; the
--    definition columns then hold the tool's unchanged definition). A change of the definition has cause
--    'definition' (every earlier row).
--
-- 3. tool_changes is read by GET /v1/mcp/skills/{id}/changes and streamed by GET /v1/mcp/events: tenant_seq
--    numbers a tenant's changes 1, 2, 3, … in commit order without gaps, like audit_events and import_events
--    (migration 0012; the same trigger function, a third event lock 'tool').

-- +goose Up
ALTER TABLE server_config NO FORCE ROW LEVEL SECURITY;
UPDATE server_config SET origin = 'admin'
    WHERE origin = 'module' AND (import_status <> 'never_imported' OR credential IS NOT NULL OR auth_mode <> '');
ALTER TABLE server_config FORCE ROW LEVEL SECURITY;

ALTER TABLE tool_changes ADD COLUMN cause TEXT NOT NULL DEFAULT 'definition' CHECK (cause IN ('definition', 'endpoint')),
    ADD COLUMN old_endpoint TEXT,
    ADD COLUMN new_endpoint TEXT,
    ADD COLUMN tenant_seq BIGINT;
ALTER TABLE tool_changes NO FORCE ROW LEVEL SECURITY;
UPDATE tool_changes t SET tenant_seq = n.rn
FROM (SELECT change_id, row_number() OVER (PARTITION BY tenant_id ORDER BY changed_at, change_id) AS rn FROM tool_changes) n
WHERE t.change_id = n.change_id;
ALTER TABLE tool_changes FORCE ROW LEVEL SECURITY;
ALTER TABLE tool_changes ALTER COLUMN tenant_seq SET NOT NULL;
CREATE UNIQUE INDEX tool_changes_tenant_seq ON tool_changes (tenant_id, tenant_seq);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_seq_lock(p_log TEXT, p_tenant UUID) RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(CASE p_log WHEN 'audit' THEN 1296433153 WHEN 'import' THEN 1296433154
                                            WHEN 'tool' THEN 1296433155 END,
                                 hashtext(p_tenant::text))
$$;
-- +goose StatementEnd
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
CREATE TRIGGER tool_changes_number BEFORE INSERT ON tool_changes FOR EACH ROW EXECUTE FUNCTION number_tenant_event();

-- +goose Down
DROP TRIGGER tool_changes_number ON tool_changes;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION number_tenant_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_events' THEN
        PERFORM event_seq_lock('audit', NEW.tenant_id);
        SELECT coalesce(max(tenant_seq), 0) + 1 INTO NEW.tenant_seq FROM audit_events WHERE tenant_id = NEW.tenant_id;
    ELSE
        PERFORM event_seq_lock('import', NEW.tenant_id);
        SELECT coalesce(max(tenant_seq), 0) + 1 INTO NEW.tenant_seq FROM import_events WHERE tenant_id = NEW.tenant_id;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP INDEX tool_changes_tenant_seq;
ALTER TABLE tool_changes DROP COLUMN tenant_seq, DROP COLUMN new_endpoint, DROP COLUMN old_endpoint, DROP COLUMN cause;
-- The corrected origins stay: telling which of them 0010 had marked 'module' is not possible afterwards.
