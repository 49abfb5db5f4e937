package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/migrations"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// usageError is a mistake in the command line or the environment: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

const usage = `usage: mcpfleet <command> [flags]

commands:
  serve                                    run the service (MCPFLEET_DATABASE_URL, MCPFLEET_HTTP_ADDR, ...)
  migrate                                  apply the schema over MCPFLEET_ADMIN_DATABASE_URL
  tenant create --name NAME                create a tenant; prints {"tenant_id": ...}
  apikey create --tenant ID --role ROLE [--module NAME ...]
                                           create an API key (role: module, operator, admin; --module
                                           binds a module key to a module name, repeatable);
                                           prints {"key_id", "api_key", "role", "modules"}
  apikey list --tenant ID                  list a tenant's keys (no secrets), revoked ones included
  apikey revoke --key-id ID                revoke a key (it stops working within 30 s)
  server approval --tenant ID --server ID --on|--off
                                           switch a server's approval requirement at once (recorded as
                                           by "cli"; the API needs a second admin key to switch it off)
  demo                                     find or start PostgreSQL, migrate, create a demo tenant and keys,
                                           serve, and run demo MCP servers that register and heartbeat

Run "mcpfleet <command> -h" for a command's flags.`

// run is the whole command: it parses args, reads the environment only through getenv, and writes
// results to stdout and diagnostics to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{usage}
	}
	cfg, err := service.FromEnv(getenv)
	if err != nil {
		return usageError{err.Error()} // a bad environment value is the caller's mistake: exit 2
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, cfg, args[1:], stderr)
	case "migrate":
		return cmdMigrate(ctx, cfg, args[1:], stdout, stderr)
	case "tenant":
		return cmdTenant(ctx, cfg, args[1:], stdout, stderr)
	case "apikey":
		return cmdAPIKey(ctx, cfg, args[1:], stdout, stderr)
	case "server":
		return cmdServer(ctx, cfg, args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(ctx, cfg, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q\n\n%s", args[0], usage)}
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return usageError{"help requested"}
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}

// serveFlags binds the service's flags, defaulting to the environment's values.
func serveFlags(fs *flag.FlagSet, cfg *service.Config) {
	fs.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "runtime database URL, as the app role (MCPFLEET_DATABASE_URL)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "listen address (MCPFLEET_HTTP_ADDR)")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "heartbeat interval H (MCPFLEET_HEARTBEAT_INTERVAL)")
	fs.DurationVar(&cfg.MonitorInterval, "monitor-interval", cfg.MonitorInterval, "monitor period (MCPFLEET_MONITOR_INTERVAL)")
	fs.StringVar(&cfg.AlertWebhookURL, "alert-webhook-url", cfg.AlertWebhookURL, "unhealthy alert webhook (MCPFLEET_ALERT_WEBHOOK_URL)")
}

func cmdServe(ctx context.Context, cfg service.Config, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	serveFlags(fs, &cfg)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	setMemoryLimit()
	return service.Run(ctx, cfg, service.Options{LogOutput: stderr})
}

func adminURL(fs *flag.FlagSet, cfg *service.Config) {
	fs.StringVar(&cfg.AdminDatabaseURL, "admin-database-url", cfg.AdminDatabaseURL, "owner database URL (MCPFLEET_ADMIN_DATABASE_URL)")
}

func requireAdminURL(cfg service.Config) error {
	if cfg.AdminDatabaseURL == "" {
		return errors.New("MCPFLEET_ADMIN_DATABASE_URL is not set: give the owner connection (e.g. postgres://postgres@127.0.0.1:5432/mcpfleet)")
	}
	return nil
}

func cmdMigrate(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	adminURL(fs, &cfg)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireAdminURL(cfg); err != nil {
		return err
	}
	n, err := migrations.Up(ctx, cfg.AdminDatabaseURL)
	if err != nil {
		return err
	}
	return writeJSON(stdout, map[string]any{"applied": n})
}

func cmdTenant(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return usageError{"usage: mcpfleet tenant create --name NAME"}
	}
	fs := newFlags("tenant create", stderr)
	adminURL(fs, &cfg)
	name := fs.String("name", "", "tenant name (1 to 200 characters)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if strings.TrimSpace(*name) == "" {
		return usageError{"tenant create: --name is required"}
	}
	if err := requireAdminURL(cfg); err != nil {
		return err
	}
	admin, err := persistence.OpenAdmin(ctx, cfg.AdminDatabaseURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	id, err := admin.CreateTenant(ctx, *name)
	if err != nil {
		return err
	}
	return writeJSON(stdout, map[string]any{"tenant_id": id})
}

const apikeyUsage = `usage: mcpfleet apikey create --tenant ID --role module|operator|admin [--module NAME ...]
       mcpfleet apikey list --tenant ID
       mcpfleet apikey revoke --key-id ID`

func cmdAPIKey(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{apikeyUsage}
	}
	switch args[0] {
	case "create":
		return cmdAPIKeyCreate(ctx, cfg, args[1:], stdout, stderr)
	case "list":
		return cmdAPIKeyList(ctx, cfg, args[1:], stdout, stderr)
	case "revoke":
		return cmdAPIKeyRevoke(ctx, cfg, args[1:], stdout, stderr)
	}
	return usageError{fmt.Sprintf("apikey: unknown subcommand %q\n%s", args[0], apikeyUsage)}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// openAdmin checks the owner connection is configured and opens it.
func openAdmin(ctx context.Context, cfg service.Config) (*persistence.Admin, error) {
	if err := requireAdminURL(cfg); err != nil {
		return nil, err
	}
	return persistence.OpenAdmin(ctx, cfg.AdminDatabaseURL)
}

func cmdAPIKeyCreate(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey create", stderr)
	adminURL(fs, &cfg)
	tenant := fs.String("tenant", "", "tenant id")
	role := fs.String("role", "", "module, operator or admin")
	var modules stringList
	fs.Var(&modules, "module", "bind a module key to this module name (repeatable; none: unbound)")
	if err := parse(fs, args); err != nil {
		return err
	}
	tid, err := uuid.Parse(*tenant)
	if err != nil {
		return usageError{"apikey create: --tenant must be a tenant id (a UUID)"}
	}
	r, err := persistence.ParseRole(*role)
	if err != nil {
		return usageError{"apikey create: --role: " + err.Error()}
	}
	if len(modules) > 0 && r != persistence.RoleModule {
		return usageError{"apikey create: --module binds module keys only: use it with --role module"}
	}
	for _, m := range modules {
		if err := persistence.ValidModuleName(m); err != nil {
			return usageError{fmt.Sprintf("apikey create: --module %q: %v", m, err)}
		}
	}
	admin, err := openAdmin(ctx, cfg)
	if err != nil {
		return err
	}
	defer admin.Close()
	key, err := admin.CreateAPIKey(ctx, tid, r, modules...)
	if errors.Is(err, persistence.ErrNotFound) {
		return fmt.Errorf("apikey create: no tenant %s", tid)
	}
	if err != nil {
		return err
	}
	return writeJSON(stdout, key)
}

func cmdAPIKeyList(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey list", stderr)
	adminURL(fs, &cfg)
	tenant := fs.String("tenant", "", "tenant id")
	if err := parse(fs, args); err != nil {
		return err
	}
	tid, err := uuid.Parse(*tenant)
	if err != nil {
		return usageError{"apikey list: --tenant must be a tenant id (a UUID)"}
	}
	admin, err := openAdmin(ctx, cfg)
	if err != nil {
		return err
	}
	defer admin.Close()
	keys, err := admin.ListAPIKeys(ctx, tid)
	if errors.Is(err, persistence.ErrNotFound) {
		return fmt.Errorf("apikey list: no tenant %s", tid)
	}
	if err != nil {
		return err
	}
	if keys == nil {
		keys = []persistence.KeyInfo{}
	}
	return writeJSON(stdout, map[string]any{"keys": keys})
}

func cmdAPIKeyRevoke(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("apikey revoke", stderr)
	adminURL(fs, &cfg)
	keyID := fs.String("key-id", "", "the key_id to revoke")
	if err := parse(fs, args); err != nil {
		return err
	}
	kid, err := uuid.Parse(*keyID)
	if err != nil {
		return usageError{"apikey revoke: --key-id must be a key id (a UUID, as apikey create and apikey list print it)"}
	}
	admin, err := openAdmin(ctx, cfg)
	if err != nil {
		return err
	}
	defer admin.Close()
	k, err := admin.RevokeAPIKey(ctx, kid)
	if errors.Is(err, persistence.ErrNotFound) {
		return fmt.Errorf("apikey revoke: no key %s", kid)
	}
	if err != nil {
		return err
	}
	return writeJSON(stdout, map[string]any{"key_id": k.KeyID, "tenant_id": k.TenantID, "revoked_at": k.RevokedAt})
}

const serverUsage = `usage: mcpfleet server approval --tenant ID --server ID --on|--off`

func cmdServer(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "approval" {
		return usageError{serverUsage}
	}
	return cmdServerApproval(ctx, cfg, args[1:], stdout, stderr)
}

// cmdServerApproval switches a server's requires_approval at once. It is the single-administrator
// installation's way to switch approval off: through the API that needs a second admin key (four eyes, so
// that an agent holding an admin key cannot pass its own gate); this command runs on the host with the owner
// database connection, which no API key gives. The change is recorded like any other (requested_by "cli").
func cmdServerApproval(ctx context.Context, cfg service.Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("server approval", stderr)
	adminURL(fs, &cfg)
	tenant := fs.String("tenant", "", "tenant id")
	server := fs.String("server", "", "server id")
	on := fs.Bool("on", false, "require approval for every call of the server's tools")
	off := fs.Bool("off", false, "call the server's tools without approval")
	if err := parse(fs, args); err != nil {
		return err
	}
	tid, err := uuid.Parse(*tenant)
	if err != nil {
		return usageError{"server approval: --tenant must be a tenant id (a UUID)"}
	}
	sid, err := uuid.Parse(*server)
	if err != nil {
		return usageError{"server approval: --server must be a server id (a UUID)"}
	}
	if *on == *off {
		return usageError{"server approval: give exactly one of --on and --off"}
	}
	admin, err := openAdmin(ctx, cfg)
	if err != nil {
		return err
	}
	defer admin.Close()
	up, err := admin.SetApproval(ctx, tid, sid, *on, time.Now().UTC())
	if errors.Is(err, persistence.ErrNotFound) {
		return fmt.Errorf("server approval: no server %s in tenant %s", sid, tid)
	}
	if err != nil {
		return err
	}
	out := map[string]any{"server_id": sid, "module_name": up.Server.ModuleName, "requires_approval": up.Config.RequiresApproval, "change_id": nil}
	if up.Applied != nil {
		out["change_id"] = up.Applied.ChangeID
	}
	return writeJSON(stdout, out)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}
