-- The mass-silence guard's count, shared by every node of a cluster (issue 12): one row per tenant, the
-- tenant's current monitor period (period_start: the wall clock floored to the monitor interval, the same
-- on every node) with the permits granted and refused in it, and the current episode (held: refusals since
-- it began; episode: its one hold alert was raised). A node reads the row FOR UPDATE (an upsert that
-- changes nothing), applies the rule of package lifecycle (SilenceCount) and writes it back in the same
-- transaction (persistence.Store.TakeSilencePermits), so the budget of a period and the one alert of an
-- episode are the tenant's, whichever nodes ask. One row per tenant, not per period: nothing accumulates,
-- and a period's end and an episode's are decided on the same locked row.
-- Single-node mode keeps the same count in memory and never touches this table.

-- +goose Up
CREATE TABLE mass_silence_periods (
    tenant_id    UUID PRIMARY KEY REFERENCES tenants (tenant_id),
    period_start TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    used         INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    refused      INTEGER NOT NULL DEFAULT 0 CHECK (refused >= 0),
    held         INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
    episode      BOOLEAN NOT NULL DEFAULT false
);
ALTER TABLE mass_silence_periods ENABLE ROW LEVEL SECURITY;
ALTER TABLE mass_silence_periods FORCE ROW LEVEL SECURITY;
CREATE POLICY mass_silence_periods_rls ON mass_silence_periods
    USING (tenant_id = current_setting('auth.tenant_id')::uuid)
    WITH CHECK (tenant_id = current_setting('auth.tenant_id')::uuid);
GRANT SELECT, INSERT, UPDATE (period_start, used, refused, held, episode) ON mass_silence_periods TO cyberos_app;
-- Like every table (migration 0016): a fenced command writes no row here either.
CREATE TRIGGER a_fence BEFORE INSERT OR UPDATE OR DELETE ON mass_silence_periods FOR EACH ROW
    WHEN (current_setting('mcpfleet.fenced', true) = 'on') EXECUTE FUNCTION fence_drop_row();

-- +goose Down
DROP TABLE mass_silence_periods;
