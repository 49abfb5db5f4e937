package migrations_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/migrations"
	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// Migration 0015 on a database as release 0014 left it: the administrator's servers that 0010's backfill
// marked 'module' because a module had re-registered them (so their supported_protocols were no longer
// '{}') become 'admin' when an operator's doing shows — an import attempted, a credential stored, an
// authentication mode set — and a self-registered server without any of those stays 'module'. Tool
// changes already recorded are numbered per tenant, in time order, with cause 'definition'.
func TestMigration0015CorrectsOrigins(t *testing.T) {
	db := pgtest.NewAt(t, 14)
	ctx := context.Background()
	owner := db.AdminPool(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := owner.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tenant := uuid.New()
	exec(`INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')`, tenant)
	servers := map[string]struct {
		importStatus, authMode string
		credential             []byte
		origin                 string // as 0010 left it
		want                   string
	}{
		"imported":        {importStatus: "succeeded", origin: "module", want: "admin"},
		"import-failed":   {importStatus: "failed", origin: "module", want: "admin"},
		"credential":      {importStatus: "never_imported", credential: []byte{1, 2, 3}, origin: "module", want: "admin"},
		"bearer":          {importStatus: "never_imported", authMode: "bearer", origin: "module", want: "admin"},
		"self-registered": {importStatus: "never_imported", origin: "module", want: "module"},
		"configured":      {importStatus: "never_imported", origin: "admin", want: "admin"},
	}
	ids := map[string]uuid.UUID{}
	for name, s := range servers {
		id := uuid.New()
		ids[name] = id
		exec(`INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status,
				last_heartbeat_at, registered_at)
			VALUES ($1, $2, $3, '1', '{2025-11-25}', 'healthy', now(), now())`, id, tenant, name)
		exec(`INSERT INTO server_config (server_id, tenant_id, endpoint, auth_mode, credential, import_status, origin)
			VALUES ($1, $2, 'https://example.com/mcp', $3, $4, $5, $6)`, id, tenant, s.authMode, s.credential, s.importStatus, s.origin)
	}
	skill := uuid.New()
	exec(`INSERT INTO skill_registry (skill_id, tenant_id, server_id, name) VALUES ($1, $2, $3, 'echo')`, skill, tenant, ids["imported"])
	for _, at := range []string{"2026-11-30T10:00:00Z", "2026-11-30T09:00:00Z"} {
		exec(`INSERT INTO tool_changes (change_id, tenant_id, server_id, skill_id, name, source, old_definition,
				new_definition, was_enabled, changed_at)
			VALUES ($1, $2, $3, $4, 'echo', 'import', '{}', '{}', true, $5)`, uuid.New(), tenant, ids["imported"], skill, at)
	}

	if _, err := migrations.Up(ctx, db.AdminURL); err != nil {
		t.Fatal(err)
	}
	for name, s := range servers {
		var origin string
		if err := owner.QueryRow(ctx, `SELECT origin FROM server_config WHERE server_id = $1`, ids[name]).Scan(&origin); err != nil {
			t.Fatal(err)
		}
		if origin != s.want {
			t.Errorf("%s: origin %s, want %s", name, origin, s.want)
		}
	}
	rows, err := owner.Query(ctx, `SELECT tenant_seq, cause, (changed_at AT TIME ZONE 'UTC')::text FROM tool_changes ORDER BY tenant_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var seq int64
		var cause, at string
		if err := rows.Scan(&seq, &cause, &at); err != nil {
			t.Fatal(err)
		}
		got = append(got, cause+" "+at)
		if seq != int64(len(got)) {
			t.Errorf("change %d numbered %d", len(got), seq)
		}
	}
	if len(got) != 2 || got[0] != "definition 2026-11-30 09:00:00" {
		t.Errorf("tool changes after the migration: %v", got)
	}
}

// Migration 0019 on a database as release 0018 left it: a server configured without a version (its
// mcp.server.registered audit event has version ”, which no registration can send) that a module's
// re-registration had made look self-registered becomes 'admin', whatever its import and authentication; a
// self-registered server stays 'module', also one an operator gave a data class and switched approval off on.
func TestMigration0019CorrectsOrigins(t *testing.T) {
	db := pgtest.NewAt(t, 18)
	ctx := context.Background()
	owner := db.AdminPool(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := owner.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tenant := uuid.New()
	exec(`INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')`, tenant)
	servers := map[string]struct {
		firstVersion string // of the server's first mcp.server.registered event
		origin       string // as 0015 left it
		want         string
	}{
		"configured, re-registered": {firstVersion: "", origin: "module", want: "admin"},
		"self-registered":           {firstVersion: "1.0.0", origin: "module", want: "module"},
		"configured":                {firstVersion: "", origin: "admin", want: "admin"},
	}
	ids := map[string]uuid.UUID{}
	for name, s := range servers {
		id := uuid.New()
		ids[name] = id
		exec(`INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status,
				last_heartbeat_at, registered_at)
			VALUES ($1, $2, $3, '2.0.0', '{2025-11-25}', 'healthy', now(), now())`, id, tenant, name)
		exec(`INSERT INTO server_config (server_id, tenant_id, endpoint, data_class, requires_approval, origin)
			VALUES ($1, $2, 'https://example.com/mcp', 'internal', false, $3)`, id, tenant, s.origin)
		for _, v := range []string{s.firstVersion, "2.0.0"} {
			exec(`INSERT INTO audit_events (event_id, tenant_id, kind, server_id, module_name, version, status, occurred_at)
				VALUES ($1, $2, 'mcp.server.registered', $3, $4, $5, 'healthy', now())`, uuid.New(), tenant, id, name, v)
		}
	}
	if _, err := migrations.Up(ctx, db.AdminURL); err != nil {
		t.Fatal(err)
	}
	for name, s := range servers {
		var origin string
		if err := owner.QueryRow(ctx, `SELECT origin FROM server_config WHERE server_id = $1`, ids[name]).Scan(&origin); err != nil {
			t.Fatal(err)
		}
		if origin != s.want {
			t.Errorf("%s: origin %s, want %s", name, origin, s.want)
		}
	}
}
