package toolschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Limits of the supported subset; see the package documentation.
const (
	MaxBytes      = 64 << 10
	MaxDepth      = 8
	MaxProperties = 256
)

// ErrUnsupported is wrapped by every error [Normalize] returns: the schema
// cannot be expressed in the supported subset.
var ErrUnsupported = errors.New("schema outside the supported subset")

// Error describes why a schema was refused.
type Error struct {
	// Keyword is the offending keyword, or "" when the refusal is not about
	// one keyword (malformed JSON, size, depth).
	Keyword string
	// Path is the JSON Pointer of the schema object carrying the problem;
	// "" is the root.
	Path string
	// Problem is a short lowercase description.
	Problem string
}

// Error returns the problem, naming the keyword and location when known.
func (e *Error) Error() string {
	at := "at the root"
	if e.Path != "" {
		at = "at " + e.Path
	}
	return fmt.Sprintf("%s (%s)", e.Problem, at)
}

// Unwrap returns [ErrUnsupported].
func (e *Error) Unwrap() error { return ErrUnsupported }

// allowedTypes are the type names of the subset.
var allowedTypes = map[string]bool{
	"object": true, "string": true, "number": true, "integer": true,
	"boolean": true, "array": true, "null": true,
}

// annotations are dropped: they describe, they do not constrain.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$anchor": true, "$dynamicAnchor": true,
	"$vocabulary": true, "$comment": true, "$defs": true, "definitions": true,
	"title": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "format": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true,
}

// refused are known keywords that change validation and lie outside the
// subset. Unknown keywords are refused too; this list only gives them a
// clearer message.
var refused = map[string]bool{
	"$ref": true, "$dynamicRef": true, "$recursiveRef": true, "$recursiveAnchor": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true,
	"if": true, "then": true, "else": true,
	"dependencies": true, "dependentRequired": true, "dependentSchemas": true,
	"patternProperties": true, "propertyNames": true,
	"additionalItems": true, "prefixItems": true, "contains": true,
	"minContains": true, "maxContains": true,
	"unevaluatedItems": true, "unevaluatedProperties": true,
	"const": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "pattern": true,
	"minItems": true, "maxItems": true, "uniqueItems": true,
	"minProperties": true, "maxProperties": true,
}

// Normalize reduces raw, a tool's input schema as published, to the
// supported subset described in the package documentation, and returns it
// as compact JSON with sorted keys. Annotations are dropped. A schema using
// anything else is refused with an [*Error] (wrapping [ErrUnsupported]) that
// names the keyword; the caller must then skip the tool.
//
// Normalize is pure and safe for concurrent use.
func Normalize(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) > MaxBytes {
		return nil, &Error{Problem: fmt.Sprintf("schema is %d bytes, more than the %d allowed", len(raw), MaxBytes)}
	}
	v, err := decode(raw)
	if err != nil {
		return nil, &Error{Problem: "schema is not valid JSON: " + err.Error()}
	}
	n := &normalizer{}
	out, err := n.schema(v, "", 1)
	if err != nil {
		return nil, err
	}
	switch t := out["type"].(type) {
	case nil:
		out["type"] = "object"
	case string:
		if t != "object" {
			return nil, &Error{Keyword: "type", Problem: fmt.Sprintf("the root schema must have type object, not %s", t)}
		}
	default:
		return nil, &Error{Keyword: "type", Problem: "the root schema must have type object, not a list of types"}
	}
	b, err := encode(out)
	if err != nil {
		return nil, &Error{Problem: "schema cannot be encoded: " + err.Error()}
	}
	if len(b) > MaxBytes {
		return nil, &Error{Problem: fmt.Sprintf("normalised schema is more than %d bytes", MaxBytes)}
	}
	return b, nil
}

// decode parses exactly one JSON value, keeping numbers as written.
func decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

type normalizer struct {
	props int // properties declared so far, across the schema
}

