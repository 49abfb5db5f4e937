package mcpclient_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

func toolNames(tools []mcpclient.Tool) []string {
	out := make([]string, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestListToolsPaging(t *testing.T) {
	tests := []struct {
		name            string
		tools, pageSize int
		wantPages       int
	}{
		{name: "one page", tools: 3, pageSize: 10, wantPages: 1},
		{name: "several pages", tools: 120, pageSize: 7, wantPages: 18},
		{name: "exactly the page ceiling", tools: mcpclient.MaxCataloguePages, pageSize: 1, wantPages: mcpclient.MaxCataloguePages},
		{name: "exactly the tool ceiling", tools: mcpclient.MaxCatalogueTools, pageSize: 100, wantPages: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mcptest.Paged(t, tt.tools, tt.pageSize)
			c, rec := newClient(t, s.URL)
			cat, err := c.ListTools(testContext(t))
			if err != nil {
				t.Fatalf("ListTools: %v", err)
			}
			want := make([]string, tt.tools)
			for i := range want {
				want[i] = mcptest.PagedToolName(i)
			}
			if diff := cmp.Diff(want, toolNames(cat.Tools)); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			if cat.Pages != tt.wantPages {
				t.Errorf("Pages = %d, want %d", cat.Pages, tt.wantPages)
			}
			lists := 0
			for _, m := range s.Methods() {
				if m == "tools/list" {
					lists++
				}
			}
			if lists != tt.wantPages {
				t.Errorf("server saw %d tools/list requests, want %d", lists, tt.wantPages)
			}
			contacts := rec.all()
			if len(contacts) != 1 || contacts[0].latency != cat.Latency || cat.Latency <= 0 {
				t.Errorf("recorded %+v, want one contact with the last page's latency %v", contacts, cat.Latency)
			}
		})
	}
}

func TestListToolsCeilings(t *testing.T) {
	tests := []struct {
		name            string
		tools, pageSize int
		wantReason      string
		maxRequests     int
	}{
		{name: "one page too many", tools: mcpclient.MaxCataloguePages + 1, pageSize: 1, wantReason: "more than 50 pages", maxRequests: mcpclient.MaxCataloguePages},
		{name: "one tool too many", tools: mcpclient.MaxCatalogueTools + 1, pageSize: 100, wantReason: "more than 500 tools", maxRequests: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mcptest.Paged(t, tt.tools, tt.pageSize)
			c, rec := newClient(t, s.URL)
			_, err := c.ListTools(testContext(t))
			e := wantClass(t, err, mcpclient.ClassInvalidResponse)
			if !strings.Contains(e.Reason, tt.wantReason) {
				t.Errorf("reason %q does not say %q", e.Reason, tt.wantReason)
			}
			lists := 0
			for _, m := range s.Methods() {
				if m == "tools/list" {
					lists++
				}
			}
			if lists > tt.maxRequests {
				t.Errorf("server saw %d tools/list requests, want at most %d", lists, tt.maxRequests)
			}
			if n := len(rec.all()); n != 0 {
				t.Errorf("half a catalogue walk recorded %d contacts; it is not a contact", n)
			}
		})
	}
}

func TestListToolsTTL(t *testing.T) {
	t.Run("modern sends ttlMs", func(t *testing.T) {
		c, _ := newClient(t, mcptest.Modern(t).URL)
		cat, err := c.ListTools(testContext(t))
		if err != nil {
			t.Fatalf("ListTools: %v", err)
		}
		if want := mcptest.ModernTTL * time.Millisecond; cat.TTL != want {
			t.Errorf("TTL = %v, want %v", cat.TTL, want)
		}
	})
	t.Run("legacy sends none", func(t *testing.T) {
		c, _ := newClient(t, mcptest.Legacy(t).URL)
		cat, err := c.ListTools(testContext(t))
		if err != nil {
			t.Fatalf("ListTools: %v", err)
		}
		if cat.TTL != 0 {
			t.Errorf("TTL = %v, want 0", cat.TTL)
		}
	})
}

