package mcpclient

import (
	"encoding/json"

	"github.com/mcpfleet/mcpfleet/mcpclient/toolschema"
)

// ImportableTool is a catalogue tool whose input schema is in the
// supported subset.
type ImportableTool struct {
	Tool
	// Schema is the normalised input schema (toolschema.Normalize).
	Schema json.RawMessage
}

// SkippedTool is a catalogue tool that cannot be imported.
type SkippedTool struct {
	Name string
	// Reason says why, e.g. `keyword "oneOf" is not supported (at
	// /properties/a)`.
	Reason string
}

// Importable normalises every tool's input schema. A tool whose schema
// cannot be expressed in the supported subset is skipped, never imported
// with a weaker schema; so is a tool without a name, and every tool whose
// name the catalogue lists more than once (a call by that name would be
// ambiguous). The order of the catalogue is kept.
func (c Catalogue) Importable() (tools []ImportableTool, skipped []SkippedTool) {
	count := map[string]int{}
	for _, t := range c.Tools {
		count[t.Name]++
	}
	for _, t := range c.Tools {
		switch {
		case t.Name == "":
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: "the tool has no name"})
			continue
		case count[t.Name] > 1:
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: "the catalogue lists this name more than once"})
			continue
		}
		schema, err := toolschema.Normalize(t.InputSchema)
		if err != nil {
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: err.Error()})
			continue
		}
		tools = append(tools, ImportableTool{Tool: t, Schema: schema})
	}
	return tools, skipped
}
