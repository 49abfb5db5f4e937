package toolschema_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
)

func TestNormalizeAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "plain",
			in:   `{"type":"object","properties":{"city":{"type":"string","description":"City"}},"required":["city"]}`,
			want: `{"properties":{"city":{"description":"City","type":"string"}},"required":["city"],"type":"object"}`,
		},
		{
			name: "draft-07 annotations dropped",
			in: `{"$schema":"http://json-schema.org/draft-07/schema#","$id":"urn:x","title":"Args","$comment":"c",
				"type":"object","properties":{"q":{"type":"string","title":"Q","default":"x","examples":["a"],
				"format":"uri","deprecated":true,"readOnly":false,"writeOnly":false,"contentMediaType":"text/plain"}},
				"additionalProperties":false,"definitions":{"unused":{"type":"string"}}}`,
			want: `{"additionalProperties":false,"properties":{"q":{"type":"string"}},"type":"object"}`,
		},
		{
			name: "vendor extensions dropped",
			in:   `{"type":"object","x-mcp-header":"X","properties":{"a":{"type":"string","x-order":1}}}`,
			want: `{"properties":{"a":{"type":"string"}},"type":"object"}`,
		},
		{
			name: "missing root type becomes object",
			in:   `{"properties":{"a":{}}}`,
			want: `{"properties":{"a":{}},"type":"object"}`,
		},
		{
			name: "boolean true schemas",
			in:   `{"type":"object","properties":{"a":true},"additionalProperties":true}`,
			want: `{"properties":{"a":{}},"type":"object"}`,
		},
		{
			name: "additionalProperties empty schema is true",
			in:   `{"type":"object","additionalProperties":{}}`,
			want: `{"type":"object"}`,
		},
		{
			name: "type lists, items, enum, nested",
			in: `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},
				"n":{"type":["integer","null"]},"one":{"type":["string"]},
				"o":{"type":"object","properties":{"x":{"type":"number","enum":[1,2.5,1e3]}}}}}`,
			want: `{"properties":{"n":{"type":["integer","null"]},"o":{"properties":{"x":{"enum":[1,2.5,1e3],"type":"number"}},"type":"object"},"one":{"type":"string"},"tags":{"items":{"enum":["a","b"],"type":"string"},"type":"array"}},"type":"object"}`,
		},
		{
			name: "root boolean true",
			in:   `true`,
			want: `{"type":"object"}`,
		},
		{
			name: "html is not escaped",
			in:   `{"type":"object","description":"<b>&</b>"}`,
			want: `{"description":"<b>&</b>","type":"object"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toolschema.Normalize(json.RawMessage(tt.in))
			if err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Normalize\n got %s\nwant %s", got, tt.want)
			}
			again, err := toolschema.Normalize(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("not idempotent: %s, %v", again, err)
			}
		})
	}
}

func TestNormalizeRefusesKeywordsOutsideTheSubset(t *testing.T) {
	refused := []string{
		"$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
		"dependencies", "dependentRequired", "dependentSchemas", "patternProperties",
		"propertyNames", "additionalItems", "prefixItems", "contains", "unevaluatedItems",
		"unevaluatedProperties", "const", "minimum", "maximum", "exclusiveMinimum",
		"exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "minItems",
		"maxItems", "uniqueItems", "minProperties", "maxProperties",
		"nullable", "someFutureKeyword", // unknown keywords fail closed
	}
	for _, kw := range refused {
		for _, where := range []string{"root", "nested"} {
			t.Run(kw+"/"+where, func(t *testing.T) {
				schema := fmt.Sprintf(`{"type":"object",%q:{}}`, kw)
				wantPath := ""
				if where == "nested" {
					schema = fmt.Sprintf(`{"type":"object","properties":{"a/b":{"type":"array","items":{%q:{}}}}}`, kw)
					wantPath = "/properties/a~1b/items"
				}
				_, err := toolschema.Normalize(json.RawMessage(schema))
				var e *toolschema.Error
				if !errors.As(err, &e) {
					t.Fatalf("Normalize(%s) = %v, want a *toolschema.Error", schema, err)
				}
				if e.Keyword != kw || e.Path != wantPath {
					t.Errorf("Keyword, Path = %q, %q; want %q, %q", e.Keyword, e.Path, kw, wantPath)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", kw)) {
					t.Errorf("error %q does not name the keyword", err)
				}
				if !errors.Is(err, toolschema.ErrUnsupported) {
					t.Errorf("error does not wrap ErrUnsupported")
				}
			})
		}
	}
}

func TestNormalizeRefusesMalformed(t *testing.T) {
	tests := map[string]string{
		"not JSON":                     `{"type":`,
		"trailing data":                `{"type":"object"} {}`,
		"not an object":                `[]`,
		"false schema":                 `false`,
		"false property":               `{"type":"object","properties":{"a":false}}`,
		"root not object":              `{"type":"string"}`,
		"root type list":               `{"type":["object","null"]}`,
		"unknown type":                 `{"type":"object","properties":{"a":{"type":"date"}}}`,
		"empty type list":              `{"type":"object","properties":{"a":{"type":[]}}}`,
		"duplicate type":               `{"type":"object","properties":{"a":{"type":["string","string"]}}}`,
		"type not string":              `{"type":"object","properties":{"a":{"type":5}}}`,
		"properties not object":        `{"type":"object","properties":[]}`,
		"required not array":           `{"type":"object","required":"a"}`,
		"required not strings":         `{"type":"object","required":[1]}`,
		"required twice":               `{"type":"object","required":["a","a"]}`,
		"enum empty":                   `{"type":"object","properties":{"a":{"enum":[]}}}`,
		"description not string":       `{"type":"object","description":5}`,
		"additionalProperties schema":  `{"type":"object","additionalProperties":{"type":"string"}}`,
		"additionalProperties numeric": `{"type":"object","additionalProperties":1}`,
		"tuple items":                  `{"type":"object","properties":{"a":{"type":"array","items":[{"type":"string"}]}}}`,
		"schema not object":            `{"type":"object","properties":{"a":"string"}}`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := toolschema.Normalize(json.RawMessage(in)); err == nil {
				t.Errorf("Normalize(%s) = %s, want an error", in, got)
			}
		})
	}
}

// nest returns a schema whose deepest subschema is at the given level (the
// root is level 1), alternating properties and items.
func nest(levels int) string {
	inner := `{"type":"string"}`
	for i := levels - 1; i >= 1; i-- {
		if i%2 == 0 {
			inner = `{"type":"array","items":` + inner + `}`
		} else {
			inner = `{"type":"object","properties":{"p":` + inner + `}}`
		}
	}
	return inner
}

func TestNormalizeLimits(t *testing.T) {
	t.Run("depth 8 accepted", func(t *testing.T) {
		if _, err := toolschema.Normalize(json.RawMessage(nest(toolschema.MaxDepth))); err != nil {
			t.Errorf("depth %d: %v", toolschema.MaxDepth, err)
		}
	})
	t.Run("depth 9 refused", func(t *testing.T) {
		_, err := toolschema.Normalize(json.RawMessage(nest(toolschema.MaxDepth + 1)))
		if err == nil || !strings.Contains(err.Error(), "deeper than 8") {
			t.Errorf("depth %d: %v, want refused", toolschema.MaxDepth+1, err)
		}
	})
	props := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	t.Run("256 properties accepted", func(t *testing.T) {
		if _, err := toolschema.Normalize(json.RawMessage(props(toolschema.MaxProperties))); err != nil {
			t.Error(err)
		}
	})
	t.Run("257 properties refused", func(t *testing.T) {
		_, err := toolschema.Normalize(json.RawMessage(props(toolschema.MaxProperties + 1)))
		if err == nil || !strings.Contains(err.Error(), "more than 256 properties") {
			t.Errorf("got %v, want refused", err)
		}
	})
	t.Run("properties count across nesting", func(t *testing.T) {
		// 200 at the root + 57 in a nested object = 257.
		in := strings.Replace(props(200), `"p0":{"type":"string"}`, `"p0":`+props(57), 1)
		if _, err := toolschema.Normalize(json.RawMessage(in)); err == nil {
			t.Error("257 properties across two levels accepted")
		}
	})
	t.Run("64 KiB", func(t *testing.T) {
		pad := func(n int) json.RawMessage {
			head := `{"type":"object","description":"`
			return json.RawMessage(head + strings.Repeat("x", n-len(head)-2) + `"}`)
		}
		if _, err := toolschema.Normalize(pad(toolschema.MaxBytes)); err != nil {
			t.Errorf("exactly %d bytes: %v", toolschema.MaxBytes, err)
		}
		_, err := toolschema.Normalize(pad(toolschema.MaxBytes + 1))
		if err == nil || !strings.Contains(err.Error(), "65537 bytes") {
			t.Errorf("%d bytes: %v, want refused", toolschema.MaxBytes+1, err)
		}
	})
}
