package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/service"
)

func TestEventStreamConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name               string
		env                map[string]string
		total, tenant, key int
		poll               time.Duration
		wantErr            string // a substring of the error; "" for none
	}{
		{name: "defaults", total: 256, tenant: 32, key: 8, poll: time.Second},
		{name: "set", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "100", "MCPFLEET_EVENT_STREAMS_PER_TENANT": "10",
			"MCPFLEET_EVENT_STREAMS_PER_KEY": "2", "MCPFLEET_EVENT_POLL_INTERVAL": "250ms"}, total: 100, tenant: 10, key: 2, poll: 250 * time.Millisecond},
		{name: "defaults under a small total", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "4"}, total: 4, tenant: 4, key: 4, poll: time.Second},
		{name: "not a number", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_KEY": "many"}, wantErr: "MCPFLEET_EVENT_STREAMS_PER_KEY"},
		{name: "zero", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_TENANT": "0"}, wantErr: "MCPFLEET_EVENT_STREAMS_PER_TENANT"},
		{name: "a tenant may not have more than all", env: map[string]string{"MCPFLEET_EVENT_STREAMS": "10", "MCPFLEET_EVENT_STREAMS_PER_TENANT": "11"}, wantErr: "≤"},
		{name: "a key may not have more than its tenant", env: map[string]string{"MCPFLEET_EVENT_STREAMS_PER_TENANT": "3", "MCPFLEET_EVENT_STREAMS_PER_KEY": "4"}, wantErr: "≤"},
		{name: "poll too fast", env: map[string]string{"MCPFLEET_EVENT_POLL_INTERVAL": "1ms"}, wantErr: "MCPFLEET_EVENT_POLL_INTERVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://cyberos_app@127.0.0.1/x"}
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := service.FromEnv(func(k string) string { return env[k] })
			if err == nil {
				err = c.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.EventStreams != tc.total || c.EventStreamsPerTenant != tc.tenant || c.EventStreamsPerKey != tc.key || c.EventPollInterval != tc.poll {
				t.Errorf("got %d/%d/%d %s, want %d/%d/%d %s", c.EventStreams, c.EventStreamsPerTenant, c.EventStreamsPerKey,
					c.EventPollInterval, tc.total, tc.tenant, tc.key, tc.poll)
			}
		})
	}
}
