package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mcpfleet/mcpfleet/actors"
	"github.com/mcpfleet/mcpfleet/demo"
	"github.com/mcpfleet/mcpfleet/fleetclient"
	"github.com/mcpfleet/mcpfleet/migrations"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/pgserver"
	"github.com/mcpfleet/mcpfleet/secrets"
	"github.com/mcpfleet/mcpfleet/service"
)

const demoDatabase = "mcpfleet_demo"

// cmdDemo is `make run`: find or start PostgreSQL, give the demo a fresh database, migrate it, create a
// tenant and keys, start the service and a local alert receiver, and run demo MCP servers that register
// and heartbeat — one of them pausing so every transition shows. It runs until interrupted.
func cmdDemo(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	dataDir := fs.String("data-dir", ".data", "where a private PostgreSQL cluster and the demo's log live")
	pgURL := fs.String("postgres-url", pgserver.DefaultURL, "a superuser URL of a PostgreSQL server to use if it answers")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "listen address (MCPFLEET_HTTP_ADDR)")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "heartbeat interval H")
	fs.DurationVar(&cfg.MonitorInterval, "monitor-interval", cfg.MonitorInterval, "monitor period")
	nodes := fs.Int("nodes", 1, "run this many nodes as a cluster on a private etcd (make cluster: 3); 1 is single-node mode")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 9 {
		return usageError{fmt.Sprintf("demo: --nodes=%d: want 1 to 9", *nodes)}
	}
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }

	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	pg, err := pgserver.Find(ctx, pgserver.Options{URL: *pgURL, DataDir: filepath.Join(dir, "pg"), Log: stdout})
	if err != nil {
		return fmt.Errorf("demo: no PostgreSQL: %w", err)
	}
	defer pg.Close()

	tenant, keys, agentKey, err := freshDemoDatabase(ctx, pg, &cfg)
	if err != nil {
		return err
	}
	if err := allowDemoServers(&cfg); err != nil {
		return err
	}

	hook, err := startAlertReceiver(stdout)
	if err != nil {
		return err
	}
	defer hook.Close()
	cfg.AlertWebhookURL, cfg.AlertWebhookSecret = hook.url, hook.secret

	logPath := filepath.Join(dir, "mcpfleet-demo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	svc, others, stopNodes, err := startDemoNodes(ctx, &cfg, *nodes, dir, logFile, stderr)
	if err != nil {
		return err
	}
	defer stopNodes()

	servers, err := demo.StartServers(ctx, demo.Options{})
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()

	base := svc.URL()
	printBanner(stdout, base, tenant.String(), keys, agentKey.APIKey, servers, pg.Kind(), logPath, cfg)
	if len(others) > 0 {
		say("Cluster %q of %d nodes on etcd %s (every node serves the whole API; see docs/cluster.md):", cfg.Cluster.Name, len(others)+1, demoEtcdClient)
		for i, s := range append([]*service.Service{svc}, others...) {
			say("  node %d  %s   (cluster traffic on %s; %s/readyz shows what it owns)", i+1, s.URL(), s.Member().Status().Self, s.URL())
		}
		say("")
	}
	say("Watching the demo modules (Ctrl-C to stop; the modules deregister on the way out):")
	go readyForAgents(ctx, base, keys[persistence.RoleAdmin].APIKey, agentKey.APIKey, keys[persistence.RoleOperator].APIKey, servers, stdout)
	watchClient := fleetclient.New(base, keys[persistence.RoleOperator].APIKey)
	err = demo.RunModules(ctx, base, keys[persistence.RoleModule].APIKey, servers, demo.RunOptions{
		Out: stdout, MonitorPeriod: cfg.MonitorInterval, Watch: watchClient,
	})
	if ctx.Err() != nil {
		say("\nStopped: the demo modules deregistered; the service drained its writer.")
		return nil
	}
	return err
}

// startDemoNodes starts the demo's service: one node, or with nodes > 1 a private etcd and a cluster of
// nodes on the HTTP ports after cfg's (cfg becomes the first node's configuration). stop closes every
// node and then etcd; on an error nothing started is left running.
func startDemoNodes(ctx context.Context, cfg *service.Config, nodes int, dir string, logFile io.Writer, stderr io.Writer) (svc *service.Service, others []*service.Service, stop func(), err error) {
	var stops []func() // run in reverse order
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	closeNode := func(s *service.Service) func() {
		return func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			if err := s.Close(c); err != nil {
				fmt.Fprintln(stderr, "demo: shutdown:", err)
			}
		}
	}
	if nodes > 1 {
		stopEtcd, err := startDemoEtcd(ctx, dir, logFile)
		if err != nil {
			return nil, nil, nil, err
		}
		stops = append(stops, stopEtcd)
		_, portS, _ := net.SplitHostPort(cfg.HTTPAddr)
		var httpPort int
		if _, err := fmt.Sscan(portS, &httpPort); err != nil || httpPort == 0 {
			return nil, nil, nil, usageError{fmt.Sprintf("demo --nodes: --http-addr %q needs a fixed port (the other nodes take the next ones)", cfg.HTTPAddr)}
		}
		base := *cfg
		*cfg = demoNodeConfig(base, 0, httpPort)
		for i := 1; i < nodes; i++ {
			s, err := service.Start(ctx, demoNodeConfig(base, i, httpPort), service.Options{LogOutput: logFile})
			if err != nil {
				return nil, nil, nil, fmt.Errorf("demo: node %d: %w", i+1, err)
			}
			others = append(others, s)
			stops = append(stops, closeNode(s))
		}
	}
	svc, err = service.Start(ctx, *cfg, service.Options{LogOutput: logFile})
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, closeNode(svc))
	return svc, others, stop, nil
}

