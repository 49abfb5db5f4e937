package mcpclient_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient"
)

func TestNewRejectsBadConfig(t *testing.T) {
	const secret = "hunter2-secret"
	tests := []struct {
		name     string
		cfg      mcpclient.Config
		refused  bool // also an endpoint policy refusal
		contains string
	}{
		{name: "no endpoint", cfg: mcpclient.Config{}, refused: true},
		{name: "ftp", cfg: mcpclient.Config{Endpoint: "ftp://mcp.example.com/"}, refused: true},
		{name: "userinfo", cfg: mcpclient.Config{Endpoint: "https://bob:" + secret + "@mcp.example.com/"}, refused: true},
		{name: "loopback literal not allowed", cfg: mcpclient.Config{Endpoint: "http://127.0.0.1:8080/mcp"}, refused: true},
		{name: "unknown auth mode", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: "basic", Credential: secret}}, contains: `"basic"`},
		{name: "credential without mode", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Credential: secret}}},
		{name: "bearer without credential", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: mcpclient.AuthBearer}}},
		{name: "header without name", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: mcpclient.AuthHeader, Credential: secret}}},
		{name: "header name invalid", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: mcpclient.AuthHeader, HeaderName: "X Key", Credential: secret}}},
		{name: "header reserved", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: mcpclient.AuthHeader, HeaderName: "mcp-session-id", Credential: secret}}},
		{name: "credential with newline", cfg: mcpclient.Config{Endpoint: "https://mcp.example.com/", Auth: mcpclient.Auth{Mode: mcpclient.AuthBearer, Credential: "a\r\nX-Evil: 1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mcpclient.New(tt.cfg, &recorder{})
			if !errors.Is(err, mcpclient.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if got := errors.Is(err, mcpclient.ErrEndpointRefused); got != tt.refused {
				t.Errorf("errors.Is(err, ErrEndpointRefused) = %v, want %v (err %v)", got, tt.refused, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the credential", err)
			}
			if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not mention %s", err, tt.contains)
			}
		})
	}
}

func TestNewAcceptsGoodConfig(t *testing.T) {
	for _, cfg := range []mcpclient.Config{
		{Endpoint: "https://mcp.example.com/mcp"},
		{Endpoint: "HTTPS://mcp.example.com/mcp#frag", Auth: mcpclient.Auth{Mode: mcpclient.AuthBearer, Credential: "t"}},
		{Endpoint: "http://10.1.2.3:9000/mcp", AllowHosts: []string{"10.0.0.0/8"}, Auth: mcpclient.Auth{Mode: mcpclient.AuthHeader, HeaderName: "X-Api-Key", Credential: "k"}},
		{Endpoint: "http://internal.example/mcp"}, // a name is checked when dialled
	} {
		if _, err := mcpclient.New(cfg, &recorder{}); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}
