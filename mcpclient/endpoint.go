package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrEndpointRefused is wrapped by every error of the endpoint policy.
var ErrEndpointRefused = errors.New("endpoint refused")

// EndpointError is an endpoint refused by the policy. Its message is a plain
// sentence fit for the detail of a 400 problem response; it never contains
// a credential (the policy refuses URLs carrying one without repeating it).
type EndpointError struct {
	msg       string
	addressed bool
}

func (e *EndpointError) Error() string { return e.msg }

// Unwrap returns [ErrEndpointRefused].
func (e *EndpointError) Unwrap() error { return ErrEndpointRefused }

// Addressed reports whether the refusal is about the address the host is or
// resolves to, or about the host not resolving — not about how the URL is
// written. Such a message says where a name resolves from where this service
// stands, so it is for administrators and the log, not for every caller.
func (e *EndpointError) Addressed() bool { return e.addressed }

func refuse(format string, args ...any) error {
	return &EndpointError{msg: fmt.Sprintf(format, args...)}
}

// refuseAddress is refuse for a refusal that is [EndpointError.Addressed].
func refuseAddress(format string, args ...any) error {
	return &EndpointError{msg: fmt.Sprintf(format, args...), addressed: true}
}

// Resolver resolves host names. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// EndpointPolicy decides which MCP endpoints may be reached:
//
//   - the scheme is http or https;
//   - the URL carries no user name or password;
//   - a host that is, or resolves to, a non-public address — loopback,
//     link-local, private (RFC 1918, IPv6 ULA), shared CGNAT space
//     (100.64.0.0/10), unspecified or "this network" (0.0.0.0/8, ::),
//     multicast or broadcast, IETF protocol assignments (192.0.0.0/24),
//     benchmarking (198.18.0.0/15, 2001:2::/48), IPv6 discard-only (100::/64),
//     reserved (240.0.0.0/4), the tunnelling prefixes IPv4-compatible (::/96),
//     6to4 (2002::/16) and its relay anycast (192.88.99.0/24), Teredo
//     (2001::/32), local-use NAT64 (64:ff9b:1::/48), documentation ranges, also when reached through NAT64 or written as an
//     IPv4-mapped IPv6 address — is refused unless the host name or that
//     address is on Allow;
//   - every address a name resolves to is checked: one non-public address
//     that is not allowed refuses the endpoint.
//
// Public addresses need no listing: Allow is the list of exceptions that let
// an operator reach an internal server, not a list of the only hosts
// reachable. An Allow entry is a host name (compared case-insensitively,
// without a trailing dot), an IP address, or a CIDR prefix.
//
// The same rules are applied again when a connection is dialled (see
// [Client]), to the addresses actually dialled, so a name that resolved to a
// public address when it was checked and to a private one later (DNS
// rebinding) is still refused.
type EndpointPolicy struct {
	Allow []string
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
}

// CheckEndpoint parses raw and checks it against the [EndpointPolicy] with
// the given allow-list, resolving the host with the system resolver (bounded
// to 5 seconds). It returns the parsed URL, or an [*EndpointError] whose
// message is a plain sentence fit for a 400 problem detail.
func CheckEndpoint(raw string, allow []string) (*url.URL, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return EndpointPolicy{Allow: allow}.Check(ctx, raw)
}

