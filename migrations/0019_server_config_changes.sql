-- Four eyes on configuration (issue 10, finding 2): every committed administrator's change of a server's
-- configuration is recorded, and switching approval off on an existing server waits for a second
-- administrator.
--
-- 1. server_config_changes: one row per change — a server's creation (POST /v1/mcp/servers), a PATCH, the host
--    CLI's `mcpfleet server approval` — written in the transaction that commits it. changes is a JSON array of
--    {field, old, new}; a credential's value is never recorded (auth.credential has old null and new "set",
--    "replaced" or "removed"). state is applied (took effect when made), pending (switching requires_approval off:
--    nothing of it applies until another administrator confirms it), confirmed or cancelled. requested_by and
--    decided_by are API keys (NULL when requested_via / decided_via is 'cli': the host command line, which runs with
--    database access). The app role may INSERT and SELECT, and UPDATE only the decision columns; the trigger below
--    lets a row change only from pending to confirmed or cancelled, once.
--
--    The rows are GET /v1/mcp/servers/{id}/config-changes and the event stream's mcp.server.configured events: each
--    row is an event at tenant_seq (its request) and a decided row a second one at decided_seq (its decision). Both
--    draw on one per-tenant numbering, 1, 2, 3, … without gaps in commit order like the other logs (migration 0012:
--    a fourth event lock, 'config'). Not a sixth audit kind: the audit log keeps its five lifecycle kinds.
--
-- 2. Origins, fixed forward again. 0015 marked an administrator's server that 0010 had mislabelled 'module' (a
--    module had re-registered it) only when an import, a credential or an authentication mode showed. A server
--    configured without a version shows too: its mcp.server.registered audit event carries version '', which a
--    registration cannot send (it requires one), and the audit event keeps it after a re-registration replaced
--    the server's version. What else an operator sets (data class, approval, enabled, liveness) is set on
--    self-registered servers as much (a call needs a data class), so it is no evidence: a configured server with a
--    version and none of 0015's marks looks exactly like a self-registered one that gave an endpoint, and stays
--    'module' (without a credential or imported tools, what a module key can do to it is what it can do to any
--    self-registered server: an endpoint move disables its tools).

-- +goose Up
CREATE TABLE server_config_changes (
    change_id     UUID PRIMARY KEY,
    tenant_id     UUID NOT NULL,
    server_id     UUID NOT NULL REFERENCES mcp_servers (server_id),
    changes       JSONB NOT NULL CHECK (jsonb_typeof(changes) = 'array'),
    state         TEXT NOT NULL CHECK (state IN ('applied', 'pending', 'confirmed', 'cancelled')),
    requested_by  UUID,
    requested_via TEXT NOT NULL CHECK (requested_via IN ('api', 'cli')),
    requested_at  TIMESTAMPTZ NOT NULL,
    trace_id      CHAR(32),
    decided_by    UUID,
    decided_via   TEXT CHECK (decided_via IN ('api', 'cli')),
    decided_at    TIMESTAMPTZ,
    tenant_seq    BIGINT NOT NULL,
    decided_seq   BIGINT,
    CHECK ((state IN ('confirmed', 'cancelled')) = (decided_at IS NOT NULL AND decided_via IS NOT NULL))
);
CREATE UNIQUE INDEX server_config_changes_tenant_seq ON server_config_changes (tenant_id, tenant_seq);
CREATE UNIQUE INDEX server_config_changes_decided_seq ON server_config_changes (tenant_id, decided_seq) WHERE decided_seq IS NOT NULL;
CREATE INDEX server_config_changes_server ON server_config_changes (tenant_id, server_id, tenant_seq);
CREATE INDEX server_config_changes_pending ON server_config_changes (server_id) WHERE state = 'pending';

ALTER TABLE server_config_changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE server_config_changes FORCE ROW LEVEL SECURITY;
CREATE POLICY server_config_changes_rls ON server_config_changes
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON server_config_changes TO cyberos_app;
GRANT UPDATE (state, decided_by, decided_via, decided_at, decided_seq) ON server_config_changes TO cyberos_app;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_seq_lock(p_log TEXT, p_tenant UUID) RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(CASE p_log WHEN 'audit' THEN 1296433153 WHEN 'import' THEN 1296433154
                                            WHEN 'tool' THEN 1296433155 WHEN 'config' THEN 1296433156 END,
                                 hashtext(p_tenant::text))
$$;
-- +goose StatementEnd

-- Numbers a change's request (INSERT: tenant_seq) and its decision (UPDATE to confirmed or cancelled:
-- decided_seq) from the tenant's one config numbering, under the tenant's config event lock; refuses any other
-- update. Runs as the caller, under RLS: max() sees the tenant's rows only.
-- +goose StatementBegin
CREATE FUNCTION number_config_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    next BIGINT;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.state <> 'pending' OR NEW.state NOT IN ('confirmed', 'cancelled') THEN
            RAISE EXCEPTION 'server_config_changes: change % is %, it cannot become %', OLD.change_id, OLD.state, NEW.state
                USING ERRCODE = '42501';
        END IF;
    END IF;
    PERFORM event_seq_lock('config', NEW.tenant_id);
    SELECT greatest(coalesce(max(tenant_seq), 0), coalesce(max(decided_seq), 0)) + 1 INTO next
        FROM server_config_changes WHERE tenant_id = NEW.tenant_id;
    IF TG_OP = 'INSERT' THEN
        NEW.tenant_seq := next;
        NEW.decided_seq := NULL;
    ELSE
        NEW.decided_seq := next;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER server_config_changes_number BEFORE INSERT OR UPDATE ON server_config_changes
    FOR EACH ROW EXECUTE FUNCTION number_config_change();
-- The fence of migration 0016 (its name sorts before the numbering trigger, so a dropped row takes no number).
CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON server_config_changes FOR EACH ROW
    WHEN (current_setting('mcpfleet.fenced', true) = 'on') EXECUTE FUNCTION fence_drop_row();

ALTER TABLE server_config NO FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_events NO FORCE ROW LEVEL SECURITY;
UPDATE server_config c SET origin = 'admin'
    WHERE c.origin = 'module' AND EXISTS (SELECT 1 FROM audit_events a
        WHERE a.server_id = c.server_id AND a.kind = 'mcp.server.registered' AND a.version = '');
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
ALTER TABLE server_config FORCE ROW LEVEL SECURITY;

-- +goose Down
DROP TABLE server_config_changes;
DROP FUNCTION number_config_change();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_seq_lock(p_log TEXT, p_tenant UUID) RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(CASE p_log WHEN 'audit' THEN 1296433153 WHEN 'import' THEN 1296433154
                                            WHEN 'tool' THEN 1296433155 END,
                                 hashtext(p_tenant::text))
$$;
-- +goose StatementEnd
-- The corrected origins stay (as in 0015).
