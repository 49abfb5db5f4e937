package demo_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/demo"
	"github.com/mcpfleet/mcpfleet/internal/wait"
)

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startServers(t *testing.T, ctx context.Context) []*demo.Server {
	t.Helper()
	servers, err := demo.StartServers(ctx, demo.Options{})
	if err != nil {
		t.Fatalf("StartServers: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				t.Errorf("Close %s: %v", s.Name, err)
			}
		}
	})
	return servers
}

func connect(t *testing.T, ctx context.Context, endpoint string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-test", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// asJSON normalises a schema (raw bytes or a decoded map) for comparison.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

func TestServersAnswerHandshakeAndToolsList(t *testing.T) {
	ctx := testContext(t)
	servers := startServers(t, ctx)
	var names []string
	for _, s := range servers {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff(demo.Names(), names); diff != "" {
		t.Fatalf("servers (-want +got):\n%s", diff)
	}
	for _, s := range servers {
		t.Run(s.Name, func(t *testing.T) {
			if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") || !strings.HasSuffix(s.Endpoint, "/mcp") {
				t.Errorf("Endpoint = %q, want http://127.0.0.1:PORT/mcp", s.Endpoint)
			}
			cs := connect(t, ctx, s.Endpoint)
			init := cs.InitializeResult()
			if init == nil || init.ServerInfo == nil || init.ServerInfo.Name != s.Name || init.ServerInfo.Version != s.Version {
				t.Fatalf("initialize result = %+v, want server %s %s", init, s.Name, s.Version)
			}
			if !slices.Contains(mcp.SupportedProtocolVersions(), init.ProtocolVersion) {
				t.Errorf("negotiated protocol %q is not one the SDK supports", init.ProtocolVersion)
			}
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			if len(res.Tools) != len(s.Tools) {
				t.Fatalf("tools/list has %d tools, Server.Tools %d", len(res.Tools), len(s.Tools))
			}
			for i, tool := range res.Tools {
				adv := s.Tools[i]
				if tool.Name != adv.Name || tool.Description != adv.Description {
					t.Errorf("tool %d = %s %q, advertised %s %q", i, tool.Name, tool.Description, adv.Name, adv.Description)
				}
				if diff := cmp.Diff(asJSON(t, adv.InputSchema), asJSON(t, tool.InputSchema)); diff != "" {
					t.Errorf("tool %s input schema (-advertised +tools/list):\n%s", tool.Name, diff)
				}
			}
		})
	}
	reg := servers[0].RegisterRequest()
	if reg.ModuleName != "calendar" || reg.Endpoint != servers[0].Endpoint ||
		!slices.Equal(reg.SupportedProtocols, []string{demo.ProtocolVersion()}) || len(reg.CapabilityAdvertisement.Tools) != 2 {
		t.Errorf("RegisterRequest = %+v", reg)
	}
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content %T, want text only", c)
		}
		parts = append(parts, tc.Text)
	}
	return strings.Join(parts, "\n")
}

