package mcpclient_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// fakeResolver answers from a table; a name not in it does not resolve.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[strings.TrimSuffix(strings.ToLower(host), ".")]
	if !ok {
		return nil, errors.New("no such host")
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

var names = fakeResolver{
	"public.example":    {"93.184.216.34", "2606:2800:220:1::1"},
	"private.example":   {"10.0.0.7"},
	"mixed.example":     {"93.184.216.34", "192.168.1.1"},
	"loopback.example":  {"127.0.0.1"},
	"linklocal.example": {"169.254.169.254"},
}

func TestEndpointPolicy(t *testing.T) {
	tests := []struct {
		raw   string
		allow []string
		ok    bool
		why   string // a word the refusal must contain
	}{
		{raw: "https://public.example/mcp", ok: true},
		{raw: "http://public.example:8080/mcp", ok: true},
		{raw: "https://93.184.216.34/mcp", ok: true},
		{raw: "ftp://public.example/", why: "scheme"},
		{raw: "public.example/mcp", why: "scheme"},
		{raw: "https://user:pw@public.example/", why: "password"},
		{raw: "https://user@public.example/", why: "user name"},
		{raw: "https:///mcp", why: "no host"},
		{raw: "https://public.example:99999/", why: "port"},
		{raw: "https://nowhere.example/", why: "resolved"},
		{raw: "http://127.0.0.1:8080/", why: "loopback"},
		{raw: "http://127.0.0.1:8080/", allow: []string{"127.0.0.1"}, ok: true},
		{raw: "http://[::1]/", why: "loopback"},
		{raw: "http://[::1]/", allow: []string{"::1"}, ok: true},
		{raw: "http://[::ffff:127.0.0.1]/", why: "loopback"},
		{raw: "http://0.0.0.0/", why: "unspecified"},
		{raw: "http://[::]/", why: "unspecified"},
		{raw: "http://10.1.2.3/", why: "private"},
		{raw: "http://172.16.0.1/", why: "private"},
		{raw: "http://192.168.0.1/", why: "private"},
		{raw: "http://10.1.2.3/", allow: []string{"10.0.0.0/8"}, ok: true},
		{raw: "http://[fd00::1]/", why: "private"},
		{raw: "http://100.64.0.1/", why: "CGNAT"},
		{raw: "http://169.254.169.254/latest/meta-data", why: "link-local"},
		{raw: "http://[fe80::1]/", why: "link-local"},
		{raw: "http://[64:ff9b::7f00:1]/", why: "loopback"},
		{raw: "http://224.0.0.1/", why: "link-local"},
		{raw: "http://239.1.2.3/", why: "multicast"},
		{raw: "http://private.example/", why: "private"},
		{raw: "http://private.example/", allow: []string{"private.example"}, ok: true},
		{raw: "http://PRIVATE.example./", allow: []string{"private.example"}, ok: true},
		{raw: "http://private.example/", allow: []string{"10.0.0.7"}, ok: true},
		{raw: "http://private.example/", allow: []string{"other.example"}, why: "allow-list"},
		{raw: "http://mixed.example/", why: "192.168.1.1"},
		{raw: "http://loopback.example/", why: "loopback"},
		{raw: "http://linklocal.example/", why: "link-local"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			p := mcpclient.EndpointPolicy{Allow: tt.allow, Resolver: names}
			u, err := p.Check(testContext(t), tt.raw)
			if tt.ok {
				if err != nil || u == nil {
					t.Fatalf("Check(%q) = %v, %v; want allowed", tt.raw, u, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%q) allowed it; want refused (%s)", tt.raw, tt.why)
			}
			if !errors.Is(err, mcpclient.ErrEndpointRefused) {
				t.Errorf("error %v does not wrap ErrEndpointRefused", err)
			}
			// How the URL is written is the caller's own business; what the host is or resolves to is
			// not (an endpoint_refused for a module key hides it).
			var ee *mcpclient.EndpointError
			writing := map[string]bool{"scheme": true, "password": true, "user name": true, "no host": true, "port": true}[tt.why]
			if !errors.As(err, &ee) || ee.Addressed() == writing {
				t.Errorf("error %v: Addressed() = %v, want %v", err, ee != nil && ee.Addressed(), !writing)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.why) {
				t.Errorf("error %q does not say %q", msg, tt.why)
			}
			if !strings.HasSuffix(msg, ".") || strings.Contains(msg, "pw@") {
				t.Errorf("error %q is not a plain sentence fit for a problem detail", msg)
			}
		})
	}
}

// The special-purpose ranges beyond the netip predicates: the first and
// last address of each are refused by name, an address just outside is
// public (or refused for another, named reason), and an allow-list entry
// still lets one through.
func TestEndpointPolicySpecialRanges(t *testing.T) {
	tests := []struct {
		addr string
		why  string // "" for a public address
	}{
		{"::2", "IPv4-compatible"},
		{"::7f00:1", "IPv4-compatible"}, // ::127.0.0.1
		{"::ffff:ffff", "IPv4-compatible"},
		{"::1:0:0", ""},
		{"2002::", "6to4"},
		{"2002:c0a8:101::1", "6to4"}, // 6to4 of 192.168.1.1
		{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "6to4"},
		{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"2003::", ""},
		{"2001::", "Teredo"},
		{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "Teredo"},
		{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"2001:1::", ""},
		{"192.0.0.0", "IETF protocol assignment"},
		{"192.0.0.255", "IETF protocol assignment"},
		{"191.255.255.255", ""},
		{"192.0.1.0", ""},
		{"198.18.0.0", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"240.0.0.0", "reserved"},
		{"255.255.255.254", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"239.255.255.255", "multicast"},
		{"::ffff:198.18.0.1", "benchmarking"}, // IPv4-mapped
		{"64:ff9b::c612:1", "benchmarking"},   // NAT64 of 198.18.0.1
		{"64:ff9b:1::", "local-use NAT64"},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use NAT64"},
		{"64:ff9b:2::", ""},
		{"2001:2::", "benchmarking"},
		{"2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"},
		{"2001:2:1::", ""},
		{"100::", "discard-only"},
		{"100::ffff:ffff:ffff:ffff", "discard-only"},
		{"100:0:0:1::", ""},
		{"192.88.99.0", "6to4 relay anycast"},
		{"192.88.99.255", "6to4 relay anycast"},
		{"192.88.98.255", ""},
		{"192.88.100.0", ""},
		{"192.0.2.0", "documentation"},
		{"192.0.2.255", "documentation"},
		{"192.0.3.0", ""},
		{"198.51.100.255", "documentation"},
		{"198.51.101.0", ""},
		{"203.0.113.0", "documentation"},
		{"203.0.114.0", ""},
		{"2001:db8::", "documentation"},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"},
		{"2001:db9::", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.addr)
			host := tt.addr
			if ip.Is6() {
				host = "[" + tt.addr + "]"
			}
			raw := "http://" + host + "/mcp"
			_, err := mcpclient.EndpointPolicy{Resolver: names}.Check(testContext(t), raw)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed (public)", raw, err)
				}
				return
			}
			if err == nil || !errors.Is(err, mcpclient.ErrEndpointRefused) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("Check(%s) = %v, want refused as %s", raw, err, tt.why)
			}
			if _, err := (mcpclient.EndpointPolicy{Allow: []string{tt.addr}, Resolver: names}).Check(testContext(t), raw); err != nil {
				t.Errorf("Check(%s) with the address allowed = %v", raw, err)
			}
			// The same address behind a name is refused by what the name resolves to.
			r := fakeResolver{"special.example": {tt.addr}}
			if _, err := (mcpclient.EndpointPolicy{Resolver: r}).Check(testContext(t), "http://special.example/"); err == nil || !strings.Contains(err.Error(), tt.why) {
				t.Errorf("a name resolving to %s: %v, want refused as %s", tt.addr, err, tt.why)
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	tests := []struct{ endpoint, want string }{
		{"https://mcp.example.com/mcp", "https://mcp.example.com:443"},
		{"https://MCP.Example.com.:443/other?x=1#f", "https://mcp.example.com:443"},
		{"HTTP://mcp.example.com/mcp", "http://mcp.example.com:80"},
		{"http://mcp.example.com:0080/mcp", "http://mcp.example.com:80"},
		{"https://mcp.example.com:8443/mcp", "https://mcp.example.com:8443"},
		{"http://127.0.0.1:8080/a", "http://127.0.0.1:8080"},
		{"http://[::FFFF:127.0.0.1]:8080/a", "http://127.0.0.1:8080"},
		{"http://[2001:DB8:0::1]/", "http://[2001:db8::1]:80"},
	}
	for _, tt := range tests {
		if got, err := mcpclient.Origin(tt.endpoint); err != nil || got != tt.want {
			t.Errorf("Origin(%q) = %q, %v; want %q", tt.endpoint, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "ftp://x/", "https://u:p@x/", "https://x:99999/"} {
		if _, err := mcpclient.Origin(bad); !errors.Is(err, mcpclient.ErrEndpointRefused) {
			t.Errorf("Origin(%q) = %v, want a refusal", bad, err)
		}
	}
}

// CheckEndpoint resolves with the system resolver: "localhost" is refused
// by what it resolves to, unless listed.
func TestCheckEndpointResolves(t *testing.T) {
	if _, err := mcpclient.CheckEndpoint("http://localhost:8080/mcp", nil); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("CheckEndpoint(localhost) = %v, want a loopback refusal", err)
	}
	if _, err := mcpclient.CheckEndpoint("http://localhost:8080/mcp", []string{"localhost"}); err != nil {
		t.Errorf("CheckEndpoint(localhost, allowed) = %v", err)
	}
	if _, err := mcpclient.CheckEndpoint("http://127.0.0.1:8080/mcp", []string{"127.0.0.1"}); err != nil {
		t.Errorf("CheckEndpoint(127.0.0.1, allowed) = %v", err)
	}
}

// DNS rebinding: the name was public when the endpoint was checked; when
// the client dials, it resolves to loopback, and the dial refuses it.
func TestDialRefusesRebinding(t *testing.T) {
	// Legacy, not an SDK server: the SDK server itself refuses a loopback
	// request whose Host is not localhost (its own rebinding protection).
	s := mcptest.Legacy(t)
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	endpoint := "http://rebind.example:" + port
	checkTime := mcpclient.EndpointPolicy{Resolver: fakeResolver{"rebind.example": {"93.184.216.34"}}}
	if _, err := checkTime.Check(testContext(t), endpoint); err != nil {
		t.Fatalf("at registration the name is public: %v", err)
	}
	c, rec := newClient(t, endpoint, func(c *mcpclient.Config) {
		c.AllowHosts = nil
		c.Resolver = fakeResolver{"rebind.example": {"127.0.0.1"}}
	})
	_, err := c.Handshake(testContext(t))
	e := wantClass(t, err, mcpclient.ClassTransport)
	if !errors.Is(err, mcpclient.ErrEndpointRefused) || !strings.Contains(e.Reason, "loopback") {
		t.Errorf("err = %v, want a loopback refusal at dial time", err)
	}
	if len(s.Received()) != 0 || len(rec.all()) != 0 {
		t.Error("the server was reached")
	}

	// Listed by name, the same dial goes through.
	c, _ = newClient(t, endpoint, func(c *mcpclient.Config) {
		c.AllowHosts = []string{"rebind.example"}
		c.Resolver = fakeResolver{"rebind.example": {"127.0.0.1"}}
	})
	if _, err := c.Handshake(testContext(t)); err != nil {
		t.Errorf("allowed by name: %v", err)
	}
}
