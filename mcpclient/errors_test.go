package mcpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// closedEndpoint returns the URL of a loopback port nothing listens on.
func closedEndpoint(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/mcp"
	srv.Close()
	return url
}

// Every operation fails with the class of the failure, whichever of the
// three operations meets it.
func TestFailureClasses(t *testing.T) {
	const token = "s3cret-token-value"
	tests := []struct {
		name   string
		server func(testing.TB) string
		mods   []func(*mcpclient.Config)
		want   mcpclient.Class
	}{
		{
			name:   "connection refused is transport",
			server: closedEndpoint,
			want:   mcpclient.ClassTransport,
		},
		{
			name:   "HTTP 500 is transport",
			server: func(t testing.TB) string { return mcptest.HTTP500(t).URL },
			want:   mcpclient.ClassTransport,
		},
		{
			name: "redirect to another host is transport",
			server: func(t testing.TB) string {
				return mcptest.Redirect(t, mcptest.Modern(t).URL).URL
			},
			want: mcpclient.ClassTransport,
		},
		{
			name:   "no answer before the deadline is timeout",
			server: func(t testing.TB) string { return mcptest.Slow(t).URL },
			mods:   []func(*mcpclient.Config){withTimeout(200 * time.Millisecond)},
			want:   mcpclient.ClassTimeout,
		},
		{
			name:   "missing bearer token is auth",
			server: func(t testing.TB) string { return mcptest.Bearer(t, token).URL },
			want:   mcpclient.ClassAuth,
		},
		{
			name:   "wrong bearer token is auth",
			server: func(t testing.TB) string { return mcptest.Bearer(t, token).URL },
			mods:   []func(*mcpclient.Config){withAuth(mcpclient.Auth{Mode: mcpclient.AuthBearer, Credential: "wrong-" + token})},
			want:   mcpclient.ClassAuth,
		},
		{
			name:   "wrong header credential (403) is auth",
			server: func(t testing.TB) string { return mcptest.Header(t, "X-Api-Key", token).URL },
			mods:   []func(*mcpclient.Config){withAuth(mcpclient.Auth{Mode: mcpclient.AuthHeader, HeaderName: "X-Api-Key", Credential: "wrong-" + token})},
			want:   mcpclient.ClassAuth,
		},
		{
			name:   "text/html is protocol",
			server: func(t testing.TB) string { return mcptest.NotJSONRPC(t).URL },
			want:   mcpclient.ClassProtocol,
		},
		{
			name: "unsupported protocol version is protocol",
			server: func(t testing.TB) string {
				return mcptest.LegacyWith(t, mcptest.LegacyConfig{ProtocolVersion: "1999-01-01"}).URL
			},
			want: mcpclient.ClassProtocol,
		},
		{
			name:   "invalid JSON is invalid_response",
			server: func(t testing.TB) string { return mcptest.Garbage(t).URL },
			want:   mcpclient.ClassInvalidResponse,
		},
		{
			name:   "ill-formed result is invalid_response",
			server: func(t testing.TB) string { return mcptest.IllFormed(t).URL },
			want:   mcpclient.ClassInvalidResponse,
		},
		{
			name:   "answer over the response cap is invalid_response",
			server: func(t testing.TB) string { return mcptest.Modern(t).URL },
			mods: []func(*mcpclient.Config){func(c *mcpclient.Config) {
				c.MaxResponseBytes = 64 // no handshake answer fits
			}},
			want: mcpclient.ClassInvalidResponse,
		},
	}
	ops := map[string]func(context.Context, *mcpclient.Client) error{
		"Handshake": func(ctx context.Context, c *mcpclient.Client) error { _, err := c.Handshake(ctx); return err },
		"ListTools": func(ctx context.Context, c *mcpclient.Client) error { _, err := c.ListTools(ctx); return err },
		"CallTool": func(ctx context.Context, c *mcpclient.Client) error {
			_, err := c.CallTool(ctx, "echo", map[string]any{"text": "x"})
			return err
		},
	}
	for _, tt := range tests {
		for opName, op := range ops {
			t.Run(tt.name+"/"+opName, func(t *testing.T) {
				c, rec := newClient(t, tt.server(t), tt.mods...)
				e := wantClass(t, op(testContext(t), c), tt.want)
				if strings.Contains(e.Reason, token) || strings.Contains(e.Error(), token) {
					t.Errorf("reason %q contains the credential", e.Reason)
				}
				if n := len(rec.all()); n != 0 {
					t.Errorf("a failed operation recorded %d contacts, want 0", n)
				}
			})
		}
	}
}