// freshDemoDatabase recreates the demo database on pg (so the demo starts from nothing), migrates it,
// points cfg at it, and creates the demo tenant with one key of each role and a second administrator's
// key for the agent on /mcp: a call must be approved by another key than the one that asked for it, so
// the person in the dashboard and the agent need a key each.
func freshDemoDatabase(ctx context.Context, pg *pgserver.Server, cfg *service.Config) (uuid.UUID, map[persistence.Role]persistence.CreatedKey, persistence.CreatedKey, error) {
	var agent persistence.CreatedKey
	if err := recreateDatabase(ctx, pg.AdminURL("postgres"), demoDatabase); err != nil {
		return uuid.Nil, nil, agent, err
	}
	cfg.AdminDatabaseURL = pg.AdminURL(demoDatabase)
	cfg.DatabaseURL = pg.URLFor("cyberos_app", demoDatabase)
	if _, err := migrations.Up(ctx, cfg.AdminDatabaseURL); err != nil {
		return uuid.Nil, nil, agent, err
	}
	admin, err := persistence.OpenAdmin(ctx, cfg.AdminDatabaseURL)
	if err != nil {
		return uuid.Nil, nil, agent, err
	}
	defer admin.Close()
	tenant, err := admin.CreateTenant(ctx, "demo")
	if err != nil {
		return uuid.Nil, nil, agent, err
	}
	keys := map[persistence.Role]persistence.CreatedKey{}
	for _, r := range []persistence.Role{persistence.RoleAdmin, persistence.RoleOperator, persistence.RoleModule} {
		k, err := admin.CreateAPIKey(ctx, tenant, r)
		if err != nil {
			return uuid.Nil, nil, agent, err
		}
		keys[r] = k
	}
	if agent, err = admin.CreateAPIKey(ctx, tenant, persistence.RoleAdmin); err != nil {
		return uuid.Nil, nil, agent, err
	}
	return tenant, keys, agent, nil
}

