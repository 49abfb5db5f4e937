package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// A bad environment value stops every command before it starts anything: exit code 2 and a plain
// message naming the variable, with what it expected.
func TestRunRefusesABadEnvironment(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"MCPFLEET_FLAP_THRESHOLD", "4.5"},
		{"MCPFLEET_FLAP_THRESHOLD", "-4"},
		{"MCPFLEET_HEARTBEAT_INTERVAL", "10"},
		{"MCPFLEET_MASS_SILENCE_FRACTION", "2"},
		{"MCPFLEET_HTTP_ADDR", "localhost"},
		{"MCPFLEET_TRACE_URL", "http://jaeger:16686/trace/"},         // no {trace_id}
		{"MCPFLEET_TRACE_URL", "jaeger:16686/trace/{trace_id}"},      // no scheme
		{"MCPFLEET_TRACE_URL", "http://jaeger/{trace_id}/{span_id}"}, // another placeholder
	} {
		env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://nobody@127.0.0.1:1/x", tt.name: tt.value}
		err := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tt.name+"=") || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%s=%s: %v (exit %d), want exit 2 naming the variable", tt.name, tt.value, err, exitCode(err))
		}
	}
}

// A configuration serve cannot run with (no database URL) is a usage mistake too: exit code 2.
func TestServeRefusesAnInvalidConfig(t *testing.T) {
	err := run(context.Background(), []string{"serve"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "MCPFLEET_DATABASE_URL") {
		t.Errorf("%v (exit %d), want exit 2 naming MCPFLEET_DATABASE_URL", err, exitCode(err))
	}
}

// A partial cluster configuration stops the command with exit code 2 before it starts anything (a
// node that started alone would monitor servers another node owns).
func TestRunRefusesAPartialClusterConfig(t *testing.T) {
	env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://nobody@127.0.0.1:1/x", "MCPFLEET_CLUSTER_ETCD": "127.0.0.1:2379"}
	err := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "MCPFLEET_CLUSTER_NAME") || !strings.Contains(err.Error(), "MCPFLEET_CLUSTER_ADDR") {
		t.Errorf("%v (exit %d), want exit 2 naming the missing cluster settings", err, exitCode(err))
	}
}
