package loadgen_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaultsEnvAndFlags(t *testing.T) {
	cfg, err := loadgen.ParseConfig([]string{"--api-key", "k"}, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if cfg.N != 100_000 || cfg.Interval != 10*time.Second || cfg.BaseURL != "http://127.0.0.1:8080" ||
		cfg.ReadKey != "k" || !cfg.Ceiling || !cfg.Deregister {
		t.Errorf("defaults = %+v", cfg)
	}

	cfg, err = loadgen.ParseConfig([]string{"--n", "7"}, env(map[string]string{
		"MCPFLEET_LOAD_API_KEY":  "from-env",
		"MCPFLEET_LOAD_N":        "5",
		"MCPFLEET_LOAD_INTERVAL": "2s",
		"MCPFLEET_LOAD_BASE_URL": "http://localhost:9999",
		"MCPFLEET_LOAD_READ_KEY": "reader",
	}), io.Discard)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if cfg.APIKey != "from-env" || cfg.N != 7 || cfg.Interval != 2*time.Second || cfg.ReadKey != "reader" ||
		cfg.BaseURL != "http://localhost:9999" {
		t.Errorf("env then flags = %+v (want the flag to win for --n)", cfg)
	}

	if _, err := loadgen.ParseConfig([]string{"-h"}, env(nil), io.Discard); !errors.Is(err, loadgen.ErrHelp) {
		t.Errorf("-h: err = %v, want ErrHelp", err)
	}
	if _, err := loadgen.ParseConfig(nil, env(map[string]string{"MCPFLEET_LOAD_N": "many"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "MCPFLEET_LOAD_N") {
		t.Errorf("bad env value: err = %v", err)
	}
}

// The default connections follow the heartbeat rate: the heartbeats due in 50 ms, within 128 to 4,096;
// an explicit --connections wins.
func TestConnectionsFollowTheHeartbeatRate(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{nil, 500}, // 100,000 modules at H = 10 s: 10,000/s
		{[]string{"--n", "250000"}, 1250},
		{[]string{"--n", "250001"}, 1251}, // rounded up
		{[]string{"--n", "1000"}, 128},
		{[]string{"--n", "10000000", "--interval", "1s"}, 4096},
		{[]string{"--n", "250000", "--connections", "64"}, 64},
	}
	for _, tt := range tests {
		cfg, err := loadgen.ParseConfig(append([]string{"--api-key", "k"}, tt.args...), env(nil), io.Discard)
		if err != nil || cfg.Connections != tt.want {
			t.Errorf("%q: connections %d, %v; want %d", tt.args, cfg.Connections, err, tt.want)
		}
	}
}

func TestParseConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for valid
	}{
		{"loopback v4", []string{"--base-url", "http://127.0.0.1:1"}, ""},
		{"loopback range", []string{"--base-url", "http://127.9.8.7:1"}, ""},
		{"loopback v6", []string{"--base-url", "http://[::1]:1"}, ""},
		{"localhost", []string{"--base-url", "https://localhost:1"}, ""},
		{"private address refused", []string{"--base-url", "http://10.0.0.1:8080"}, "not a loopback"},
		{"host name refused", []string{"--base-url", "http://example.com"}, "not a loopback"},
		{"remote allowed explicitly", []string{"--base-url", "http://192.168.1.5:8080", "--allow-remote"}, ""},
		{"bad scheme", []string{"--base-url", "ftp://127.0.0.1"}, "scheme"},
		{"no key", []string{"--api-key", ""}, "--api-key is required"},
		{"jitter too large", []string{"--interval", "1s", "--jitter", "300ms"}, "--jitter"},
		{"zero modules", []string{"--n", "0"}, "--n"},
		{"negative connections", []string{"--connections", "-1"}, "--connections"},
		{"too many connections", []string{"--connections", "5000"}, "--connections"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"no p99 to hold sizes to", []string{"--hold-p99", "0s"}, "--hold-p99"},
		{"no p99 needed without the step-down", []string{"--hold-p99", "0s", "--hold-search=false"}, ""},
		{"cold-start step", []string{"--cold-start-runs", "3", "--service-command", "bin/mcpfleet", "--service-pid", "1"}, ""},
		{"cold-start step without a service to restart", []string{"--cold-start-runs", "3"}, "--cold-start-runs needs --service-command"},
		{"negative cold-start runs", []string{"--cold-start-runs", "-1"}, "--cold-start-runs must be"},
		{"cold-start step given a step's summary", []string{"--cold-start-runs", "3", "--service-command", "x", "--service-pid", "1", "--cold-start-file", "f"}, "--cold-start-file is for a load run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadgen.ParseConfig(append([]string{"--api-key", "k"}, tt.args...), env(nil), io.Discard)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}
