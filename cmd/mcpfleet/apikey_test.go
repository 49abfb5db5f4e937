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

// The apikey commands: create (bound or not), list, revoke — and a plain message with a non-zero exit
// for every mistake.
func TestAPIKeyCommands(t *testing.T) {
	db := pgtest.New(t)
	env := map[string]string{"MCPFLEET_ADMIN_DATABASE_URL": db.AdminURL}
	getenv := func(k string) string { return env[k] }
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, getenv, &out, &errOut)
		return out.String(), err
	}
	out, err := cli("tenant", "create", "--name", "acme")
	if err != nil {
		t.Fatal(err)
	}
	var tenant struct {
		TenantID string `json:"tenant_id"`
	}
	_ = json.Unmarshal([]byte(out), &tenant)
	out, err = cli("apikey", "create", "--tenant", tenant.TenantID, "--role", "module", "--module", "calendar", "--module", "mail")
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		KeyID   string   `json:"key_id"`
		Modules []string `json:"modules"`
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil || strings.Join(key.Modules, ",") != "calendar,mail" {
		t.Fatalf("create: %s %v", out, err)
	}
	out, err = cli("apikey", "list", "--tenant", tenant.TenantID)
	if err != nil || !strings.Contains(out, key.KeyID) || strings.Contains(out, "mcpf_") || !strings.Contains(out, `"revoked_at":null`) {
		t.Fatalf("list: %s %v", out, err)
	}
	if out, err = cli("apikey", "revoke", "--key-id", key.KeyID); err != nil || !strings.Contains(out, `"revoked_at":"`) {
		t.Fatalf("revoke: %s %v", out, err)
	}
	if out, _ = cli("apikey", "list", "--tenant", tenant.TenantID); strings.Contains(out, `"revoked_at":null`) {
		t.Fatalf("list after revoke: %s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"apikey"}, 2, "usage"},
		{[]string{"apikey", "rotate"}, 2, "unknown subcommand"},
		{[]string{"apikey", "list"}, 2, "--tenant must be"},
		{[]string{"apikey", "list", "--tenant", uuid.NewString()}, 1, "no tenant"},
		{[]string{"apikey", "revoke"}, 2, "--key-id must be"},
		{[]string{"apikey", "revoke", "--key-id", "nope"}, 2, "--key-id must be"},
		{[]string{"apikey", "revoke", "--key-id", uuid.NewString()}, 1, "no key"},
		{[]string{"apikey", "create", "--tenant", tenant.TenantID, "--role", "admin", "--module", "x"}, 2, "module keys only"},
		{[]string{"apikey", "create", "--tenant", tenant.TenantID, "--role", "module", "--module", "bad name"}, 2, "--module"},
	} {
		_, err := cli(tc.args...)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: %v (exit %d), want exit %d with %q", tc.args, err, exitCode(err), tc.code, tc.msg)
		}
	}
}
