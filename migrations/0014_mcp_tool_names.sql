-- The names the MCP endpoint (/mcp, issue 13) lists each skill under. A name is assigned once, the first time
-- the endpoint sees the skill, and never changes afterwards: another server coming or going cannot rename a
-- tool an agent already knows (the naming rule is in docs/mcp-endpoint.md). UNIQUE (tenant_id, name) keeps
-- the names of one tenant distinct; a row stays when its skill is disabled or orphaned, so the name stays
-- reserved for it.
--
-- RLS is forced on auth.tenant_id; the app role may only INSERT and SELECT (a name is never rewritten).

-- +goose Up
CREATE TABLE mcp_tool_names (
    skill_id    UUID PRIMARY KEY REFERENCES skill_registry (skill_id),
    tenant_id   UUID NOT NULL,
    name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    assigned_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
ALTER TABLE mcp_tool_names ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_tool_names FORCE ROW LEVEL SECURITY;
CREATE POLICY mcp_tool_names_rls ON mcp_tool_names
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT ON mcp_tool_names TO cyberos_app;

-- +goose Down
DROP TABLE mcp_tool_names;
