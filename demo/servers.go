// Package demo runs a small fleet of real MCP servers for `mcpfleet demo`
// and `make run`: calendar, weather, notes and flaky, each an MCP server from
// the official Go SDK served over Streamable HTTP on a loopback port, with
// tool handlers that really answer. RunModules registers them with a running
// mcpfleet service as modules and keeps them heartbeating; the flaky one
// pauses now and then so the dashboard shows healthy → degraded → unhealthy
// → healthy.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfleet/mcpfleet/fleetclient"
)

// Names lists the demo servers StartServers can start, in start order.
func Names() []string { return []string{"calendar", "weather", "notes", "flaky"} }

// ProtocolVersion is the MCP protocol version the demo servers advertise at
// registration: the newest one the SDK speaks. (They also negotiate the
// SDK's older versions with clients that ask for them.)
func ProtocolVersion() string { return mcp.SupportedProtocolVersions()[0] }

// Options configures StartServers. The zero value starts all servers on
// 127.0.0.1.
type Options struct {
	// Names selects which servers to start (see Names); nil means all.
	Names []string
	// Host is the loopback address to listen on (default 127.0.0.1).
	// Anything but a loopback IP or "localhost" is refused.
	Host string
	// Logger receives the SDK's transport logs; nil discards them.
	Logger *slog.Logger
}

// Server is one running demo MCP server.
type Server struct {
	// Name is the module name it registers under.
	Name string
	// Version is its implementation version.
	Version string
	// Endpoint is its Streamable HTTP URL, http://127.0.0.1:PORT/mcp.
	Endpoint string
	// Tools are its tools as tools/list describes them (in name order),
	// ready for a capability advertisement.
	Tools []fleetclient.Tool

	srv    *http.Server
	served chan struct{}
	once   sync.Once
	err    error
}

// RegisterRequest returns the registration a module for this server sends.
func (s *Server) RegisterRequest() fleetclient.RegisterRequest {
	return fleetclient.RegisterRequest{
		ModuleName:              s.Name,
		Version:                 s.Version,
		SupportedProtocols:      []string{ProtocolVersion()},
		CapabilityAdvertisement: fleetclient.CapabilityAdvertisement{Tools: slices.Clone(s.Tools)},
		Endpoint:                s.Endpoint,
	}
}

// Close stops the server: it stops accepting, waits up to 2 s for requests
// in flight, then closes what is left (open SSE streams included). It is
// idempotent and safe for concurrent use.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
		<-s.served
	})
	return s.err
}

// StartServers starts the selected demo servers, each on its own loopback
// port (127.0.0.1:0). They run until Close or until ctx ends. On error, the
// servers already started are closed and none is returned.
func StartServers(ctx context.Context, opts Options) ([]*Server, error) {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("start demo servers: %q is not a loopback address", host)
	}
	names := opts.Names
	if names == nil {
		names = Names()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var out []*Server
	for _, name := range names {
		spec, ok := specs[name]
		if !ok {
			closeAll(out)
			return nil, fmt.Errorf("start demo servers: unknown server %q (have %v)", name, Names())
		}
		s, err := start(ctx, host, spec, logger)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("start demo server %s: %w", name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func closeAll(servers []*Server) {
	for _, s := range servers {
		_ = s.Close()
	}
}

// spec describes one demo server: its identity and how to add its tools.
type spec struct {
	name, version, title string
	tools                func(*mcp.Server) []fleetclient.Tool
}

var specs = map[string]spec{
	"calendar": {name: "calendar", version: "1.3.2", title: "Team calendar", tools: calendarTools},
	"weather":  {name: "weather", version: "2.0.1", title: "Weather forecasts", tools: weatherTools},
	"notes":    {name: "notes", version: "0.9.0", title: "Shared notes", tools: notesTools},
	"flaky":    {name: "flaky", version: "0.1.0", title: "A server whose heartbeats pause", tools: flakyTools},
}

func start(ctx context.Context, host string, sp spec, logger *slog.Logger) (*Server, error) {
	ms := mcp.NewServer(&mcp.Implementation{Name: sp.name, Title: sp.title, Version: sp.version},
		&mcp.ServerOptions{Logger: logger})
	tools := sp.tools(ms)
	// tools/list answers in name order; advertise in the same order.
	slices.SortFunc(tools, func(a, b fleetclient.Tool) int { return strings.Compare(a.Name, b.Name) })

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms },
		&mcp.StreamableHTTPOptions{Logger: logger}))
	s := &Server{
		Name:     sp.name,
		Version:  sp.version,
		Endpoint: "http://" + ln.Addr().String() + "/mcp",
		Tools:    tools,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("serve %s: %w", sp.name, err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}
