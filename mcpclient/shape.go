package mcpclient

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxShapedBytes is the most content [ShapeResult] returns.
const MaxShapedBytes = 50000

// droppedOrder is the order dropped block types are listed in the note.
var droppedOrder = []string{"image", "audio", "resource", "resource_link", "other"}

// Shaped is a tool result made fit for a model: text only, with a leading
// note about anything dropped, and bounded in size.
type Shaped struct {
	// Content is the note line (if anything was dropped), then the text
	// blocks joined by newlines (NUL replaced with U+FFFD), cut to at most MaxShapedBytes bytes on a
	// UTF-8 boundary.
	Content string
	// IsError is the result's isError, unchanged.
	IsError bool
	// Dropped counts the non-text blocks dropped, by type: "image",
	// "audio", "resource", "resource_link", "other". Nil when none were.
	Dropped map[string]int
	// Truncated reports that Content was cut.
	Truncated bool
}

// ShapeResult keeps the text of res and drops every other block. When
// blocks were dropped, the content opens with one line saying how many and
// of which types, e.g.
//
//	[mcpfleet: dropped 2 non-text blocks from the answer: 1 image, 1 resource_link]
//
// so a model reading a partial answer is told it is partial, and an answer
// that held only an image does not read as empty. The note comes first
// because the content is then cut to MaxShapedBytes, and the cut must not
// take the note. An answer with no content at all says so, naming server
// (the operator's name for the server, not the server's own). A NUL character
// (U+0000) in the text is replaced with U+FFFD, the replacement character.
func ShapeResult(server string, res ToolResult) Shaped {
	out := Shaped{IsError: res.IsError}
	var texts []string
	dropped := 0
	for _, b := range res.Content {
		if b.Type == "text" {
			texts = append(texts, b.Text)
			continue
		}
		t := b.Type
		switch t {
		case "image", "audio", "resource", "resource_link":
		default:
			t = "other"
		}
		if out.Dropped == nil {
			out.Dropped = map[string]int{}
		}
		out.Dropped[t]++
		dropped++
	}
	var b strings.Builder
	if dropped > 0 {
		parts := make([]string, 0, len(droppedOrder))
		for _, t := range droppedOrder {
			if n := out.Dropped[t]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, t))
			}
		}
		noun := "blocks"
		if dropped == 1 {
			noun = "block"
		}
		fmt.Fprintf(&b, "[mcpfleet: dropped %d non-text %s from the answer: %s]", dropped, noun, strings.Join(parts, ", "))
		if len(texts) > 0 {
			b.WriteByte('\n')
		}
	} else if len(texts) == 0 {
		fmt.Fprintf(&b, "[mcpfleet: server %q returned no content]", server)
	}
	b.WriteString(strings.Join(texts, "\n"))
	// PostgreSQL text cannot hold a NUL: an answer with one would be an answer the call cannot record.
	out.Content = strings.ReplaceAll(b.String(), "\x00", "\uFFFD")
	if len(out.Content) > MaxShapedBytes {
		cut := MaxShapedBytes
		for cut > 0 && !utf8.RuneStart(out.Content[cut]) {
			cut--
		}
		out.Content = out.Content[:cut]
		out.Truncated = true
	}
	return out
}
