package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// tracingScope is the instrumentation scope of the HTTP server spans.
const tracingScope = "github.com/mcpfleet/mcpfleet/httpapi"

// tracedRoute says whether a request to route (gin's FullPath, "" for no route) gets a span: not
// scrapes, probes and event streams (a stream lasts hours: one span for it would say nothing).
func tracedRoute(route string) bool {
	switch route {
	case "/metrics", "/healthz", "/readyz", "/v1/mcp/events":
		return false
	}
	return true
}

// tracing is the HTTP server half of tracing, in place of otelgin, whose cost (about 13 % of the
// service's CPU at heartbeat load) was spent on attributes of spans nobody records.
//
// Contract, for every request to a traced route:
//   - the W3C trace context (traceparent, tracestate, and baggage, as prop extracts them) of the
//     request is the parent of the request's span, so an incoming sampled traceparent gets a child
//     span, and a request without one starts a trace;
//   - the request's context holds that span's span context whether or not the sampler records it, so
//     everything downstream (audit events' trace_id, the registration's trace_id, problem+json's
//     trace_id, the traceparent answered) names the request's trace exactly as before;
//   - the sampler decides from the parent, the trace id, the span's name ("POST /v1/…", as otelgin
//     named it) and kind (server); it is given no attributes;
//   - only a recorded span gets attributes (the HTTP server semantic conventions otelgin set: method,
//     scheme, server address and port, peer, client address, user agent, path, protocol version,
//     route, status code, body size), its status (error on a 5xx or gin errors) and gin's errors as
//     events. An unrecorded request costs the span start (a span context), not attribute building.
//
// names is filled by Handler once the routes exist (see spanNames); a route it lacks is named per
// request.
func tracing(tp trace.TracerProvider, prop propagation.TextMapPropagator, names *spanNames) gin.HandlerFunc {
	tracer := tp.Tracer(tracingScope)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)} // built once: a variadic slice escapes
	return func(c *gin.Context) {
		route := c.FullPath()
		if !tracedRoute(route) {
			c.Next()
			return
		}
		orig := c.Request
		ctx := prop.Extract(orig.Context(), canonicalCarrier(orig.Header))
		ctx, span := tracer.Start(ctx, names.name(orig.Method, route), opts...)
		c.Request = orig.WithContext(ctx)
		if !span.IsRecording() {
			defer func() { c.Request = orig }() // the middleware outside (observe) sees the request it passed in
			defer span.End()
			c.Next()
			return
		}
		// A recorded span gets all its attributes in one SetAttributes, from a pooled slice: the SDK
		// copies them into one slice of its own, instead of growing it once per call.
		attrs := spanAttrs.Get().(*[]attribute.KeyValue)
		*attrs = requestAttrs((*attrs)[:0], c, route)
		answered := false
		defer func() {
			if answered {
				*attrs = endAttrs(*attrs, span, c)
			}
			span.SetAttributes(*attrs...)
			clear(*attrs)
			spanAttrs.Put(attrs)
			span.End()
			c.Request = orig
		}()
		c.Next()
		answered = true
	}
}

// spanAttrs holds the scratch slices of recorded spans' attributes.
var spanAttrs = sync.Pool{New: func() any { s := make([]attribute.KeyValue, 0, 16); return &s }}

// spanNames holds the span name of each method and route, built once (so a request does not
// concatenate its span's name): method + " " + route as otelgin named them, the method alone for a
// request that matched no route, "HTTP" for a method outside RFC 9110's.
type spanNames struct {
	byRoute map[routeKey]string // read-only once Handler has filled it
}

type routeKey struct{ method, route string }

// add names the spans of every route of r; call it before serving.
func (n *spanNames) add(routes gin.RoutesInfo) {
	n.byRoute = make(map[routeKey]string, len(routes))
	for _, r := range routes {
		n.byRoute[routeKey{r.Method, r.Path}] = spanName(r.Method, r.Path)
	}
}

func (n *spanNames) name(method, route string) string {
	if s, ok := n.byRoute[routeKey{method, route}]; ok {
		return s
	}
	return spanName(method, route)
}

