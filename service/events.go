package service

import (
	"fmt"
	"time"

	"github.com/mcpfleet/mcpfleet/config"
	"github.com/mcpfleet/mcpfleet/httpapi"
)

// eventsFromEnv reads the settings of GET /v1/mcp/events into c: the stream limits (in all, per
// tenant, per key) and the poll interval. validateEvents checks how they relate.
func (c *Config) eventsFromEnv(e *config.Env) {
	c.EventStreams = e.Int("MCPFLEET_EVENT_STREAMS", config.DefaultEventStreams, 1, 100000)
	c.EventStreamsPerTenant = e.Int("MCPFLEET_EVENT_STREAMS_PER_TENANT", min(config.DefaultEventStreamsPerTenant, c.EventStreams), 1, 100000)
	c.EventStreamsPerKey = e.Int("MCPFLEET_EVENT_STREAMS_PER_KEY", min(config.DefaultEventStreamsPerKey, c.EventStreamsPerTenant), 1, 100000)
	c.EventPollInterval = e.Duration("MCPFLEET_EVENT_POLL_INTERVAL", config.DefaultEventPollInterval)
}

// validateEvents checks that a key may have no more streams than its tenant, nor a tenant more than
// all, and that the poll interval is from 10ms to 1m. Zero values (a Config built in code) take the
// defaults and pass.
func (c Config) validateEvents() []error {
	var errs []error
	total, tenant, key := c.EventStreams, c.EventStreamsPerTenant, c.EventStreamsPerKey
	if (total > 0 && tenant > total) || (tenant > 0 && key > tenant) {
		errs = append(errs, fmt.Errorf("event stream limits: want MCPFLEET_EVENT_STREAMS_PER_KEY (%d) ≤ MCPFLEET_EVENT_STREAMS_PER_TENANT (%d) ≤ MCPFLEET_EVENT_STREAMS (%d)",
			key, tenant, total))
	}
	if p := c.EventPollInterval; p != 0 && (p < 10*time.Millisecond || p > time.Minute) {
		errs = append(errs, fmt.Errorf("MCPFLEET_EVENT_POLL_INTERVAL=%s: want 10ms to 1m", p))
	}
	return errs
}

// eventStreamConfig narrows c into the event stream's own configuration.
func (c Config) eventStreamConfig() httpapi.EventStreamConfig {
	return httpapi.EventStreamConfig{
		PollInterval: c.EventPollInterval, MaxStreams: c.EventStreams,
		MaxStreamsPerTenant: c.EventStreamsPerTenant, MaxStreamsPerKey: c.EventStreamsPerKey,
	}
}