func TestAuthSucceedsWithTheRightCredential(t *testing.T) {
	const token = "s3cret-token-value"
	t.Run("bearer", func(t *testing.T) {
		s := mcptest.Bearer(t, token)
		c, _ := newClient(t, s.URL, withAuth(mcpclient.Auth{Mode: mcpclient.AuthBearer, Credential: token}))
		if _, err := c.ListTools(testContext(t)); err != nil {
			t.Fatalf("ListTools: %v", err)
		}
	})
	t.Run("header", func(t *testing.T) {
		s := mcptest.Header(t, "X-Api-Key", token)
		c, _ := newClient(t, s.URL, withAuth(mcpclient.Auth{Mode: mcpclient.AuthHeader, HeaderName: "x-api-key", Credential: token}))
		if _, err := c.CallTool(testContext(t), "echo", map[string]any{"text": "hi"}); err != nil {
			t.Fatalf("CallTool: %v", err)
		}
	})
}

func TestJSONRPCErrorIsProtocol(t *testing.T) {
	t.Run("modern", func(t *testing.T) {
		s := mcptest.Tools(t)
		c, rec := newClient(t, s.URL)
		_, err := c.CallTool(testContext(t), "no_such_tool", nil)
		e := wantClass(t, err, mcpclient.ClassProtocol)
		if !strings.Contains(e.Reason, "JSON-RPC error") {
			t.Errorf("reason %q does not mention the JSON-RPC error", e.Reason)
		}
		if n := len(rec.all()); n != 0 {
			t.Errorf("recorded %d contacts for a failed call, want 0", n)
		}
	})
	t.Run("legacy", func(t *testing.T) {
		s := mcptest.Legacy(t)
		c, _ := newClient(t, s.URL)
		_, err := c.CallTool(testContext(t), "no_such_tool", nil)
		e := wantClass(t, err, mcpclient.ClassProtocol)
		if !strings.Contains(e.Reason, "Unknown tool") {
			t.Errorf("reason %q does not quote the server's message", e.Reason)
		}
	})
}

func TestOversizeAnswerIsInvalidResponse(t *testing.T) {
	s := mcptest.Tools(t)
	c, _ := newClient(t, s.URL) // default cap: 2 MiB
	_, err := c.CallTool(testContext(t), "huge", nil)
	e := wantClass(t, err, mcpclient.ClassInvalidResponse)
	if !strings.Contains(e.Reason, "2 MiB") {
		t.Errorf("reason %q does not name the cap", e.Reason)
	}
	if got := s.Calls("huge"); got != 1 {
		t.Errorf("huge called %d times, want 1", got)
	}
}

func TestDroppedConnectionIsTransport(t *testing.T) {
	s := mcptest.Tools(t)
	c, _ := newClient(t, s.URL)
	_, err := c.CallTool(testContext(t), "drop", nil)
	wantClass(t, err, mcpclient.ClassTransport)
	if got := s.Calls("drop"); got != 1 {
		t.Errorf("drop arrived %d times, want exactly 1 (never retried)", got)
	}
}

func TestDialPolicyIsEnforced(t *testing.T) {
	s := mcptest.Modern(t)
	// "localhost" resolves to loopback, and neither it nor its addresses
	// are allowed: New accepts the name (it does not resolve), the dial
	// refuses it.
	url := strings.Replace(s.URL, "127.0.0.1", "localhost", 1)
	c, rec := newClient(t, url, func(c *mcpclient.Config) { c.AllowHosts = nil })
	_, err := c.Handshake(testContext(t))
	e := wantClass(t, err, mcpclient.ClassTransport)
	if !errors.Is(err, mcpclient.ErrEndpointRefused) {
		t.Errorf("error %v does not wrap ErrEndpointRefused", err)
	}
	if !strings.Contains(e.Reason, "loopback") {
		t.Errorf("reason %q does not say why", e.Reason)
	}
	if len(s.Received()) != 0 || len(rec.all()) != 0 {
		t.Errorf("the server was reached")
	}
}

func TestCancelledContextIsTimeout(t *testing.T) {
	s := mcptest.Slow(t)
	c, _ := newClient(t, s.URL)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Handshake(ctx)
		done <- err
	}()
	if _, err := s.WaitFor(testContext(t), func(mcptest.Received) bool { return true }); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-done
	wantClass(t, err, mcpclient.ClassTimeout)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
}
