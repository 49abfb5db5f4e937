package service

import "github.com/mcpfleet/mcpfleet/config"

// maxAdvertisementBytesCap is the request body limit: an advertisement cannot be larger.
const maxAdvertisementBytesCap = 1 << 20

// limitsFromEnv reads the registration limits into c, each with its default.
func (c *Config) limitsFromEnv(e *config.Env) {
	c.MaxServersPerTenant = e.Int("MCPFLEET_MAX_SERVERS_PER_TENANT", config.DefaultMaxServersPerTenant, 1, 100_000_000)
	c.MaxToolsPerServer = e.Int("MCPFLEET_MAX_TOOLS_PER_SERVER", config.DefaultMaxToolsPerServer, 1, 100_000)
	c.MaxAdvertisementBytes = e.Int("MCPFLEET_MAX_ADVERTISEMENT_BYTES", config.DefaultMaxAdvertisementBytes, 1, maxAdvertisementBytesCap)
	c.MaxCatalogueBytes = e.Int("MCPFLEET_MAX_CATALOGUE_BYTES", config.DefaultMaxCatalogueBytes, 1, 1<<30)
}

// withLimitDefaults returns c with every unset registration limit at its default (for a Config built
// by hand; FromEnv already sets them, from the same constants).
func (c Config) withLimitDefaults() Config {
	c.MaxServersPerTenant = config.Or(c.MaxServersPerTenant, config.DefaultMaxServersPerTenant)
	c.MaxToolsPerServer = config.Or(c.MaxToolsPerServer, config.DefaultMaxToolsPerServer)
	c.MaxAdvertisementBytes = config.Or(c.MaxAdvertisementBytes, config.DefaultMaxAdvertisementBytes)
	c.MaxCatalogueBytes = config.Or(c.MaxCatalogueBytes, config.DefaultMaxCatalogueBytes)
	return c
}
