package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Class is the kind of failure of an operation.
type Class string

// The failure classes. Exactly these five exist.
const (
	// ClassTransport: no usable HTTP exchange — the connection was refused,
	// reset or dropped, DNS or TLS failed, the endpoint policy refused the
	// address, a redirect to another host was refused, or the server
	// answered 404, 408, 429 or 5xx.
	ClassTransport Class = "transport"
	// ClassTimeout: the operation's deadline passed, or its context was
	// cancelled, before the server answered.
	ClassTimeout Class = "timeout"
	// ClassAuth: the server answered HTTP 401 or 403 — the credential is
	// missing, wrong or not sufficient. A server refusing the credential is
	// up, and is never reported as down.
	ClassAuth Class = "auth"
	// ClassProtocol: the server answered, but not as an MCP server this
	// client can talk to: a JSON-RPC error, a protocol version this client
	// does not support, a body that is not JSON-RPC (e.g. text/html), any
	// other 4xx, or a stream that ended without an answer.
	ClassProtocol Class = "protocol"
	// ClassInvalidResponse: the server's answer could not be used: not valid
	// JSON, larger than the response cap, a result without the shape its
	// method requires, or a catalogue beyond the client's ceilings.
	ClassInvalidResponse Class = "invalid_response"
)

// Error is the failure of an operation. Every error returned by [Client]'s
// operations is an *Error.
type Error struct {
	Class Class
	// Reason is a short human sentence fit to show an operator. It never
	// contains the configured credential. Text that came from the server
	// (a JSON-RPC error message) is quoted, stripped of control characters
	// and shortened.
	Reason string
	// Err is the underlying cause, for logs and errors.Is (for example
	// context.Canceled). Its text may include far-side content; do not show
	// it to users.
	Err error
}

// Error returns "<class>: <reason>".
func (e *Error) Error() string { return string(e.Class) + ": " + e.Reason }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// fault is a classified failure observed while an operation ran.
type fault struct {
	class  Class
	reason string
	seq    int // the request it belongs to; see trace
}

// classify turns the error of an SDK call into an *Error. Faults observed on
// the wire (status codes, bodies, transport errors) take precedence: they
// say why the SDK failed better than its error does. Then context ends, then
// JSON-RPC errors; anything left is an answer the SDK could not decode.
func (o *operation) classify(parent, opCtx context.Context, method string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	wrap := func(c Class, reason string) *Error {
		return &Error{Class: c, Reason: o.redact(reason), Err: err}
	}
	if f := o.trace.lastFault(); f != nil {
		return wrap(f.class, f.reason)
	}
	switch {
	case parent.Err() != nil && errors.Is(context.Cause(parent), context.Canceled):
		return wrap(ClassTimeout, fmt.Sprintf("The operation was cancelled before the server answered %s.", method))
	case parent.Err() != nil:
		return wrap(ClassTimeout, fmt.Sprintf("The caller's deadline passed before the server answered %s.", method))
	case opCtx.Err() != nil:
		return wrap(ClassTimeout, fmt.Sprintf("The server did not answer %s within %s.", method, o.c.cfg.Timeout))
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return wrap(ClassProtocol, fmt.Sprintf("The server answered %s with JSON-RPC error %d: %s.", method, rpcErr.Code, farText(rpcErr.Message)))
	}
	return wrap(ClassInvalidResponse, fmt.Sprintf("The server's answer to %s could not be decoded.", method))
}

// redact removes the configured credential from s.
func (o *operation) redact(s string) string {
	if cred := o.c.cfg.Auth.Credential; len(cred) >= 4 {
		s = strings.ReplaceAll(s, cred, "[redacted]")
	}
	return s
}

// farText makes text written by the far side fit for a reason: control
// characters removed, at most 200 bytes, quoted.
func farText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	const limit = 200
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return fmt.Sprintf("%q", s)
}