// allowDemoServers lets the service reach the demo's MCP servers, which listen on loopback (the endpoint
// policy refuses it unless listed), and gives it a key to seal credentials an operator may configure (a
// fresh one per run: the demo database is fresh too).
func allowDemoServers(cfg *service.Config) error {
	cfg.EndpointAllowlist = append(cfg.EndpointAllowlist, "127.0.0.1", "::1", "localhost")
	if cfg.SecretKey != nil {
		return nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	key, err := secrets.ParseKey(hex.EncodeToString(raw[:]))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	cfg.SecretKey = key
	return nil
}

func recreateDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("demo: connect: %w", err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("demo: drop the previous demo database: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return fmt.Errorf("demo: create database: %w", err)
	}
	return nil
}

func printBanner(w io.Writer, base, tenant string, keys map[persistence.Role]persistence.CreatedKey, agentKey string,
	servers []*demo.Server, pgKind, logPath string, cfg service.Config) {
	mod, op, adm := keys[persistence.RoleModule].APIKey, keys[persistence.RoleOperator].APIKey, keys[persistence.RoleAdmin].APIKey
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("")
	p("mcpfleet demo is running at %s   (PostgreSQL: %s; service log: %s)", base, pgKind, logPath)
	p("Dashboard: %s/ui/   (sign in with the admin or the operator key below)", base)
	p("H = %s, monitor every %s: a server is degraded after %s of silence and unhealthy after %s.",
		cfg.HeartbeatInterval, cfg.MonitorInterval, 2*cfg.HeartbeatInterval, 3*cfg.HeartbeatInterval)
	p("MCP endpoint for agents: %s/mcp   (Streamable HTTP; the agent's key below as bearer; docs/mcp-endpoint.md)", base)
	p("  List its tools, then call the flaky server's tool (told why and when to retry while it is down) and one that")
	p("  waits for your approval in the dashboard (sign in with the admin key: the call waits on the calendar server's")
	p("  card; approve it within 60 s, the Inspector's timeout; the agent's own key may not approve its call):")
	insp := fmt.Sprintf(`npx @modelcontextprotocol/inspector --cli %s/mcp --transport http --header "Authorization: Bearer %s"`, base, agentKey)
	p("  %s --method tools/list", insp)
	p("  %s --method tools/call --tool-name flaky.echo --tool-arg text=hello", insp)
	p("  %s --method tools/call --tool-name %s.create_event --tool-arg title=Demo --tool-arg date=%s", insp, demoApprovalServer, time.Now().AddDate(0, 0, 1).Format("2006-01-02"))
	p("")
	p("Tenant %s; API keys (shown once):", tenant)
	p("  admin     %s", adm)
	p("  agent     %s   (an administrator's key too, for the agent on /mcp)", agentKey)
	p("  operator  %s", op)
	p("  module    %s", mod)
	p("")
	p("Demo MCP servers (official Go SDK, Streamable HTTP):")
	for _, s := range servers {
		names := make([]string, len(s.Tools))
		for i, t := range s.Tools {
			names[i] = t.Name
		}
		p("  %-9s %s  tools: %s", s.Name, s.Endpoint, strings.Join(names, ", "))
	}
	p("")
	p("Try it (paste into a shell):")
	p("  export MCPFLEET=%s MODULE_KEY=%s OPERATOR_KEY=%s", base, mod, op)
	p(`  curl -s $MCPFLEET/v1/mcp/servers -H "Authorization: Bearer $OPERATOR_KEY"`)
	p(`  curl -s -X POST $MCPFLEET/v1/mcp/servers/register -H "Authorization: Bearer $MODULE_KEY" -H 'Content-Type: application/json' \`)
	p(`       -d '{"module_name":"mine","version":"1.0.0","supported_protocols":["2025-11-25"],"capability_advertisement":{"tools":[{"name":"hello","description":"says hello","inputSchema":{"type":"object"}}]}}'`)
	p(`  export SERVER_ID=<server_id from the answer above>`)
	p(`  curl -s -X POST $MCPFLEET/v1/mcp/servers/heartbeat -H "Authorization: Bearer $MODULE_KEY" -H 'Content-Type: application/json' -d "{\"server_id\":\"$SERVER_ID\"}"`)
	p(`  curl -s $MCPFLEET/v1/mcp/servers/$SERVER_ID -H "Authorization: Bearer $OPERATOR_KEY"`)
	p(`  curl -s $MCPFLEET/v1/mcp/servers/$SERVER_ID/skills -H "Authorization: Bearer $OPERATOR_KEY"`)
	p(`  curl -s "$MCPFLEET/v1/mcp/audit?server_id=$SERVER_ID" -H "Authorization: Bearer $OPERATOR_KEY"`)
	p(`  curl -s "$MCPFLEET/v1/mcp/servers?status=unhealthy" -H "Authorization: Bearer $OPERATOR_KEY"`)
	p(`  curl -s -X POST $MCPFLEET/v1/mcp/servers/deregister -H "Authorization: Bearer $MODULE_KEY" -H 'Content-Type: application/json' -d "{\"server_id\":\"$SERVER_ID\"}"`)
	p(`  curl -s $MCPFLEET/healthz; curl -s $MCPFLEET/readyz`)
	p("")
}

// alertReceiver is the demo's stand-in for an alerting system: it verifies each alert's signature and
// prints it.
type alertReceiver struct {
	url, secret string
	srv         *http.Server
	wg          sync.WaitGroup
}

func startAlertReceiver(out io.Writer) (*alertReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: alert receiver: %w", err)
	}
	key, _, err := persistence.GenerateAPIKey() // any 256-bit random string will do as the secret
	if err != nil {
		return nil, err
	}
	a := &alertReceiver{url: "http://" + ln.Addr().String() + "/alerts", secret: key}
	var mu sync.Mutex
	a.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || r.Header.Get(actors.SignatureHeader) != actors.Sign([]byte(a.secret), body) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var al struct {
			Kind       string `json:"kind"`
			ModuleName string `json:"module_name"`
			ServerID   string `json:"server_id"`
			EventID    string `json:"event_id"`
			TraceID    string `json:"trace_id"`
		}
		_ = json.Unmarshal(body, &al)
		mu.Lock()
		fmt.Fprintf(out, "%s ALERT %s (webhook, signature verified): %s (%s) — event %s, trace %s\n",
			time.Now().Format("15:04:05"), al.Kind, al.ModuleName, al.ServerID, al.EventID, al.TraceID)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	a.wg.Go(func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(out, "demo: alert receiver:", err)
		}
	})
	return a, nil
}

func (a *alertReceiver) Close() {
	_ = a.srv.Close()
	a.wg.Wait()
}
