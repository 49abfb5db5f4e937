package service

import "github.com/mcpfleet/mcpfleet/config"

// Defaults of the registration limits: a tenant of 250,000 servers, each advertising a few hundred tools,
// fits in them.
const (
	defaultMaxServersPerTenant   = 500_000
	defaultMaxToolsPerServer     = 500
	defaultMaxAdvertisementBytes = 256 << 10
	// maxAdvertisementBytesCap is the request body limit: an advertisement cannot be larger.
	maxAdvertisementBytesCap = 1 << 20
)

// limitsFromEnv reads the registration limits into c, each with its default.
func (c *Config) limitsFromEnv(e *config.Env) {
	c.MaxServersPerTenant = e.Int("MCPFLEET_MAX_SERVERS_PER_TENANT", defaultMaxServersPerTenant, 1, 100_000_000)
	c.MaxToolsPerServer = e.Int("MCPFLEET_MAX_TOOLS_PER_SERVER", defaultMaxToolsPerServer, 1, 100_000)
	c.MaxAdvertisementBytes = e.Int("MCPFLEET_MAX_ADVERTISEMENT_BYTES", defaultMaxAdvertisementBytes, 1, maxAdvertisementBytesCap)
}

// withLimitDefaults returns c with every unset registration limit at its default (for a Config built
// by hand; FromEnv already sets them, from the same constants).
func (c Config) withLimitDefaults() Config {
	if c.MaxServersPerTenant <= 0 {
		c.MaxServersPerTenant = defaultMaxServersPerTenant
	}
	if c.MaxToolsPerServer <= 0 {
		c.MaxToolsPerServer = defaultMaxToolsPerServer
	}
	if c.MaxAdvertisementBytes <= 0 {
		c.MaxAdvertisementBytes = defaultMaxAdvertisementBytes
	}
	return c
}
