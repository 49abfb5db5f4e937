package mcpendpoint

import (
	"strings"

	"github.com/google/uuid"
)

// maxNameLen is the longest tool name MCP clients accept.
const maxNameLen = 128

// candidate is a skill that has no endpoint name yet.
type candidate struct {
	SkillID uuid.UUID
	Module  string // its server's module name
	Tool    string // the tool's own name on that server
}

// assignNames gives each candidate, in order, the first of these that no other skill of the tenant holds
// (taken, which it extends):
//
//  1. the tool's own name;
//  2. "<module>.<tool>", the tool qualified by its server's module name;
//  3. "<module>.<tool>.<first 8 hex digits of the skill id>".
//
// A name, once assigned, is stored and never changes (the caller persists the answer), so the rule is
// applied once per skill: a tool keeps its name when another server with the same tool name comes or
// goes. Characters outside A–Z a–z 0–9 _ - . in a module name become "_"; a name is cut to 128 bytes.
func assignNames(cands []candidate, taken map[string]bool) map[uuid.UUID]string {
	out := make(map[uuid.UUID]string, len(cands))
	for _, c := range cands {
		qualified := cut(sanitize(c.Module) + "." + c.Tool)
		for _, n := range []string{cut(c.Tool), qualified, cut(qualified[:min(len(qualified), maxNameLen-9)] + "." + c.SkillID.String()[:8])} {
			if !taken[n] {
				taken[n] = true
				out[c.SkillID] = n
				break
			}
		}
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

func cut(s string) string {
	if len(s) > maxNameLen {
		return s[:maxNameLen]
	}
	return s
}
