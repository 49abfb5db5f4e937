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
	// SelfRegistered: its server registered itself with a module key (origin module), so a module key
	// chose both the module name and the tool's name.
	SelfRegistered bool
}

// assignNames gives each candidate, in order, the first of these that no other skill of the tenant holds
// (taken, which it extends):
//
//  1. the tool's own name — only for a tool of an administrator-configured server, and only if that
//     name has no "." in it;
//  2. "<module>.<tool>", the tool qualified by its server's module name;
//  3. "<module>.<tool>.<first 8 hex digits of the skill id>".
//
// Bare names (1) are therefore an administrator's alone: a self-registered server's tools are always
// qualified, and a qualified name always has a ".", which no bare name has, so a module key can never
// take, before an administrator's server is imported, the bare name agents will use for its tool.
//
// A name, once assigned, is stored and never changes (the caller persists the answer), so the rule is
// applied once per skill: a tool keeps its name when another server with the same tool name comes or
// goes. Characters outside A–Z a–z 0–9 _ - . in a module name become "_", and it is cut to 64 bytes (so the
// "." of a qualified name survives the cut); a name is cut to 128 bytes.
func assignNames(cands []candidate, taken map[string]bool) map[uuid.UUID]string {
	out := make(map[uuid.UUID]string, len(cands))
	for _, c := range cands {
		qualified := cut(prefix(c.Module) + "." + c.Tool)
		names := []string{qualified, cut(qualified[:min(len(qualified), maxNameLen-9)] + "." + c.SkillID.String()[:8])}
		if !c.SelfRegistered && !strings.Contains(c.Tool, ".") {
			names = append([]string{cut(c.Tool)}, names...)
		}
		for _, n := range names {
			if !taken[n] {
				taken[n] = true
				out[c.SkillID] = n
				break
			}
		}
	}
	return out
}

// maxPrefixLen is the longest module name prefix of a qualified name.
const maxPrefixLen = 64

// prefix is the module name as it qualifies a tool name.
func prefix(module string) string {
	p := sanitize(module)
	if len(p) > maxPrefixLen {
		p = p[:maxPrefixLen]
	}
	return p
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