// schema normalises the subschema v found at path, at nesting depth depth.
func (n *normalizer) schema(v any, path string, depth int) (map[string]any, error) {
	if depth > MaxDepth {
		return nil, &Error{Path: path, Problem: fmt.Sprintf("schema nests deeper than %d levels", MaxDepth)}
	}
	var m map[string]any
	switch s := v.(type) {
	case bool:
		if !s {
			return nil, &Error{Path: path, Problem: "boolean schema false is not supported"}
		}
		return map[string]any{}, nil
	case map[string]any:
		m = s
	default:
		return nil, &Error{Path: path, Problem: "a schema must be a JSON object"}
	}
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(m)) { // the first error found is the same on every run
		if err := n.keyword(out, k, m[k], path, depth); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// keyword normalises one keyword k of the schema at path into out, or refuses it.
func (n *normalizer) keyword(out map[string]any, k string, val any, path string, depth int) error {
	switch {
	case k == "type":
		t, err := normType(val, path)
		if err != nil {
			return err
		}
		out["type"] = t
	case k == "properties":
		props, err := n.properties(val, path, depth)
		if err != nil {
			return err
		}
		if len(props) > 0 {
			out["properties"] = props
		}
	case k == "required":
		req, err := normRequired(val, path)
		if err != nil {
			return err
		}
		if len(req) > 0 {
			out["required"] = req
		}
	case k == "additionalProperties":
		switch ap := val.(type) {
		case bool:
			if !ap {
				out["additionalProperties"] = false
			}
		case map[string]any:
			if len(ap) != 0 {
				return &Error{Keyword: k, Path: path, Problem: `keyword "additionalProperties" with a schema is not supported (only false)`}
			}
		default:
			return &Error{Keyword: k, Path: path, Problem: `keyword "additionalProperties" must be a boolean`}
		}
	case k == "items":
		if _, isList := val.([]any); isList {
			return &Error{Keyword: k, Path: path, Problem: `keyword "items" as an array (tuple validation) is not supported`}
		}
		sub, err := n.schema(val, path+"/items", depth+1)
		if err != nil {
			return err
		}
		if len(sub) > 0 {
			out["items"] = sub
		}
	case k == "enum":
		list, ok := val.([]any)
		if !ok || len(list) == 0 {
			return &Error{Keyword: k, Path: path, Problem: `keyword "enum" must be a non-empty array`}
		}
		out["enum"] = list
	case k == "description":
		d, ok := val.(string)
		if !ok {
			return &Error{Keyword: k, Path: path, Problem: `keyword "description" must be a string`}
		}
		out["description"] = d
	case annotations[k], strings.HasPrefix(k, "x-"):
		// Dropped.
	case refused[k]:
		return &Error{Keyword: k, Path: path, Problem: fmt.Sprintf("keyword %q is not supported", k)}
	default:
		return &Error{Keyword: k, Path: path, Problem: fmt.Sprintf("unknown keyword %q is not supported", k)}
	}
	return nil
}

// properties normalises the "properties" keyword of the schema at path: each property's schema, in
// name order, counted against MaxProperties.
func (n *normalizer) properties(val any, path string, depth int) (map[string]any, error) {
	props, ok := val.(map[string]any)
	if !ok {
		return nil, &Error{Keyword: "properties", Path: path, Problem: `keyword "properties" must be an object`}
	}
	n.props += len(props)
	if n.props > MaxProperties {
		return nil, &Error{Keyword: "properties", Path: path, Problem: fmt.Sprintf("schema declares more than %d properties", MaxProperties)}
	}
	outProps := make(map[string]any, len(props))
	for _, name := range slices.Sorted(maps.Keys(props)) {
		sub, err := n.schema(props[name], path+"/properties/"+pointerEscape(name), depth+1)
		if err != nil {
			return nil, err
		}
		outProps[name] = sub
	}
	return outProps, nil
}

// normType returns the type keyword as a name, or as a list of two or more
// distinct names.
func normType(v any, path string) (any, error) {
	bad := func(problem string) error { return &Error{Keyword: "type", Path: path, Problem: problem} }
	switch t := v.(type) {
	case string:
		if !allowedTypes[t] {
			return nil, bad(fmt.Sprintf("type %q is not supported", t))
		}
		return t, nil
	case []any:
		if len(t) == 0 {
			return nil, bad(`keyword "type" must not be an empty list`)
		}
		names := make([]any, 0, len(t))
		seen := map[string]bool{}
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, bad(`keyword "type" must list type names`)
			}
			if !allowedTypes[s] {
				return nil, bad(fmt.Sprintf("type %q is not supported", s))
			}
			if seen[s] {
				return nil, bad(fmt.Sprintf("type %q is listed twice", s))
			}
			seen[s] = true
			names = append(names, s)
		}
		if len(names) == 1 {
			return names[0], nil
		}
		return names, nil
	default:
		return nil, bad(`keyword "type" must be a string or a list of strings`)
	}
}

func normRequired(v any, path string) ([]any, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, &Error{Keyword: "required", Path: path, Problem: `keyword "required" must be an array of property names`}
	}
	seen := map[string]bool{}
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, &Error{Keyword: "required", Path: path, Problem: `keyword "required" must be an array of property names`}
		}
		if seen[s] {
			return nil, &Error{Keyword: "required", Path: path, Problem: fmt.Sprintf("property %q is required twice", s)}
		}
		seen[s] = true
	}
	return list, nil
}

// pointerEscape escapes a property name as a JSON Pointer reference token.
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
