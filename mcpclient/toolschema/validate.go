package toolschema

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// FieldError is a tool argument that does not satisfy its schema.
type FieldError struct {
	// Field locates the argument: "city", "address.zip", "tags[2]"; "" is
	// the arguments object itself.
	Field string
	// Problem is a short lowercase description, such as "expected string,
	// got number" or "is required".
	Problem string
}

// Error returns `field "<Field>": <Problem>`, or `arguments: <Problem>` for
// the arguments object itself.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return "arguments: " + e.Problem
	}
	return fmt.Sprintf("field %q: %s", e.Field, e.Problem)
}

// Validate checks args against schema, which must be the output of
// [Normalize]. It returns nil, a [*FieldError] naming the first offending
// field (fields are visited in sorted order, so the choice is
// deterministic), or an error if schema or args cannot be read.
//
// args is validated as the JSON it will be sent as: it is marshalled first,
// so any Go value that marshals to the right JSON is accepted. A nil map is
// the empty object. Numbers compare by value as float64; a number is an
// integer when it has no fractional part.
func Validate(schema json.RawMessage, args map[string]any) error {
	s, err := decode(schema)
	if err != nil {
		return fmt.Errorf("reading schema: %w", err)
	}
	sm, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("reading schema: not a JSON object")
	}
	if args == nil {
		args = map[string]any{}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encoding arguments: %w", err)
	}
	v, err := decode(b)
	if err != nil {
		return fmt.Errorf("encoding arguments: %w", err)
	}
	return validate(v, sm, "")
}

func validate(v any, s map[string]any, path string) error {
	if t, ok := s["type"]; ok {
		names := typeNames(t)
		if !slices.ContainsFunc(names, func(n string) bool { return hasType(v, n) }) {
			return &FieldError{Field: path, Problem: fmt.Sprintf("expected %s, got %s", strings.Join(names, " or "), jsonType(v))}
		}
	}
	if e, ok := s["enum"].([]any); ok {
		if !slices.ContainsFunc(e, func(x any) bool { return jsonEqual(v, x) }) {
			return &FieldError{Field: path, Problem: "must be one of " + renderEnum(e)}
		}
	}
	switch val := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				name, _ := r.(string)
				if _, present := val[name]; !present {
					return &FieldError{Field: join(path, name), Problem: "is required"}
				}
			}
		}
		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		closed := s["additionalProperties"] == false
		for _, k := range keys {
			sub, declared := props[k].(map[string]any)
			if !declared {
				if closed {
					return &FieldError{Field: join(path, k), Problem: "is not allowed"}
				}
				continue
			}
			if err := validate(val[k], sub, join(path, k)); err != nil {
				return err
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range val {
				if err := validate(e, items, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func typeNames(t any) []string {
	switch t := t.(type) {
	case string:
		return []string{t}
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func hasType(v any, name string) bool {
	switch name {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(n), 64)
		return err == nil && f == math.Trunc(f)
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// jsonEqual reports whether two decoded JSON values are equal, numbers by
// value.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool, string:
		return a == b
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == bn {
			return true
		}
		fa, errA := strconv.ParseFloat(string(a), 64)
		fb, errB := strconv.ParseFloat(string(bn), 64)
		return errA == nil && errB == nil && fa == fb
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok || !jsonEqual(av, bv) {
				return false
			}
		}
		return true
	}
	return false
}

// renderEnum lists enum values as JSON, at most 10 of them.
func renderEnum(e []any) string {
	const limit = 10
	parts := make([]string, 0, min(len(e), limit)+1)
	for i, v := range e {
		if i == limit {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(e)-limit))
			break
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte("?")
		}
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}
