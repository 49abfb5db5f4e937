-- The skill registry (TASK-MCP-001): the tools ("skills") each MCP server offers.
-- The runtime role cyberos_app is created here, with LOGIN and no password; an operator
-- sets one (ALTER ROLE cyberos_app PASSWORD ...) where the server does not use trust or peer auth.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cyberos_app') THEN
        CREATE ROLE cyberos_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO cyberos_app;

CREATE TABLE skill_registry (
    skill_id     UUID PRIMARY KEY,
    tenant_id    UUID NOT NULL,
    server_id    UUID NOT NULL,
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    description  TEXT NOT NULL DEFAULT '',
    input_schema JSONB NOT NULL DEFAULT '{}'::jsonb,
    enabled      BOOLEAN NOT NULL DEFAULT false,
    available    BOOLEAN NOT NULL DEFAULT true,
    -- orphaned_at is set when the server stops advertising the skill; the row is kept (history), unavailable.
    orphaned_at  TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (server_id, name)
);
CREATE INDEX skill_registry_tenant_server ON skill_registry (tenant_id, server_id);

ALTER TABLE skill_registry ENABLE ROW LEVEL SECURITY;
ALTER TABLE skill_registry FORCE ROW LEVEL SECURITY;
CREATE POLICY skills_rls ON skill_registry
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);

GRANT SELECT, INSERT ON skill_registry TO cyberos_app;
GRANT UPDATE (description, input_schema, enabled, available, orphaned_at, updated_at) ON skill_registry TO cyberos_app;

-- +goose Down
DROP TABLE skill_registry;
