package persistence_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// DiffConfig names every changed editable field, old → new, in a fixed order, lists every field of a
// creation with old null, and never holds a credential: only that it was set, replaced or removed.
func TestDiffConfig(t *testing.T) {
	base := persistence.ServerConfig{Endpoint: "https://a.example/mcp", AuthMode: "bearer", Credential: []byte("sealed-one"),
		DataClass: "internal", RequiresApproval: true, Enabled: true, Liveness: "push"}
	for _, tc := range []struct {
		name string
		edit func(*persistence.ServerConfig)
		want string
	}{
		{"nothing", func(*persistence.ServerConfig) {}, `null`},
		{"approval off", func(c *persistence.ServerConfig) { c.RequiresApproval = false },
			`[{"field":"requires_approval","old":true,"new":false}]`},
		{"move and class removed", func(c *persistence.ServerConfig) { c.Endpoint, c.DataClass = "https://b.example/mcp", "" },
			`[{"field":"endpoint","old":"https://a.example/mcp","new":"https://b.example/mcp"},{"field":"data_class","old":"internal","new":null}]`},
		{"credential replaced", func(c *persistence.ServerConfig) { c.Credential = []byte("sealed-two") },
			`[{"field":"auth.credential","old":null,"new":"replaced"}]`},
		{"credential removed", func(c *persistence.ServerConfig) { c.AuthMode, c.Credential = "", nil },
			`[{"field":"auth.mode","old":"bearer","new":null},{"field":"auth.credential","old":null,"new":"removed"}]`},
		{"disabled, probed", func(c *persistence.ServerConfig) { c.Enabled, c.Liveness = false, "probe" },
			`[{"field":"enabled","old":true,"new":false},{"field":"liveness","old":"push","new":"probe"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := base
			after.Credential = slices.Clone(base.Credential)
			tc.edit(&after)
			b := base
			got, _ := json.Marshal(persistence.DiffConfig(&b, after))
			if string(got) != tc.want {
				t.Fatalf("changes %s, want %s", got, tc.want)
			}
			if strings.Contains(string(got), "sealed") {
				t.Fatalf("a change holds the credential: %s", got)
			}
		})
	}
	unset := base
	unset.Credential = nil
	if got, _ := json.Marshal(persistence.DiffConfig(&unset, base)); string(got) != `[{"field":"auth.credential","old":null,"new":"set"}]` {
		t.Fatalf("a first credential: %s", got)
	}
	created, _ := json.Marshal(persistence.DiffConfig(nil, base))
	want := `[{"field":"endpoint","old":null,"new":"https://a.example/mcp"},{"field":"auth.mode","old":null,"new":"bearer"},` +
		`{"field":"auth.header_name","old":null,"new":null},{"field":"auth.credential","old":null,"new":"set"},` +
		`{"field":"data_class","old":null,"new":"internal"},{"field":"requires_approval","old":null,"new":true},` +
		`{"field":"enabled","old":null,"new":true},{"field":"liveness","old":null,"new":"push"}]`
	if string(created) != want {
		t.Fatalf("a creation: %s\nwant %s", created, want)
	}
}
