package toolschema_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
)

const weather = `{
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "temp": {"type": "number"},
    "units": {"type": "string", "enum": ["metric", "imperial"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"], "additionalProperties": false},
    "maybe": {"type": ["string", "null"]},
    "anything": {}
  },
  "required": ["city"],
  "additionalProperties": false
}`

type point struct {
	Zip string `json:"zip"`
}

func TestValidate(t *testing.T) {
	schema, err := toolschema.Normalize(json.RawMessage(weather))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args map[string]any
		want string // "" means valid
	}{
		{name: "minimal", args: map[string]any{"city": "Oslo"}},
		{name: "full", args: map[string]any{
			"city": "Oslo", "days": 3, "temp": 1.5, "units": "metric", "tags": []string{"a"},
			"address": point{Zip: "0150"}, "maybe": nil, "anything": []any{1, "x"},
		}},
		{name: "integral float is an integer", args: map[string]any{"city": "Oslo", "days": 3.0}},
		{name: "wrong type", args: map[string]any{"city": 5}, want: `field "city": expected string, got number`},
		{name: "missing required", args: map[string]any{}, want: `field "city": is required`},
		{name: "nil args", args: nil, want: `field "city": is required`},
		{name: "not an integer", args: map[string]any{"city": "Oslo", "days": 1.5}, want: `field "days": expected integer, got number`},
		{name: "enum", args: map[string]any{"city": "Oslo", "units": "kelvin"}, want: `field "units": must be one of "metric", "imperial"`},
		{name: "array item", args: map[string]any{"city": "Oslo", "tags": []any{"a", 2}}, want: `field "tags[1]": expected string, got number`},
		{name: "nested required", args: map[string]any{"city": "Oslo", "address": map[string]any{}}, want: `field "address.zip": is required`},
		{name: "nested type", args: map[string]any{"city": "Oslo", "address": map[string]any{"zip": true}}, want: `field "address.zip": expected string, got boolean`},
		{name: "nested extra", args: map[string]any{"city": "Oslo", "address": map[string]any{"zip": "1", "x": 1}}, want: `field "address.x": is not allowed`},
		{name: "extra", args: map[string]any{"city": "Oslo", "country": "NO"}, want: `field "country": is not allowed`},
		{name: "type list", args: map[string]any{"city": "Oslo", "maybe": 1}, want: `field "maybe": expected string or null, got number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := toolschema.Validate(schema, tt.args)
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate: %v, want valid", err)
				}
				return
			}
			var fe *toolschema.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError %q", err, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Validate = %q, want %q", err, tt.want)
			}
		})
	}
}

func TestValidateEnumComparesNumbersByValue(t *testing.T) {
	schema, err := toolschema.Normalize(json.RawMessage(`{"type":"object","properties":{"n":{"enum":[1,2.5,{"a":[1]}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{1.0, 1, 2.5, map[string]any{"a": []any{1.0}}} {
		if err := toolschema.Validate(schema, map[string]any{"n": v}); err != nil {
			t.Errorf("n=%v: %v", v, err)
		}
	}
	if err := toolschema.Validate(schema, map[string]any{"n": 3}); err == nil {
		t.Error("n=3 accepted")
	}
}

func TestValidateRejectsUnreadableSchema(t *testing.T) {
	if err := toolschema.Validate(json.RawMessage(`nope`), nil); err == nil {
		t.Error("an unreadable schema validated")
	}
}
