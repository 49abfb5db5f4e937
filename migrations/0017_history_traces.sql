-- Pictures of a server's history and traces one click away (issue 15).
--
-- mcp_calls.trace_id is the trace of the request that made the call (32 lowercase hex, or NULL when the
-- request was not traced), set once at insert like every other identity column of the call (the app role's
-- UPDATE grant does not name it), so the dashboard and the API can link a call to its trace.
--
-- audit_events_tenant_time lets the dashboard's fleet strip aggregate one tenant's transitions of the last
-- 24 hours by time without reading the tenant's whole history; the per-server strip reads one server's
-- newest events through audit_events_server (tenant_id, server_id, seq). The table is append-only, so the
-- index costs one insert per event. CREATE INDEX (not CONCURRENTLY: goose runs each file in a transaction)
-- holds writes to audit_events while it builds: run this migration in a quiet moment on a large log.

-- +goose Up
ALTER TABLE mcp_calls ADD COLUMN trace_id CHAR(32) CHECK (trace_id ~ '^[0-9a-f]{32}$');
CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, occurred_at);

-- +goose Down
DROP INDEX audit_events_tenant_time;
ALTER TABLE mcp_calls DROP COLUMN trace_id;
