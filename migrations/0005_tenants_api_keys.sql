-- Tenants and API keys. Keys are stored as SHA-256 of the whole key (keys carry 256 random bits, so a fast hash
-- is safe and keeps the check cheap on the heartbeat path). The app role cannot read api_keys; it resolves a
-- presented key only through auth_lookup_key, a SECURITY DEFINER function that returns at most one row.
-- api_keys has RLS enabled but not forced, so that function (running as the owner) can look a key up before
-- any tenant is known. tenants is the list of tenants itself: the app role may read it, nothing more.

-- +goose Up
CREATE TABLE tenants (
    tenant_id  UUID PRIMARY KEY,
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
GRANT SELECT ON tenants TO cyberos_app;

CREATE TABLE api_keys (
    key_id     UUID PRIMARY KEY,
    tenant_id  UUID NOT NULL REFERENCES tenants (tenant_id),
    role       TEXT NOT NULL CHECK (role IN ('module','operator','admin')),
    key_hash   BYTEA NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY api_keys_rls ON api_keys
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);

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

ALTER TABLE mcp_servers ADD CONSTRAINT mcp_servers_tenant_fk FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);

-- +goose Down
ALTER TABLE mcp_servers DROP CONSTRAINT mcp_servers_tenant_fk;
DROP FUNCTION auth_lookup_key(BYTEA);
DROP TABLE api_keys;
DROP TABLE tenants;
