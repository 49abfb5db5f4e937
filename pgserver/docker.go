package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

// Container settings.
const (
	dockerRepository = "postgres"
	dockerTag        = "15"
	dockerPort       = docker.Port("5432/tcp")
	dockerLabel      = "io.mcpfleet.pgserver"
)

// startDocker runs a postgres:15 container with trust authentication and waits until it accepts
// connections. With a local engine (unix socket) the port is published on 127.0.0.1 only, since trust
// authentication lets anyone who reaches it in as superuser; with a remote engine (tcp://host) it is
// published on all of that host's addresses and reached at host.
func startDocker(ctx context.Context, opt Options) (*Server, error) {
	pool, err := dockertest.NewPool(opt.DockerEndpoint)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	endpoint := pool.Client.Endpoint()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("no Docker engine answers at %s: %w", endpoint, err)
	}

	bindIP, host := "127.0.0.1", "127.0.0.1"
	if u, err := url.Parse(endpoint); err == nil && u.Scheme != "unix" && u.Scheme != "npipe" && u.Hostname() != "" {
		bindIP, host = "", u.Hostname()
	}
	logf(opt.Log, "docker: starting %s:%s through %s", dockerRepository, dockerTag, endpoint)
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository:   dockerRepository,
		Tag:          dockerTag,
		Env:          []string{"POSTGRES_HOST_AUTH_METHOD=trust"},
		Labels:       map[string]string{dockerLabel: "1"},
		ExposedPorts: []string{string(dockerPort)},
		PortBindings: map[docker.Port][]docker.PortBinding{dockerPort: {{HostIP: bindIP, HostPort: ""}}},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true // Close, or the expiry below, leaves nothing behind
		hc.PublishAllPorts = false
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("run %s:%s: %w", dockerRepository, dockerTag, err)
	}
	purge := func() error {
		err := pool.Purge(res)
		if _, gone := errors.AsType[*docker.NoSuchContainer](err); gone {
			return nil // removed already: it expired, or someone removed it
		}
		if err != nil {
			return fmt.Errorf("pgserver: remove container %s: %w", shortID(res), err)
		}
		return nil
	}
	if opt.DockerExpiry > 0 {
		_ = res.Expire(uint(opt.DockerExpiry.Seconds())) // never fails: it only starts a goroutine
	}

	hostPort := res.GetPort(string(dockerPort))
	if hostPort == "" {
		return nil, errors.Join(fmt.Errorf("container %s: no host port for %s", shortID(res), dockerPort), purge())
	}
	base := &url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort(host, hostPort),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	// The image's entrypoint runs initdb with a server on the unix socket only, then restarts it on TCP,
	// so the first TCP connection that succeeds is the final server.
	if err := waitAccepting(ctx, base.String(), readyLimit); err != nil {
		return nil, errors.Join(fmt.Errorf("container %s: %w", shortID(res), err), purge())
	}
	logf(opt.Log, "using PostgreSQL in container %s at %s", shortID(res), base.Redacted())
	return &Server{kind: KindDocker, base: base, close: purge}, nil
}

func shortID(res *dockertest.Resource) string {
	id := strings.TrimPrefix(res.Container.ID, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}
