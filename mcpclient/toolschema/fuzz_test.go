package toolschema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
)

// FuzzNormalize checks that Normalize never panics, that whatever it
// accepts is valid JSON within the limits, normalises to itself, and can be
// validated against; and that every refusal is a *toolschema.Error.
// The seed corpus is in testdata/fuzz/FuzzNormalize.
func FuzzNormalize(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := toolschema.Normalize(raw)
		if err != nil {
			var e *toolschema.Error
			if !errors.As(err, &e) {
				t.Fatalf("refusal %v is not a *toolschema.Error", err)
			}
			return
		}
		if !json.Valid(out) || len(out) > toolschema.MaxBytes {
			t.Fatalf("accepted schema is invalid or too large: %q", out)
		}
		again, err := toolschema.Normalize(out)
		if err != nil {
			t.Fatalf("normalised schema %s is refused: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%s\n%s", out, again)
		}
		_ = toolschema.Validate(out, map[string]any{"a": "x", "b": []any{1.5, nil}, "c": map[string]any{"d": true}})
	})
}
