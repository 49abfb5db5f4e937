package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence/pgtest"
)

// mcpfleet server approval switches a server's approval at once — off too, which the API holds for a second
// administrator — and records the change as the command line's; every mistake is a plain message with a
// non-zero exit.
func TestServerApprovalCommand(t *testing.T) {
	db := pgtest.New(t)
	env := map[string]string{"MCPFLEET_ADMIN_DATABASE_URL": db.AdminURL}
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
		return out.String(), err
	}
	ctx := context.Background()
	owner := db.AdminPool(t)
	tenant, server := uuid.New(), uuid.New()
	for _, q := range []string{`INSERT INTO tenants (tenant_id, name) SELECT $1, 'acme' WHERE $2::uuid IS NOT NULL`,
		`INSERT INTO mcp_servers (server_id, tenant_id, module_name, version, supported_protocols, status, last_heartbeat_at, registered_at)
			VALUES ($2, $1, 'calendar', '1', '{2025-11-25}', 'healthy', now(), now())`} {
		if _, err := owner.Exec(ctx, q, tenant, server); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cli("server", "approval", "--tenant", tenant.String(), "--server", server.String(), "--off")
	var res struct {
		RequiresApproval bool   `json:"requires_approval"`
		ChangeID         string `json:"change_id"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.RequiresApproval || res.ChangeID == "" {
		t.Fatalf("approval off: %s %v", out, err)
	}
	var state, via string
	var by *uuid.UUID
	var changes string
	if err := owner.QueryRow(ctx, `SELECT state, requested_via, requested_by, changes::text FROM server_config_changes WHERE change_id = $1`,
		res.ChangeID).Scan(&state, &via, &by, &changes); err != nil {
		t.Fatal(err)
	}
	if state != "applied" || via != "cli" || by != nil || changes != `[{"new": false, "old": true, "field": "requires_approval"}]` {
		t.Fatalf("recorded: %s %s %v %s", state, via, by, changes)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"server"}, 2, "usage"},
		{[]string{"server", "approval", "--tenant", tenant.String(), "--server", server.String()}, 2, "exactly one of --on and --off"},
		{[]string{"server", "approval", "--tenant", tenant.String(), "--server", "x", "--on"}, 2, "--server must be"},
		{[]string{"server", "approval", "--tenant", tenant.String(), "--server", uuid.NewString(), "--on"}, 1, "no server"},
		{[]string{"server", "approval", "--tenant", uuid.NewString(), "--server", server.String(), "--on"}, 1, "no server"},
	} {
		_, err := cli(tc.args...)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: %v (exit %d), want exit %d with %q", tc.args, err, exitCode(err), tc.code, tc.msg)
		}
	}
}
