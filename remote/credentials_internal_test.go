package remote

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/secrets"
)

// A credential sealed for one endpoint opens for any endpoint of the same origin and for no other: not
// another scheme, host or port, not another server, not without an endpoint.
func TestCredentialSealedToOrigin(t *testing.T) {
	key, err := secrets.ParseKey("8c1f0e3a5b7d9f2143658709badcfe1032547698badcfe1032547698badcfe10")
	if err != nil {
		t.Fatal(err)
	}
	tenant, server := uuid.New(), uuid.New()
	sealed, err := key.Seal([]byte("tok"), credentialAD(tenant, server, "https://mcp.example.com/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"https://mcp.example.com/mcp", "https://MCP.example.com:443/other?x=1", "https://mcp.example.com./"} {
		if got, err := key.Open(sealed, credentialAD(tenant, server, ep)); err != nil || string(got) != "tok" {
			t.Errorf("same origin %s: %q, %v", ep, got, err)
		}
	}
	for _, ep := range []string{"http://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp", "https://evil.example/mcp", "https://mcp.example.com.evil.example/mcp", ""} {
		if _, err := key.Open(sealed, credentialAD(tenant, server, ep)); !errors.Is(err, secrets.ErrOpen) {
			t.Errorf("other origin %q: %v, want ErrOpen", ep, err)
		}
	}
	if _, err := key.Open(sealed, credentialAD(tenant, uuid.New(), "https://mcp.example.com/mcp")); !errors.Is(err, secrets.ErrOpen) {
		t.Errorf("another server: %v, want ErrOpen", err)
	}
}
