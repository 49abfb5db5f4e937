package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

func TestCallTool(t *testing.T) {
	tests := []struct {
		tool    string
		want    []mcpclient.Block
		isError bool
	}{
		{tool: "text", want: []mcpclient.Block{{Type: "text", Text: "hello from text"}}},
		{tool: "mixed", want: []mcpclient.Block{
			{Type: "text", Text: "before"}, {Type: "image"}, {Type: "audio"},
			{Type: "resource"}, {Type: "resource_link"}, {Type: "text", Text: "after"},
		}},
		{tool: "image_only", want: []mcpclient.Block{{Type: "image"}}},
		{tool: "is_error", want: []mcpclient.Block{{Type: "text", Text: "boom"}}, isError: true},
	}
	s := mcptest.Tools(t)
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			c, rec := newClient(t, s.URL)
			got, err := c.CallTool(testContext(t), tt.tool, nil)
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Content); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			if got.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v", got.IsError, tt.isError)
			}
			if n := s.Calls(tt.tool); n != 1 {
				t.Errorf("%s arrived %d times, want exactly 1", tt.tool, n)
			}
			contacts := rec.all()
			if len(contacts) != 1 || contacts[0].latency != got.Latency || got.Latency <= 0 {
				t.Errorf("recorded %+v, want one contact with the call's latency %v", contacts, got.Latency)
			}
		})
	}
}

func TestCallToolSendsArguments(t *testing.T) {
	s := mcptest.Legacy(t)
	c, _ := newClient(t, s.URL)
	got, err := c.CallTool(testContext(t), "get_weather", map[string]any{"city": "Oslo", "days": 3})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	want := []mcpclient.Block{{Type: "text", Text: `sunny; arguments {"city":"Oslo","days":3}`}}
	if diff := cmp.Diff(want, got.Content); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
	if n := s.Calls("get_weather"); n != 1 {
		t.Errorf("get_weather arrived %d times, want 1", n)
	}
}

// The 60 KB answer arrives whole; shaping cuts it to the model's budget.
func TestCallToolBigText(t *testing.T) {
	s := mcptest.Tools(t)
	c, _ := newClient(t, s.URL)
	got, err := c.CallTool(testContext(t), "big_text", nil)
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if len(got.Content) != 1 || got.Content[0].Text != mcptest.BigText() {
		t.Fatalf("big_text did not arrive whole")
	}
	shaped := mcpclient.ShapeResult("tools", got)
	if !shaped.Truncated || len(shaped.Content) > mcpclient.MaxShapedBytes {
		t.Errorf("shaped to %d bytes, truncated=%v; want at most %d, truncated", len(shaped.Content), shaped.Truncated, mcpclient.MaxShapedBytes)
	}
}

// Cancelling a call ends it promptly, the server is told with
// notifications/cancelled naming the call's request id, and the tool's
// handler sees its context end — on a stateless 2026-07-28 server (where the
// HTTP request closing also cancels) and on a stateful one (where only the
// notification can).
func TestCallToolCancellation(t *testing.T) {
	servers := map[string]func(testing.TB) *mcptest.Server{
		"stateless": mcptest.Tools,
		"stateful":  mcptest.ToolsStateful,
	}
	for name, server := range servers {
		t.Run(name, func(t *testing.T) {
			s := server(t)
			c, rec := newClient(t, s.URL) // default 15 s deadline
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			type outcome struct {
				err     error
				elapsed time.Duration
			}
			done := make(chan outcome, 1)
			go func() {
				_, err := c.CallTool(ctx, "hang", nil)
				done <- outcome{err: err}
			}()
			call, err := s.WaitFor(testContext(t), func(r mcptest.Received) bool {
				return r.Method == "tools/call" && r.ToolName() == "hang"
			})
			if err != nil {
				t.Fatalf("the call never arrived: %v", err)
			}
			select {
			case <-s.HandlerStarted():
			case <-testContext(t).Done():
				t.Fatal("the tool handler never started")
			}
			cancelled := time.Now()
			cancel()
			var got outcome
			select {
			case got = <-done:
				got.elapsed = time.Since(cancelled)
			case <-time.After(5 * time.Second):
				t.Fatal("CallTool did not return within 5 s of cancellation")
			}
			wantClass(t, got.err, mcpclient.ClassTimeout)
			if got.elapsed > 3*time.Second {
				t.Errorf("CallTool returned %v after cancellation", got.elapsed)
			}
			note, err := s.WaitFor(testContext(t), func(r mcptest.Received) bool {
				return r.Method == "notifications/cancelled"
			})
			if err != nil {
				t.Fatalf("the server never received notifications/cancelled: %v", err)
			}
			if !bytes.Equal(note.RequestID(), call.ID) {
				t.Errorf("notifications/cancelled names request %s, want the call's id %s", note.RequestID(), call.ID)
			}
			select {
			case <-s.HandlerCancelled():
			case <-testContext(t).Done():
				t.Fatal("the tool handler's context was never cancelled")
			}
			if n := s.Calls("hang"); n != 1 {
				t.Errorf("hang arrived %d times, want 1", n)
			}
			if n := len(rec.all()); n != 0 {
				t.Errorf("a cancelled call recorded %d contacts", n)
			}
		})
	}
}

func TestCallToolDeadline(t *testing.T) {
	s := mcptest.Tools(t)
	c, _ := newClient(t, s.URL, withTimeout(300*time.Millisecond))
	_, err := c.CallTool(testContext(t), "hang", nil)
	e := wantClass(t, err, mcpclient.ClassTimeout)
	if !strings.Contains(e.Reason, "300ms") {
		t.Errorf("reason %q does not state the deadline", e.Reason)
	}
	if _, err := s.WaitFor(testContext(t), func(r mcptest.Received) bool { return r.Method == "notifications/cancelled" }); err != nil {
		t.Errorf("no notifications/cancelled after the deadline: %v", err)
	}
}

func TestCallToolStructuredContentIsKept(t *testing.T) {
	// The Go SDK echo tool returns no structured content; the field stays
	// empty rather than "null".
	s := mcptest.Tools(t)
	c, _ := newClient(t, s.URL)
	got, err := c.CallTool(testContext(t), "echo", map[string]any{"text": "hi"})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if got.StructuredContent != nil && !json.Valid(got.StructuredContent) {
		t.Errorf("structured content %q is not JSON", got.StructuredContent)
	}
	if diff := cmp.Diff([]mcpclient.Block{{Type: "text", Text: "echo: hi"}}, got.Content); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
}