func TestToolCalls(t *testing.T) {
	ctx := testContext(t)
	servers := startServers(t, ctx)
	sessions := map[string]*mcp.ClientSession{}
	for _, s := range servers {
		sessions[s.Name] = connect(t, ctx, s.Endpoint)
	}
	today := time.Now().Format("2006-01-02")
	tests := []struct {
		server, tool string
		args         map[string]any
		wantErr      bool
		want         []string // substrings of the text answer
	}{
		{server: "calendar", tool: "list_events", args: map[string]any{}, want: []string{"Stand-up", "Release planning"}},
		{server: "calendar", tool: "create_event", args: map[string]any{"title": "Chaos drill", "date": today, "time": "16:00"},
			want: []string{`"Chaos drill"`, "16:00", "30 min", "4 events"}},
		{server: "calendar", tool: "list_events", args: map[string]any{"date": today}, want: []string{"Stand-up", "16:00 Chaos drill"}},
		{server: "calendar", tool: "create_event", args: map[string]any{"title": "x", "date": "tomorrow"}, wantErr: true,
			want: []string{"not YYYY-MM-DD"}},
		{server: "calendar", tool: "create_event", args: map[string]any{"date": today}, wantErr: true},
		{server: "weather", tool: "get_forecast", args: map[string]any{"city": "Berlin", "days": 2},
			want: []string{"Forecast for Berlin", today, "°C"}},
		{server: "weather", tool: "get_forecast", args: map[string]any{"city": "Berlin", "days": 9}, wantErr: true},
		{server: "notes", tool: "search_notes", args: map[string]any{"query": "HEARTBEAT"}, want: []string{"Heartbeat policy"}},
		{server: "notes", tool: "append_note", args: map[string]any{"title": "Demo", "text": "mcpfleet watches the fleet"},
			want: []string{`#4 "Demo"`}},
		{server: "notes", tool: "search_notes", args: map[string]any{"query": "watches"}, want: []string{"#4 Demo"}},
		{server: "notes", tool: "search_notes", args: map[string]any{"query": "zebra"}, want: []string{"No note mentions"}},
		{server: "flaky", tool: "echo", args: map[string]any{"text": "ping"}, want: []string{"ping"}},
	}
	for _, tt := range tests {
		res, err := sessions[tt.server].CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
		if err != nil {
			t.Fatalf("%s/%s(%v): %v", tt.server, tt.tool, tt.args, err)
		}
		text := textOf(t, res)
		if res.IsError != tt.wantErr {
			t.Errorf("%s/%s(%v): IsError = %v, want %v (%q)", tt.server, tt.tool, tt.args, res.IsError, tt.wantErr, text)
		}
		for _, w := range tt.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s/%s(%v) = %q, want it to contain %q", tt.server, tt.tool, tt.args, text, w)
			}
		}
	}

	// The forecast is stable: the same question gets the same answer.
	args := &mcp.CallToolParams{Name: "get_forecast", Arguments: map[string]any{"city": "Oslo"}}
	a, errA := sessions["weather"].CallTool(ctx, args)
	b, errB := sessions["weather"].CallTool(ctx, args)
	if errA != nil || errB != nil {
		t.Fatalf("get_forecast: %v, %v", errA, errB)
	}
	if textOf(t, a) != textOf(t, b) || strings.Count(textOf(t, a), "\n") != 3 {
		t.Errorf("forecasts differ or do not have 3 days:\n%s\n---\n%s", textOf(t, a), textOf(t, b))
	}
}

func TestStartServersOptions(t *testing.T) {
	ctx := testContext(t)
	if _, err := demo.StartServers(ctx, demo.Options{Names: []string{"calendar", "nope"}}); err == nil {
		t.Error("unknown server name: err = nil")
	}
	if _, err := demo.StartServers(ctx, demo.Options{Host: "0.0.0.0"}); err == nil {
		t.Error("non-loopback host: err = nil")
	}
	servers, err := demo.StartServers(ctx, demo.Options{Names: []string{"weather"}})
	if err != nil {
		t.Fatalf("StartServers: %v", err)
	}
	if len(servers) != 1 || servers[0].Name != "weather" {
		t.Fatalf("servers = %v", servers)
	}
	if err := servers[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := servers[0].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-test", Version: "1.0.0"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if cs, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: servers[0].Endpoint, MaxRetries: -1}, nil); err == nil {
		_ = cs.Close()
		t.Error("connect after Close succeeded")
	}
}

func TestServersCloseWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	servers, err := demo.StartServers(ctx, demo.Options{Names: []string{"flaky"}})
	if err != nil {
		t.Fatalf("StartServers: %v", err)
	}
	cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-test", Version: "1.0.0"}, nil)
	wait.For(t, "the server to stop answering once its context ended", 5*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(testContext(t), time.Second)
		defer ccancel()
		cs, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: servers[0].Endpoint, MaxRetries: -1}, nil)
		if err != nil {
			return true
		}
		_ = cs.Close()
		return false
	})
}
