package remote_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/remote"
)

// ConfigChanges names every changed editable field, old → new, in a fixed order, and never shows a
// credential: only that it was set, replaced or removed.
func TestConfigChanges(t *testing.T) {
	base := persistence.ServerConfig{Endpoint: "https://a.example/mcp", AuthMode: "bearer", Credential: []byte("sealed-one"),
		DataClass: "internal", RequiresApproval: true, Enabled: true, Liveness: "push"}
	for _, tc := range []struct {
		name string
		edit func(*persistence.ServerConfig)
		want []string
	}{
		{"nothing", func(*persistence.ServerConfig) {}, nil},
		{"approval off", func(c *persistence.ServerConfig) { c.RequiresApproval = false }, []string{"requires_approval: true → false"}},
		{"move and class removed", func(c *persistence.ServerConfig) { c.Endpoint, c.DataClass = "https://b.example/mcp", "" },
			[]string{"endpoint: https://a.example/mcp → https://b.example/mcp", "data_class: internal → none"}},
		{"credential replaced", func(c *persistence.ServerConfig) { c.Credential = []byte("sealed-two") }, []string{"auth.credential: replaced"}},
		{"credential removed", func(c *persistence.ServerConfig) { c.AuthMode, c.Credential = "none", nil },
			[]string{"auth.mode: bearer → none", "auth.credential: removed"}},
		{"disabled, probed", func(c *persistence.ServerConfig) { c.Enabled, c.Liveness = false, "probe" },
			[]string{"enabled: true → false", "liveness: push → probe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := base
			after.Credential = slices.Clone(base.Credential)
			tc.edit(&after)
			got := remote.ConfigChanges(base, after)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("changes %q, want %q", got, tc.want)
			}
			for _, c := range got {
				if strings.Contains(c, "sealed") {
					t.Fatalf("a change shows the credential: %q", c)
				}
			}
		})
	}
	set := base
	set.Credential = nil
	if got := remote.ConfigChanges(set, base); !slices.Equal(got, []string{"auth.credential: set"}) {
		t.Fatalf("a first credential: %q", got)
	}
}