// Check parses raw and checks it, resolving a host name through the policy's
// resolver. Errors are [*EndpointError].
func (p EndpointPolicy) Check(ctx context.Context, raw string) (*url.URL, error) {
	u, err := parseEndpoint(raw)
	if err != nil {
		return nil, err
	}
	if _, err := p.addrs(ctx, u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// parseEndpoint performs the checks that need no network: scheme, userinfo,
// host and port.
func parseEndpoint(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, refuse("The endpoint URL is empty.")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refuse("The endpoint is not a valid URL.")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		u.Scheme = strings.ToLower(u.Scheme)
	case "":
		return nil, refuse("The endpoint URL has no scheme; use http:// or https://.")
	default:
		return nil, refuse("The endpoint URL scheme %q is not allowed; use http or https.", u.Scheme)
	}
	if u.User != nil {
		return nil, refuse("The endpoint URL must not contain a user name or password; configure the credential as the server's authentication instead.")
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, refuse("The endpoint URL has no host.")
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, refuse("The endpoint URL port %q is not a valid port number.", port)
		}
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// Origin returns the origin of endpoint — its scheme, host and port, the
// part a credential is bound to — as "scheme://host:port": scheme and host
// in lower case, a trailing dot dropped, an IP address in its canonical form
// (IPv6 in brackets), the default port written out. Endpoints that differ
// only in path, query or fragment, or in how they spell the same host and
// port, have the same origin. It needs no network; an endpoint the policy
// would refuse for how it is written is an [*EndpointError].
func Origin(endpoint string) (string, error) {
	u, err := parseEndpoint(endpoint)
	if err != nil {
		return "", err
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p) // checked by parseEndpoint
	}
	return u.Scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// addrs resolves host (an IP literal resolves to itself) and checks every
// address. It returns the addresses, all allowed, in resolver order.
func (p EndpointPolicy) addrs(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.checkAddr(host, ip, true); err != nil {
			return nil, err
		}
		return []netip.Addr{ip.Unmap().WithZone("")}, nil
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return nil, refuseAddress("The endpoint host %q could not be resolved.", host)
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if err := p.checkAddr(host, ip, false); err != nil {
			return nil, err
		}
		out = append(out, ip.Unmap().WithZone(""))
	}
	return out, nil
}

// checkAddr refuses ip unless it is public or allowed by name or address.
// literal says host is ip written as an address.
func (p EndpointPolicy) checkAddr(host string, ip netip.Addr, literal bool) error {
	ip = ip.Unmap().WithZone("")
	kind := nonPublicKind(ip)
	if kind == "" || p.allowed(host, ip) {
		return nil
	}
	if literal {
		return refuseAddress("The endpoint address %s is a %s address, which is only allowed when it is on the allow-list.", ip, kind)
	}
	return refuseAddress("The endpoint host %q resolves to %s, a %s address, which is only allowed when the host or the address is on the allow-list.", host, ip, kind)
}

func (p EndpointPolicy) allowed(host string, ip netip.Addr) bool {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, e := range p.Allow {
		e = strings.TrimSpace(e)
		if pfx, err := netip.ParsePrefix(e); err == nil {
			if pfx.Contains(ip) {
				return true
			}
			continue
		}
		if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			if a.Unmap().WithZone("") == ip {
				return true
			}
			continue
		}
		if strings.TrimSuffix(strings.ToLower(e), ".") == name {
			return true
		}
	}
	return false
}

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	siteLocal   = netip.MustParsePrefix("fec0::/10")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// specialRanges are the special-purpose ranges (RFC 6890 and its IANA registries) that are not public
// unicast although the netip predicates do not say so. The tunnelling ones (IPv4-compatible, 6to4,
// Teredo) are refused whole: what they reach depends on a relay, not on the address.
var specialRanges = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 (deprecated)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 relay"},
	{netip.MustParsePrefix("2001::/32"), "Teredo relay"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},             // RFC 6666
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"}, // RFC 7526: what it reaches is the nearest relay's choice
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"}, // RFC 8215: what it reaches is the local translator's choice
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
}

// nonPublicKind names the class of a non-public address, or returns "" for
// a public unicast address.
func nonPublicKind(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified(), thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsPrivate(), siteLocal.Contains(ip):
		return "private"
	case cgnat.Contains(ip):
		return "shared (CGNAT)"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip == broadcast:
		return "broadcast"
	case nat64.Contains(ip):
		b := ip.As16()
		return nonPublicKind(netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(ip) {
			return r.kind
		}
	}
	return ""
}

// dialer dials only addresses the policy allows: it resolves the host
// itself, checks every address, dials the checked addresses (never
// re-resolving) and checks the address again as the socket connects.
type dialer struct {
	policy  EndpointPolicy
	timeout time.Duration
}

func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	addrs, err := d.policy.addrs(ctx, host)
	if err != nil {
		return nil, err
	}
	nd := net.Dialer{
		Timeout:   d.timeout,
		KeepAlive: 30 * time.Second,
		Control: func(_, hostport string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(hostport)
			if err != nil {
				return refuseAddress("The endpoint address %s could not be checked.", hostport)
			}
			return d.policy.checkAddr(host, ap.Addr(), false)
		},
	}
	var firstErr error
	for _, a := range addrs {
		conn, err := nd.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}
