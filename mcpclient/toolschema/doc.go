// Package toolschema normalises MCP tool input schemas into the subset of
// JSON Schema this installation supports, and validates tool arguments
// against a normalised schema.
//
// A remote tool publishes its input schema in whatever draft its SDK emits
// (draft-07 from zod-to-json-schema and pydantic, 2020-12 from the Go SDK).
// [Normalize] reduces it to the subset below or refuses it. Refusal is the
// point: a keyword that changes what a valid argument is, and that the
// subset cannot express, is never dropped — dropping it would accept
// arguments the tool's author meant to reject. A tool whose schema is refused
// is skipped at import, never imported with a weaker schema.
//
// # The supported subset
//
// A normalised schema is a JSON object built from these keywords only:
//
//   - type: one of "object", "string", "number", "integer", "boolean",
//     "array", "null", or a non-empty array of distinct such names. A schema
//     without type accepts any value.
//   - properties: an object mapping property names to subschemas.
//   - required: an array of distinct property names.
//   - additionalProperties: false only. (true, and the empty schema {}, are
//     the default and are dropped.)
//   - items: a single subschema that every array element must satisfy.
//   - enum: a non-empty array of JSON values; the value must equal one of
//     them (numbers compare by value).
//   - description: a string, kept for the model.
//
// The root schema is an object schema: a root without type gets
// "type":"object" (tool arguments are always an object, so this only makes
// the schema say so), and a root with any other type is refused. A boolean
// schema true is read as {}; a boolean schema false is refused.
//
// # Annotations, tolerated and dropped
//
// These keywords describe rather than constrain, and are removed:
// $schema, $id, $anchor, $dynamicAnchor, $vocabulary, $comment, $defs and
// definitions (inert without $ref, which is refused), title, default,
// examples, deprecated, readOnly, writeOnly, format (an annotation unless a
// validator opts in to assert it), contentEncoding, contentMediaType,
// contentSchema, and every keyword starting with "x-" (vendor extensions such
// as x-mcp-header).
//
// # Refused keywords
//
// Every other keyword is refused with an error naming it. That includes all
// keywords that change validation and lie outside the subset — $ref,
// $dynamicRef, $recursiveRef, allOf, anyOf, oneOf, not, if, then, else,
// dependencies, dependentRequired, dependentSchemas, patternProperties,
// propertyNames, additionalProperties with a schema, additionalItems,
// prefixItems, items as an array (tuple validation), contains, minContains,
// maxContains, unevaluatedItems, unevaluatedProperties, const, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, minLength,
// maxLength, pattern, minItems, maxItems, uniqueItems, minProperties and
// maxProperties — and any keyword this package does not know (such as the
// OpenAPI "nullable"): an unknown keyword may constrain, so it fails closed.
//
// # Limits
//
// The raw schema is at most [MaxBytes] (64 KiB); nesting is at most
// [MaxDepth] (8) schema levels, the root being level 1 and each properties
// or items step adding one; at most [MaxProperties] (256) properties are
// declared across the whole schema.
//
// Normalisation is deterministic: object keys are written in sorted order and
// numbers are kept as written, so Normalize(Normalize(s)) == Normalize(s).
package toolschema
