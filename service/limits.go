package service

import (
	"fmt"
	"strconv"
)

// Defaults of the registration limits: a tenant of 250,000 servers, each advertising a few hundred tools,
// fits in them.
const (
	defaultMaxServersPerTenant   = 500_000
	defaultMaxToolsPerServer     = 500
	defaultMaxAdvertisementBytes = 256 << 10
	// maxAdvertisementBytesCap is the request body limit: an advertisement cannot be larger.
	maxAdvertisementBytesCap = 1 << 20
)

// limitsFromEnv parses the registration limits.
func (c *Config) limitsFromEnv(getenv func(string) string) []error {
	var errs []error
	count := func(name string, lo, hi int, dst *int) {
		v := getenv(name)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number from %d to %d", name, v, lo, hi))
			return
		}
		*dst = n
	}
	count("MCPFLEET_MAX_SERVERS_PER_TENANT", 1, 100_000_000, &c.MaxServersPerTenant)
	count("MCPFLEET_MAX_TOOLS_PER_SERVER", 1, 100_000, &c.MaxToolsPerServer)
	count("MCPFLEET_MAX_ADVERTISEMENT_BYTES", 1, maxAdvertisementBytesCap, &c.MaxAdvertisementBytes)
	return errs
}

// withLimitDefaults returns c with every unset registration limit at its default.
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
