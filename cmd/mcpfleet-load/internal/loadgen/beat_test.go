package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestAnswerStatus(t *testing.T) {
	tests := []struct {
		body   string
		want   string
		wantOK bool
	}{
		{`{"server_id":"x","status":"healthy","last_heartbeat_at":"2026-05-17T10:00:05Z"}`, "healthy", true},
		{`{"server_id": "x", "status" :  "degraded"}`, "degraded", true},
		{"{\n  \"status\":\n \"unhealthy\"\n}", "unhealthy", true},
		{`{"server_id":"x"}`, "", false},
		{`{"status": 3}`, "", false},
		{`{"status": "unterminated`, "", false},
	}
	for _, tt := range tests {
		got, ok := loadgen.AnswerStatus([]byte(tt.body))
		if ok != tt.wantOK || string(got) != tt.want {
			t.Errorf("AnswerStatus(%s) = %q, %v; want %q, %v", tt.body, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestErrorKind(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		err    error
		want   string
	}{
		{"problem", 503, `{"type":"https://mcpfleet.dev/problems/overloaded","status":503}`, nil, "HTTP 503 overloaded"},
		{"not registered", 404, `{"type":"https://mcpfleet.dev/problems/server_not_registered"}`, nil, "HTTP 404 server_not_registered"},
		{"no problem body", 502, `bad gateway`, nil, "HTTP 502"},
		{"2xx without status", 200, `{}`, nil, "bad answer"},
		{"deadline", 0, "", fmt.Errorf("post: %w", context.DeadlineExceeded), "timeout"},
		{"refused", 0, "", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection refused"},
		{"reset", 0, "", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), "connection reset"},
		{"other", 0, "", errors.New("tls: oops"), "transport"},
	}
	for _, tt := range tests {
		if got := loadgen.ErrorKind(tt.status, []byte(tt.body), tt.err); got != tt.want {
			t.Errorf("%s: ErrorKind = %q, want %q", tt.name, got, tt.want)
		}
	}
}