func TestListToolsSeesCatalogueChange(t *testing.T) {
	s := mcptest.Changing(t)
	c, rec := newClient(t, s.URL)
	var got []string
	for range 2 {
		cat, err := c.ListTools(testContext(t))
		if err != nil {
			t.Fatalf("ListTools: %v", err)
		}
		got = append(got, toolNames(cat.Tools)...)
	}
	if diff := cmp.Diff([]string{"gen_1", "gen_2"}, got); diff != "" {
		t.Errorf("catalogues (-want +got):\n%s", diff)
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("recorded %d contacts, want 2", n)
	}
}

func TestImportableSkipsSchemasOutsideTheSubset(t *testing.T) {
	s := mcptest.BadSchemas(t)
	c, _ := newClient(t, s.URL)
	cat, err := c.ListTools(testContext(t))
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if len(cat.Tools) != len(mcptest.BadSchemaTools()) {
		t.Fatalf("catalogue has %d tools, want all %d (skipping is the importer's decision)", len(cat.Tools), len(mcptest.BadSchemaTools()))
	}
	tools, skipped := cat.Importable()
	var good []string
	for _, tool := range tools {
		good = append(good, tool.Name)
		if !json.Valid(tool.Schema) {
			t.Errorf("%s: normalised schema %q is not JSON", tool.Name, tool.Schema)
		}
	}
	if diff := cmp.Diff([]string{"good_annotated", "good_plain"}, good); diff != "" {
		t.Errorf("importable (-want +got):\n%s", diff)
	}
	wantKeyword := map[string]string{
		"bad_ref": `"$ref"`, "bad_oneof": `"oneOf"`, "bad_pattern": `"patternProperties"`,
		"bad_addlschema": `"additionalProperties"`, "bad_ifthen": `"if"`, "bad_deep": "deeper than 8",
	}
	var skippedNames []string
	for _, sk := range skipped {
		skippedNames = append(skippedNames, sk.Name)
		if want := wantKeyword[sk.Name]; !strings.Contains(sk.Reason, want) {
			t.Errorf("%s skipped for %q, want a reason naming %s", sk.Name, sk.Reason, want)
		}
	}
	slices.Sort(skippedNames)
	if diff := cmp.Diff([]string{"bad_addlschema", "bad_deep", "bad_ifthen", "bad_oneof", "bad_pattern", "bad_ref"}, skippedNames); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

// The legacy server's draft-07 schema, with $schema, title and default,
// passes through the SDK untouched and normalises with its annotations
// dropped and additionalProperties:false kept.
func TestLegacyDraft07SchemaImports(t *testing.T) {
	s := mcptest.Legacy(t)
	c, _ := newClient(t, s.URL)
	cat, err := c.ListTools(testContext(t))
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(cat.Tools[0].InputSchema, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["$schema"] != "http://json-schema.org/draft-07/schema#" || raw["title"] != "GetWeatherArguments" {
		t.Errorf("raw schema lost its annotations: %s", cat.Tools[0].InputSchema)
	}
	tools, skipped := cat.Importable()
	if len(skipped) != 0 || len(tools) != 1 {
		t.Fatalf("importable %v, skipped %v", tools, skipped)
	}
	want := `{"additionalProperties":false,"properties":{"city":{"description":"City name","type":"string"},"days":{"type":"integer"},"units":{"enum":["metric","imperial"],"type":"string"}},"required":["city"],"type":"object"}`
	if got := string(tools[0].Schema); got != want {
		t.Errorf("normalised schema\n got %s\nwant %s", got, want)
	}
}

func TestImportableSkipsDuplicateAndNamelessTools(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	cat := mcpclient.Catalogue{Tools: []mcpclient.Tool{
		{Name: "a", InputSchema: schema},
		{Name: "dup", InputSchema: schema},
		{Name: "", InputSchema: schema},
		{Name: "dup", InputSchema: schema},
		{Name: "nil_schema"},
	}}
	tools, skipped := cat.Importable()
	if len(tools) != 1 || tools[0].Name != "a" {
		t.Errorf("importable = %v, want only a", tools)
	}
	var names []string
	for _, s := range skipped {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"dup", "", "dup", "nil_schema"}, names); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}
