package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ProblemBase prefixes every problem type; the last path segment names the problem (e.g.
// https://mcpfleet.dev/problems/server_not_registered). Types are stable: clients may switch on them.
const ProblemBase = "https://mcpfleet.dev/problems/"

// Problem is an RFC 9457 problem detail, and the error type handlers return to produce one. Detail is
// written for the client; Err is the internal cause, logged and never sent.
type Problem struct {
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Status     int            `json:"status"`
	Detail     string         `json:"detail,omitempty"`
	Field      string         `json:"field,omitempty"`
	TraceID    string         `json:"trace_id,omitempty"`
	Extra      map[string]any `json:"-"`
	RetryAfter time.Duration  `json:"-"`
	Err        error          `json:"-"`
}

func (p *Problem) Error() string {
	if p.Err != nil {
		return fmt.Sprintf("%s: %s: %v", p.Type, p.Detail, p.Err)
	}
	return p.Type + ": " + p.Detail
}

func (p *Problem) Unwrap() error { return p.Err }

// MarshalJSON writes the standard members and the extension members together.
func (p *Problem) MarshalJSON() ([]byte, error) {
	m := map[string]any{"type": p.Type, "title": p.Title, "status": p.Status}
	if p.Detail != "" {
		m["detail"] = p.Detail
	}
	if p.Field != "" {
		m["field"] = p.Field
	}
	if p.TraceID != "" {
		m["trace_id"] = p.TraceID
	}
	for k, v := range p.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// problem builds a Problem of slug with status and a client-facing detail.
func problem(status int, slug, detail string) *Problem {
	return &Problem{Type: ProblemBase + slug, Title: http.StatusText(status), Status: status, Detail: detail}
}

// The problems the API answers with.
func badRequest(slug, field, detail string) *Problem {
	p := problem(http.StatusBadRequest, slug, detail)
	p.Field = field
	return p
}

func unavailable(detail string, retry time.Duration, cause error) *Problem {
	p := problem(http.StatusServiceUnavailable, "unavailable", detail)
	p.RetryAfter, p.Err = retry, cause
	return p
}

func internalError(cause error) *Problem {
	p := problem(http.StatusInternalServerError, "internal", "the service failed to handle the request; it has been logged")
	p.Err = cause
	return p
}

// asProblem turns any handler error into a Problem; an error that is not one is an internal error.
func asProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return internalError(err)
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((p.RetryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
