-- Each tenant's own event numbering (issue 10, finding 5). audit_events.seq and import_events.seq are one
-- identity shared by every tenant, so a reader of one tenant (GET /v1/mcp/events) saw every other tenant's
-- events as gaps in its sequence and could not tell them from an insert of its own still committing: it
-- waited out each one. tenant_seq numbers the events of one tenant 1, 2, 3, … with no gap, in commit order:
--
--   * a BEFORE INSERT trigger takes the tenant's event lock (event_seq_lock: a transaction-level advisory
--     lock, one per tenant and log) and numbers the row max(tenant_seq) + 1 of that tenant. The lock is held
--     until the transaction ends, and PostgreSQL makes a commit visible before it releases the locks, so the
--     next writer of the tenant reads the previous one's numbers (each statement of the trigger takes a
--     fresh snapshot: writers run READ COMMITTED; under REPEATABLE READ a stale max would hit the unique
--     index and fail, never duplicate);
--   * a rolled-back insert takes its number with it, and an insert that ON CONFLICT skips numbers nothing;
--   * hence whoever sees number n sees 1..n: a reader never waits for a gap and never goes past an event.
--
-- Writers of one tenant's events are serialised from their first event to their commit; other tenants do not
-- wait. A transaction that writes several tenants' events (the writer's group commit) should take their locks
-- first, in tenant_id order (persistence.Store.Commit does), so two of them cannot deadlock. seq stays: it
-- orders one server's history and the audit API (?after_seq=).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION event_seq_lock(p_log TEXT, p_tenant UUID) RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(CASE p_log WHEN 'audit' THEN 1296433153 WHEN 'import' THEN 1296433154 END,
                                 hashtext(p_tenant::text))
$$;
-- +goose StatementEnd

-- Existing events keep their order: numbered by seq within each tenant. FORCE is lifted for the rewrite only,
-- so that the owner running the migration sees every tenant's rows.
ALTER TABLE audit_events ADD COLUMN tenant_seq BIGINT;
ALTER TABLE audit_events NO FORCE ROW LEVEL SECURITY;
UPDATE audit_events a SET tenant_seq = n.rn
FROM (SELECT event_id, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS rn FROM audit_events) n
WHERE a.event_id = n.event_id;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_events ALTER COLUMN tenant_seq SET NOT NULL;
CREATE UNIQUE INDEX audit_events_tenant_seq ON audit_events (tenant_id, tenant_seq);

ALTER TABLE import_events ADD COLUMN tenant_seq BIGINT;
ALTER TABLE import_events NO FORCE ROW LEVEL SECURITY;
UPDATE import_events i SET tenant_seq = n.rn
FROM (SELECT seq, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS rn FROM import_events) n
WHERE i.seq = n.seq;
ALTER TABLE import_events FORCE ROW LEVEL SECURITY;
ALTER TABLE import_events ALTER COLUMN tenant_seq SET NOT NULL;
CREATE UNIQUE INDEX import_events_tenant_seq ON import_events (tenant_id, tenant_seq);

-- Runs as the caller, under RLS: max() sees the tenant's rows only, committed or this transaction's own
-- (earlier rows of the same statement included). Whatever the INSERT gave as tenant_seq is replaced.
-- +goose StatementBegin
CREATE FUNCTION number_tenant_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER audit_events_number BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION number_tenant_event();
CREATE TRIGGER import_events_number BEFORE INSERT ON import_events FOR EACH ROW EXECUTE FUNCTION number_tenant_event();

-- +goose Down
DROP TRIGGER import_events_number ON import_events;
DROP TRIGGER audit_events_number ON audit_events;
DROP FUNCTION number_tenant_event();
DROP INDEX import_events_tenant_seq;
DROP INDEX audit_events_tenant_seq;
ALTER TABLE import_events DROP COLUMN tenant_seq;
ALTER TABLE audit_events DROP COLUMN tenant_seq;
DROP FUNCTION event_seq_lock(TEXT, UUID);
