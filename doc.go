// Package mcpfleet is the module's root. It holds no code of the service (see cmd/mcpfleet and service) and
// exists for repository-wide tests, such as the check that every package has a doc comment.
package mcpfleet
