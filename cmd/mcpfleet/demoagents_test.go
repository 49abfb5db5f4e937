package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/demo"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// The demo readies its registered servers for agents: an agent's SDK client on /mcp (with a second
// administrator's key, as the demo's agent key is) lists every demo tool, qualified by module name, and
// can call the flaky server's tool; only the calendar server requires approval.
func TestDemoReadyForAgents(t *testing.T) {
	env := servicetest.Start(t, servicetest.MCPClient)
	ctx := context.Background()
	servers, err := demo.StartServers(ctx, demo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Close()
		}
	})
	base := env.Svc.URL()
	modules := fleetclient.New(base, env.Keys[persistence.RoleModule])
	for _, s := range servers {
		if _, err := modules.Register(ctx, s.RegisterRequest()); err != nil {
			t.Fatalf("register %s: %v", s.Name, err)
		}
	}
	var out strings.Builder
	readyForAgents(ctx, base, env.Keys[persistence.RoleAdmin], env.SecondAdminKey(), env.Keys[persistence.RoleOperator], servers, &out)
	if !strings.Contains(out.String(), "agents: every demo tool is enabled for /mcp") {
		t.Fatalf("readyForAgents said %q", out.String())
	}

	c := mcp.NewClient(&mcp.Implementation{Name: "demo-agent", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{env.SecondAdminKey()}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // with a session, as the Inspector CLI
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names []string
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"calendar.create_event", "calendar.list_events", "flaky.echo", "notes.append_note", "notes.search_notes", "weather.get_forecast"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list = %v, want %v", names, want)
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "flaky.echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "hello" {
		t.Fatalf("flaky.echo: %v %+v", err, res)
	}
	r := env.Do("GET", "/v1/mcp/servers", env.Keys[persistence.RoleOperator], nil)
	var page struct {
		Servers []struct {
			Module           string `json:"module_name"`
			RequiresApproval bool   `json:"requires_approval"`
			DataClass        string `json:"data_class"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	for _, srv := range page.Servers {
		if srv.RequiresApproval != (srv.Module == demoApprovalServer) || srv.DataClass != "internal" {
			t.Errorf("%s: requires_approval %v, data_class %q", srv.Module, srv.RequiresApproval, srv.DataClass)
		}
	}
}