func spanName(method, route string) string {
	if !knownMethod(method) {
		method = "HTTP"
	}
	if route == "" {
		return method
	}
	return method + " " + route
}

func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// requestAttrs appends the request's HTTP server attributes, for a recorded span, to attrs.
func requestAttrs(attrs []attribute.KeyValue, c *gin.Context, route string) []attribute.KeyValue {
	req := c.Request
	if knownMethod(req.Method) {
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(req.Method))
	} else {
		attrs = append(attrs, semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(req.Method))
	}
	scheme, port := "http", 80
	if req.TLS != nil {
		scheme, port = "https", 443
	}
	attrs = append(attrs, semconv.URLScheme(scheme), semconv.ServerAddress("mcpfleet"))
	if _, p, err := net.SplitHostPort(req.Host); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			port = n
		}
	}
	attrs = append(attrs, semconv.ServerPort(port))
	peer, p, err := net.SplitHostPort(req.RemoteAddr)
	if err == nil {
		attrs = append(attrs, semconv.NetworkPeerAddress(peer))
		if n, err := strconv.Atoi(p); err == nil {
			attrs = append(attrs, semconv.NetworkPeerPort(n))
		}
	}
	if ua := req.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	if ip := spanClientAddress(c, peer); ip != "" {
		attrs = append(attrs, semconv.ClientAddress(ip))
	}
	if req.URL != nil && req.URL.Path != "" {
		attrs = append(attrs, semconv.URLPath(req.URL.Path))
	}
	if _, v, ok := strings.Cut(req.Proto, "/"); ok && v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	if route != "" {
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	return attrs
}

// spanClientAddress is c.ClientIP() (client.address, as otelgin set it) for an engine built by
// newEngine, whose settings are gin.New()'s: no trusted platform, every peer trusted to name the client
// in X-Forwarded-For or X-Real-IP. A request with neither header from an IPv4 peer (every heartbeat of a
// module that talks to the service directly) has its peer as client, and peer, the host that
// net.SplitHostPort took from RemoteAddr, is then that address in canonical form already (a dotted
// quad, as net/http formats it and as netip accepts it only), so it is returned as is: gin would parse
// it and format it again, more than half of a recorded request's attribute building. Anything else
// asks gin.
func spanClientAddress(c *gin.Context, peer string) string {
	h := c.Request.Header
	if len(h["X-Forwarded-For"]) == 0 && len(h["X-Real-Ip"]) == 0 {
		if a, err := netip.ParseAddr(peer); err == nil && a.Is4() {
			return peer
		}
	}
	return c.ClientIP()
}

// endAttrs records the answer on a recorded span: appends the status code and body size to attrs,
// and sets an error status for a 5xx or for errors gin collected (each also recorded as an event).
func endAttrs(attrs []attribute.KeyValue, span trace.Span, c *gin.Context) []attribute.KeyValue {
	status := c.Writer.Status()
	attrs = append(attrs, semconv.HTTPResponseStatusCode(status), semconv.HTTPResponseBodySize(max(c.Writer.Size(), 0)))
	if status >= 500 || status < 100 {
		span.SetStatus(codes.Error, "")
	}
	if len(c.Errors) > 0 {
		span.SetStatus(codes.Error, c.Errors.String())
		for _, err := range c.Errors {
			span.RecordError(err.Err)
		}
	}
	return attrs
}

// canonicalCarrier is propagation.HeaderCarrier without the allocation of canonicalising the W3C
// header names on every request: http.Header.Get canonicalises "traceparent" to "Traceparent" into a
// new string each time.
type canonicalCarrier http.Header

func canonicalKey(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return textproto.CanonicalMIMEHeaderKey(key)
}

// Get returns the first value of key.
func (h canonicalCarrier) Get(key string) string {
	if v := h[canonicalKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key (the baggage propagator joins them).
func (h canonicalCarrier) Values(key string) []string { return h[canonicalKey(key)] }

// Set sets key to value.
func (h canonicalCarrier) Set(key, value string) { h[canonicalKey(key)] = []string{value} }

// Keys lists the header names.
func (h canonicalCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
