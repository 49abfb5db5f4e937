// Package persistence is mcpfleet's PostgreSQL storage, on pgx/v5.
//
// Every unit of work runs in a transaction that first calls set_config('auth.tenant_id', $1, true), so
// the row-level security policies of the migrations apply to each statement and the setting ends with
// the transaction (never a session-level SET on a pooled connection). A transaction that forgets the
// setting fails closed: the policies cast an empty setting to uuid and the statement errors.
//
// Driver errors are translated here: callers see ErrNotFound, ErrConflict, or a wrapped error that
// IsTransient classifies, never a pgconn type.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors returned by the store.
var (
	// ErrNotFound means the row does not exist or belongs to another tenant (the two are indistinguishable).
	ErrNotFound = errors.New("not found")
	// ErrConflict means a uniqueness or state rule refused the write.
	ErrConflict = errors.New("conflict")
)

// Options tunes the connection pool.
type Options struct {
	MaxConns int32           // default 8
	Tracer   pgx.QueryTracer // optional, e.g. an OpenTelemetry tracer
	// AppName prefixes the application_name reported to the server; each Store adds "#<random>" so
	// that WaitForPredecessors can tell its own sessions from an earlier process's.
	AppName string
}

// Store is the runtime store. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	appName string // the full application_name of this store's sessions; "" when none was asked for
}

// Open connects a pool to databaseURL. It does not check the role; see CheckRuntimeRole.
func Open(ctx context.Context, databaseURL string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open database: parse url: %w", errors.New(redactParseError(err)))
	}
	cfg.MaxConns = opt.MaxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 8
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 5 * time.Second
	var appName string
	if opt.AppName != "" {
		appName = opt.AppName + "#" + uuid.NewString()[:8]
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	// Plan every statement with its actual parameters. A generic plan is built once per connection, after a
	// few executions, from the statistics of that moment; where autovacuum is off or behind (it is off on
	// this project's machines), those are the statistics of an almost empty table, and the frozen plan keeps
	// scanning tables that have since grown to 100,000 rows — registration slowed from 500/s to 120/s that
	// way in the benchmark. Custom plans cost a little planning each time and never degrade.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if opt.Tracer != nil {
		cfg.ConnConfig.Tracer = opt.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	return &Store{pool: pool, appName: appName}, nil
}

// redactParseError keeps a URL parse error from echoing a password.
func redactParseError(err error) string {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return "invalid connection string"
	}
	return "invalid connection string"
}

// WaitForPredecessors waits, up to maxWait, until no session of an earlier process of this service
// (same role, same database, same application name prefix, another suffix) is left. A process killed
// with -9 may have a COMMIT still landing; the fleet must not be loaded from the database before it
// has, or a transition it committed would be decided a second time. It reports how many sessions were
// still there when it gave up (0 when none).
func (s *Store) WaitForPredecessors(ctx context.Context, maxWait time.Duration) (int, error) {
	if s.appName == "" {
		return 0, nil
	}
	prefix, _, _ := strings.Cut(s.appName, "#")
	deadline := time.Now().Add(maxWait)
	for {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND usename = current_user
			  AND application_name LIKE $1 || '#%' AND application_name <> $2`, prefix, s.appName).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("wait for predecessors: %w", err)
		}
		if n == 0 || !time.Now().Before(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// InTenant runs fn in a transaction scoped to tenantID by row-level security, and commits if fn
// returns nil. fn must not retain tx.
func (s *Store) InTenant(ctx context.Context, tenantID uuid.UUID, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := SetTenant(ctx, tx, tenantID); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// SetTenant scopes the rest of transaction tx to tenantID. It may be called again inside the same
// transaction to switch tenants, which is how one group commit carries several tenants' writes.
func SetTenant(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID) error {
	if tenantID == uuid.Nil {
		return errors.New("set tenant: nil tenant id")
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('auth.tenant_id', $1, true)", tenantID.String()); err != nil {
		return fmt.Errorf("set tenant: %w", err)
	}
	return nil
}

// RoleCheck describes the runtime role as the database sees it.
type RoleCheck struct {
	User       string
	Superuser  bool
	BypassRLS  bool
	OwnsTables []string
}

// CheckRuntimeRole refuses a connection whose role would make row-level security not apply: a
// superuser, a role with BYPASSRLS, or the owner of any mcpfleet table. It returns the role's
// attributes and a descriptive error when the role is refused.
func (s *Store) CheckRuntimeRole(ctx context.Context) (RoleCheck, error) {
	var rc RoleCheck
	err := s.pool.QueryRow(ctx, `SELECT current_user, r.rolsuper, r.rolbypassrls
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&rc.User, &rc.Superuser, &rc.BypassRLS)
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND pg_get_userbyid(c.relowner) = current_user
		AND c.relname IN ('mcp_servers','skill_registry','audit_events','alert_outbox','tenants','api_keys')
		ORDER BY 1`)
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	rc.OwnsTables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	switch {
	case rc.Superuser:
		return rc, fmt.Errorf("role %q is a superuser, so row-level security would not apply: connect MCPFLEET_DATABASE_URL as the app role (cyberos_app)", rc.User)
	case rc.BypassRLS:
		return rc, fmt.Errorf("role %q has BYPASSRLS, so row-level security would not apply: connect MCPFLEET_DATABASE_URL as the app role (cyberos_app)", rc.User)
	case len(rc.OwnsTables) > 0:
		return rc, fmt.Errorf("role %q owns %v, so it could bypass or drop row-level security: connect MCPFLEET_DATABASE_URL as the app role (cyberos_app), not the migration owner", rc.User, rc.OwnsTables)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'mcp_servers'`).Scan(&n); err != nil {
		return rc, fmt.Errorf("check schema: %w", err)
	}
	if n == 0 {
		return rc, errors.New("the database has no mcp_servers table: run `mcpfleet migrate` with MCPFLEET_ADMIN_DATABASE_URL first")
	}
	return rc, nil
}

// IsTransient reports whether err is worth retrying: the connection failed or was lost, the server is
// shutting down or overloaded, or a serialization conflict occurred. Constraint, privilege and syntax
// errors are permanent.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		// The server refused a new connection (down, starting, or refusing this role for now, e.g. a
		// FATAL 42501 while CONNECT is revoked): an outage, whatever the SQLSTATE says.
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53", "57", "58": // connection, resources, operator intervention, system
			return true
		case "40": // serialization failure, deadlock
			return true
		}
		return false
	}
	// Anything else from the driver (dial errors, io errors, closed pool) is a connection problem.
	return true
}

func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	return err
}
