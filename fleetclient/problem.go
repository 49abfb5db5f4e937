package fleetclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemTypeBase prefixes every problem type URI the service sends; the
// rest of the URI is the problem's slug.
const ProblemTypeBase = "https://mcpfleet.dev/problems/"

// Problem slugs the client gives meaning to.
const (
	SlugServerNotRegistered = "server_not_registered"
	SlugServerDeregistered  = "server_deregistered"
)

// ProblemError is a non-2xx answer from the service. It carries the RFC 9457
// problem document when the answer had one; for any other error body, Type
// is empty, Title is the HTTP status text and Detail the start of the body.
type ProblemError struct {
	Status   int    `json:"status"`
	Type     string `json:"type"`
	Title    string `json:"title"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	// Field names the request field at fault, for validation problems.
	Field   string `json:"field,omitempty"`
	TraceID string `json:"trace_id,omitempty"`
	// RetryAfter is the answer's Retry-After header, or 0 without one.
	RetryAfter time.Duration `json:"-"`
}

// Error implements error.
func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcpfleet answered %d", e.Status)
	if s := e.Slug(); s != "" {
		b.WriteString(" " + s)
	}
	if e.Title != "" {
		b.WriteString(": " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Slug returns the last path element of Type ("server_not_registered"), or
// "" when the answer had no problem type.
func (e *ProblemError) Slug() string {
	t := strings.TrimSuffix(e.Type, "/")
	if t == "" || t == "about:blank" {
		return ""
	}
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// AsProblem returns the ProblemError in err's chain, if any.
func AsProblem(err error) (*ProblemError, bool) {
	var pe *ProblemError
	if errors.As(err, &pe) {
		return pe, true
	}
	return nil, false
}

// IsNotRegistered reports whether err is the service saying it does not know
// the server (404 server_not_registered): the module must register again.
// A 404 without a problem type counts too.
func IsNotRegistered(err error) bool {
	pe, ok := AsProblem(err)
	if !ok {
		return false
	}
	s := pe.Slug()
	return s == SlugServerNotRegistered || (s == "" && pe.Status == http.StatusNotFound)
}

// IsDeregistered reports whether err is the service saying the server was
// deregistered (409 server_deregistered).
func IsDeregistered(err error) bool {
	pe, ok := AsProblem(err)
	if !ok {
		return false
	}
	s := pe.Slug()
	return s == SlugServerDeregistered || (s == "" && pe.Status == http.StatusConflict)
}

// IsUnauthorized reports whether err is a 401 or 403 answer.
func IsUnauthorized(err error) bool {
	pe, ok := AsProblem(err)
	return ok && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden)
}

// IsRetryable reports whether the same request may succeed later: a
// transport error (no answer), or an answer of 408, 429, 500, 502, 503 or
// 504. Context cancellation and deadline errors are not retryable, nor is
// any other answer.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	pe, ok := AsProblem(err)
	if !ok {
		var de *DecodeError
		return !errors.As(err, &de)
	}
	switch pe.Status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfter returns the Retry-After of the ProblemError in err's chain, or 0.
func RetryAfter(err error) time.Duration {
	if pe, ok := AsProblem(err); ok {
		return pe.RetryAfter
	}
	return 0
}

// RetryWait is how long to wait before trying again after err, when the caller's own backoff chose d:
// the answer's Retry-After instead when it is longer (at most limit), plus up to a second at random.
// Retry-After counts whole seconds, so clients refused in the same instant that waited exactly what it
// said would come back in one instant of a later second, however the server spreads its values — and
// a clump of retries refused again stays a clump; the second at random spreads them inside the
// resolution the header cannot express.
func RetryWait(err error, d, limit time.Duration) time.Duration {
	if ra := RetryAfter(err); ra > d {
		return min(ra, limit) + rand.N(time.Second)
	}
	return d
}

// DecodeError is a 2xx answer whose body did not decode as the contract says.
// It is not retryable.
type DecodeError struct {
	Status int
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode %d answer: %v", e.Status, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// It returns 0 for an absent, malformed or past value.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
