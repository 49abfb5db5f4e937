package mcpclient_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

func text(s string) mcpclient.Block  { return mcpclient.Block{Type: "text", Text: s} }
func block(t string) mcpclient.Block { return mcpclient.Block{Type: t} }

func TestShapeResult(t *testing.T) {
	tests := []struct {
		name string
		in   mcpclient.ToolResult
		want mcpclient.Shaped
	}{
		{
			name: "text only",
			in:   mcpclient.ToolResult{Content: []mcpclient.Block{text("a"), text("b")}},
			want: mcpclient.Shaped{Content: "a\nb"},
		},
		{
			name: "a NUL is replaced",
			in:   mcpclient.ToolResult{Content: []mcpclient.Block{text("a\x00b"), text("\x00")}},
			want: mcpclient.Shaped{Content: "a\uFFFDb\n\uFFFD"},
		},
		{
			name: "mixed",
			in: mcpclient.ToolResult{Content: []mcpclient.Block{
				text("before"), block("image"), block("audio"), block("resource"), block("resource_link"), text("after"),
			}},
			want: mcpclient.Shaped{
				Content: "[mcpfleet: dropped 4 non-text blocks from the answer: 1 image, 1 audio, 1 resource, 1 resource_link]\nbefore\nafter",
				Dropped: map[string]int{"image": 1, "audio": 1, "resource": 1, "resource_link": 1},
			},
		},
		{
			name: "the brief's example",
			in:   mcpclient.ToolResult{Content: []mcpclient.Block{block("resource_link"), text("x"), block("image")}},
			want: mcpclient.Shaped{
				Content: "[mcpfleet: dropped 2 non-text blocks from the answer: 1 image, 1 resource_link]\nx",
				Dropped: map[string]int{"image": 1, "resource_link": 1},
			},
		},
		{
			name: "only an image is not empty",
			in:   mcpclient.ToolResult{Content: []mcpclient.Block{block("image")}},
			want: mcpclient.Shaped{
				Content: "[mcpfleet: dropped 1 non-text block from the answer: 1 image]",
				Dropped: map[string]int{"image": 1},
			},
		},
		{
			name: "unknown kinds count as other",
			in:   mcpclient.ToolResult{Content: []mcpclient.Block{block("other"), block("tool_use"), block("image"), block("image")}},
			want: mcpclient.Shaped{
				Content: "[mcpfleet: dropped 4 non-text blocks from the answer: 2 image, 2 other]",
				Dropped: map[string]int{"image": 2, "other": 2},
			},
		},
		{
			name: "isError is kept",
			in:   mcpclient.ToolResult{IsError: true, Content: []mcpclient.Block{text("boom")}},
			want: mcpclient.Shaped{Content: "boom", IsError: true},
		},
		{
			name: "no content at all says so",
			in:   mcpclient.ToolResult{},
			want: mcpclient.Shaped{Content: `[mcpfleet: server "weather" returned no content]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, mcpclient.ShapeResult("weather", tt.in)); diff != "" {
				t.Errorf("ShapeResult (-want +got):\n%s", diff)
			}
		})
	}
}

// A 60 KB answer with an image: the note survives the cut, the content is
// at most 50,000 bytes, and it is cut on a UTF-8 boundary.
func TestShapeResultCut(t *testing.T) {
	big := mcptest.BigText()
	got := mcpclient.ShapeResult("tools", mcpclient.ToolResult{Content: []mcpclient.Block{text(big), block("image")}})
	const note = "[mcpfleet: dropped 1 non-text block from the answer: 1 image]\n"
	if !strings.HasPrefix(got.Content, note) {
		t.Errorf("content does not open with the note: %.100q", got.Content)
	}
	if len(got.Content) > mcpclient.MaxShapedBytes || len(got.Content) < mcpclient.MaxShapedBytes-utf8.UTFMax {
		t.Errorf("content is %d bytes, want just under %d", len(got.Content), mcpclient.MaxShapedBytes)
	}
	if !utf8.ValidString(got.Content) {
		t.Error("content was cut inside a rune")
	}
	if !got.Truncated {
		t.Error("Truncated = false")
	}
	if !strings.HasPrefix(big, strings.TrimPrefix(got.Content, note)) {
		t.Error("the text kept is not a prefix of the answer")
	}
}

func TestShapeResultCutsOnRuneBoundary(t *testing.T) {
	// Each "✓" is 3 bytes; 50,000 is not a multiple of 3.
	s := strings.Repeat("✓", mcpclient.MaxShapedBytes)
	got := mcpclient.ShapeResult("x", mcpclient.ToolResult{Content: []mcpclient.Block{text(s)}})
	if !utf8.ValidString(got.Content) || len(got.Content) != 49998 || !got.Truncated {
		t.Errorf("got %d bytes, valid=%v, truncated=%v; want 49998, valid, truncated", len(got.Content), utf8.ValidString(got.Content), got.Truncated)
	}
}

func TestShapeResultExactlyAtLimitIsNotCut(t *testing.T) {
	s := strings.Repeat("a", mcpclient.MaxShapedBytes)
	got := mcpclient.ShapeResult("x", mcpclient.ToolResult{Content: []mcpclient.Block{text(s)}})
	if got.Content != s || got.Truncated {
		t.Errorf("an answer of exactly %d bytes was changed", mcpclient.MaxShapedBytes)
	}
}
