// Package persistence is mcpfleet's PostgreSQL storage, on pgx/v5.
//
// Every unit of work runs in a transaction that first calls set_config('auth.tenant_id', $1, true)
// (inTenantTx for one tenant, inTenantBatch for several; a nil tenant is refused before anything is sent), so
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
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
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
	// Spans, if set, starts the writer.apply span of each command Commit applies (see WithParents).
	Spans trace.Tracer
	// AppName prefixes the application_name reported to the server; each Store adds "#<random>" so
	// that WaitForPredecessors can tell its own sessions from an earlier process's.
	AppName string
	// Node names this process as the maker of tool calls (mcp_calls.node): InterruptRunning leaves the
	// running calls of this node and of live nodes (TouchNode) alone. "" is a node of no name: its calls
	// look like a previous process's to everyone.
	Node string
	// MaxServersPerTenant caps how many servers (of any status) one tenant may have; a registration or
	// configuration that would create one more is refused with ErrServerLimit. 0: no limit.
	MaxServersPerTenant int
}

// Store is the runtime store. It is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	appName    string       // the full application_name of this store's sessions; "" when none was asked for
	spans      trace.Tracer // nil: Commit starts no spans
	maxServers int          // Options.MaxServersPerTenant
	node       string       // Options.Node
	analyzer   fleetAnalyzer
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
		cfg.ConnConfig.Tracer = routeBatches(opt.Tracer)
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		registerUUID(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	return &Store{pool: pool, appName: appName, spans: opt.Spans, maxServers: opt.MaxServersPerTenant, node: opt.Node}, nil
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
	return inTenantTx(ctx, s.pool, pgx.TxOptions{}, tenantID, fn)
}

// beginner opens transactions: a pool (the runtime store's or the admin's). inTenantTx opens one with
// BeginTx; inTenantBatch sends one with its statements (SendBatch of a pgx.Batch that begins it).
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ErrNoTenant refuses a tenant transaction (or a command) without a tenant, before anything is sent. It
// is permanent: IsTransient reports false.
var ErrNoTenant = errors.New("set tenant: nil tenant id")

// setTenantSQL scopes the rest of a transaction to the tenant in $1. SetTenant (which inTenantTx calls)
// and readTenants send it; inTenantBatch sends stepSQL.
const setTenantSQL = "SELECT set_config('auth.tenant_id', $1, true)"

// inTenantTx opens every single-tenant transaction of this package: it begins a transaction on db with
// opts, scopes it to tenantID, runs fn and commits if fn returns nil. A nil tenantID fails closed with
// ErrNoTenant before a transaction is opened.
func inTenantTx(ctx context.Context, db beginner, opts pgx.TxOptions, tenantID uuid.UUID, fn func(pgx.Tx) error) error {
	if tenantID == uuid.Nil {
		return ErrNoTenant
	}
	tx, err := db.BeginTx(ctx, opts)
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

// A tenantStep is one tenant's part of a multi-tenant transaction (inTenantBatch): the statements
// queue appends run scoped to tenant, and read consumes their results in order. The step's statements
// (its set_config first) are traced under each of spans (see routeBatches); none: under the batch's span.
//
// If fence is fenced, the step's set_config statement also checks it (see WithFence): the statements
// queue appends write no row unless it passed, and *fenceOK says whether it did before read is called.
type tenantStep struct {
	tenant  uuid.UUID
	queue   func(b *pgx.Batch)
	read    func(br pgx.BatchResults) error
	spans   []trace.Span
	fence   Fence
	fenceOK *bool
	// genericPlans makes the step's statements run on generic plans (see planModeFor); false: custom
	// plans, the session's mode (Open).
	genericPlans bool
}

// planModeFor is the plan_cache_mode a step's opening statement sets for the step's statements. A set
// statement (registerSet, transitionSet) has one fixed shape — input arrays joined by key to the
// fleet's tables — whose plan does not depend on its parameters, so it runs on the generic plan its
// prepared statement keeps, and so do the foreign-key checks and triggers it fires (a custom plan for
// each of those cost 20–25 % of PostgreSQL's CPU per registration at 100,000 servers). The generic plan
// is not frozen with a fleet's old statistics: analyze_fleet's ANALYZE, which the store runs as the fleet
// doubles (analyze.go), invalidates it and the next execution plans again. Every other statement keeps
// custom plans.
func planModeFor(generic bool) string {
	if generic {
		return "force_generic_plan"
	}
	return "force_custom_plan"
}

// stepSQL opens each step of inTenantBatch: it scopes what follows to the tenant in $1 and turns the
// fence flag of migration 0016 off, so a fenced step before cannot drop this step's rows (and clears
// mcpfleet.fence, see fencedStepSQL), and sets the step's plan mode, $2 (planModeFor).
const stepSQL = "SELECT set_config('auth.tenant_id', $1, true), set_config('mcpfleet.fenced', 'off', true), set_config('mcpfleet.fence', '', true), set_config('plan_cache_mode', $2, true)"

// fencedStepSQL is stepSQL for a step under the fence ($2, $3): the flag is on, and the step's rows are
// dropped, unless the epoch is still the shard's; the shard's row is held FOR SHARE until COMMIT. It also
// names the fence, "shard:epoch", in mcpfleet.fence for the step's statements, so a trigger can record
// which fence a row was written under (the chaos suite's owner check does; nothing in the service reads it).
// Its third column sets the step's plan mode, $4.
const fencedStepSQL = `SELECT set_config('auth.tenant_id', $1, true), set_config('mcpfleet.fenced',
		CASE WHEN EXISTS (SELECT 1 FROM shard_owners WHERE shard = $2 AND epoch = $3 FOR SHARE) THEN 'off' ELSE 'on' END,
		true) = 'off' AND set_config('mcpfleet.fence', $2::int || ':' || $3::bigint, true) <> '',
		set_config('plan_cache_mode', $4, true)`

// inTenantBatch opens every multi-tenant transaction of this package that writes (readTenants opens those
// that only read): it sends all steps in one transaction and one pipelined batch, each step's statements
// preceded by the set_config of its tenant, reads the results back in order and commits. A step without a tenant fails the whole transaction
// closed with ErrNoTenant before it is opened.
//
// The transaction's BEGIN goes in the batch (pgx.Batch.BeginTx), so a transaction costs two round trips
// to PostgreSQL — the batch, the COMMIT — not three. Each is a wait that, on a service short of CPU, ends
// at the back of the Go scheduler's queue behind every runnable request goroutine: the writer's and the
// stamper's commits wait through each one. The COMMIT stays a round trip of its own, after every result
// was read: a read that refuses the transaction (a statement's rows that break a rule checked in Go)
// must still be able to roll it back, which an implicit transaction (no BEGIN, committed at the batch's
// end) would not let it.
func inTenantBatch(ctx context.Context, db beginner, steps []tenantStep) error {
	if len(steps) == 0 {
		return nil
	}
	for _, st := range steps {
		if st.tenant == uuid.Nil {
			return ErrNoTenant
		}
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	var spans [][]trace.Span // spans[i] traces the batch's i-th statement; nil when no step has a span
	for _, st := range steps {
		from := b.Len()
		if st.fence.Fenced() {
			b.Queue(fencedStepSQL, st.tenant.String(), st.fence.Shard, st.fence.Epoch, planModeFor(st.genericPlans))
		} else {
			b.Queue(stepSQL, st.tenant.String(), planModeFor(st.genericPlans))
		}
		st.queue(b)
		if len(st.spans) > 0 && spans == nil {
			spans = make([][]trace.Span, from, b.Len())
		}
		for spans != nil && len(spans) < b.Len() {
			spans = append(spans, st.spans)
		}
	}
	if spans != nil {
		ctx = withStatementSpans(ctx, spans)
	}
	br := db.SendBatch(ctx, b)
	tx := br.Tx()
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit; gives a pool's connection back
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("begin: %w", err)
	}
	for _, st := range steps {
		var err error
		if st.fence.Fenced() {
			var tenant, mode string
			err = br.QueryRow().Scan(&tenant, st.fenceOK, &mode)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("set tenant: %w", err)
		}
		if err := st.read(br); err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// SetTenant scopes the rest of transaction tx to tenantID; a nil tenantID fails closed. The store's
// own transactions are opened scoped by inTenantTx and inTenantBatch; SetTenant is for tests and tools
// that open a transaction on a pool of their own.
func SetTenant(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID) error {
	if tenantID == uuid.Nil {
		return ErrNoTenant
	}
	if _, err := tx.Exec(ctx, setTenantSQL, tenantID.String()); err != nil {
		return fmt.Errorf("set tenant: %w", err)
	}
	return nil
}

// RoleCheck describes the runtime role as the database sees it.
type RoleCheck struct {
	User      string
	Superuser bool
	BypassRLS bool
	// PrivilegedRoles are the roles with SUPERUSER or BYPASSRLS the role is a member of, directly or
	// through other roles (it can SET ROLE to them), other than itself.
	PrivilegedRoles []string
	// Schema is the schema holding mcpfleet's tables, as the role's search path resolves mcp_servers.
	Schema string
	// Owned are the objects of that schema — the schema itself, every table, view, sequence and
	// function in it — whose owner is the role or a role it is a member of.
	Owned []OwnedObject
}

// OwnedObject is an object of mcpfleet's schema the runtime role could act on as its owner.
type OwnedObject struct {
	Kind  string // schema, table, view, sequence, function, ...
	Name  string
	Owner string // the owning role
	// Inherited says the role has the owner's privileges without SET ROLE (pg_has_role USAGE); without
	// it, it is still a member and can SET ROLE to the owner.
	Inherited bool
}

func (o OwnedObject) String() string { return o.Kind + " " + o.Name }

// CheckRuntimeRole refuses a connection whose role would make row-level security not apply: a
// superuser, a role with BYPASSRLS, a member of a role with either, or the owner — or a member of the
// owner (pg_has_role MEMBER: it can SET ROLE to it and switch RLS off, or drop and recreate a table) —
// of the schema holding the mcp_servers table the role's search path resolves or of any table, view,
// sequence or function in it. The objects are read from the catalogue, so a table a later migration
// adds is covered without a list to keep. It returns what it found and, when the role is refused, an
// error saying why and what to connect as instead.
func (s *Store) CheckRuntimeRole(ctx context.Context) (RoleCheck, error) {
	var rc RoleCheck
	err := s.pool.QueryRow(ctx, `SELECT current_user, r.rolsuper, r.rolbypassrls,
			coalesce((SELECT array_agg(p.rolname::text ORDER BY p.rolname) FROM pg_roles p
				WHERE (p.rolsuper OR p.rolbypassrls) AND p.rolname <> current_user
				AND pg_has_role(current_user, p.oid, 'MEMBER')), '{}'),
			coalesce((SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE c.oid = to_regclass('mcp_servers')), '')
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&rc.User, &rc.Superuser, &rc.BypassRLS, &rc.PrivilegedRoles, &rc.Schema)
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	const useAppRole = "connect MCPFLEET_DATABASE_URL as the app role (cyberos_app)"
	switch {
	case rc.Superuser:
		return rc, fmt.Errorf("role %q is a superuser, so row-level security would not apply: %s", rc.User, useAppRole)
	case rc.BypassRLS:
		return rc, fmt.Errorf("role %q has BYPASSRLS, so row-level security would not apply: %s", rc.User, useAppRole)
	case len(rc.PrivilegedRoles) > 0:
		return rc, fmt.Errorf("role %q is a member of %s, which has SUPERUSER or BYPASSRLS: it can SET ROLE to it and row-level security would not apply; %s, which is granted no other role",
			rc.User, quoteList(rc.PrivilegedRoles), useAppRole)
	case rc.Schema == "":
		return rc, errors.New("the database has no mcp_servers table: run `mcpfleet migrate` with MCPFLEET_ADMIN_DATABASE_URL first")
	}
	rows, err := s.pool.Query(ctx, `WITH ns AS (SELECT oid, nspname, nspowner FROM pg_namespace WHERE nspname = $1),
		objects AS (
			SELECT 'schema' AS kind, ns.nspname::text AS name, ns.nspowner AS owner FROM ns
			UNION ALL
			SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'v' THEN 'view'
					WHEN 'm' THEN 'materialized view' WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table' END,
				c.relname::text, c.relowner
			FROM pg_class c JOIN ns ON c.relnamespace = ns.oid WHERE c.relkind IN ('r','p','v','m','S','f')
			UNION ALL
			SELECT 'function', p.proname::text, p.proowner FROM pg_proc p JOIN ns ON p.pronamespace = ns.oid)
		SELECT o.kind, o.name, r.rolname::text, pg_has_role(current_user, o.owner, 'USAGE')
		FROM objects o JOIN pg_roles r ON r.oid = o.owner
		WHERE pg_has_role(current_user, o.owner, 'MEMBER')
		ORDER BY o.kind <> 'schema', o.kind, o.name`, rc.Schema)
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	rc.Owned, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OwnedObject, error) {
		var o OwnedObject
		err := row.Scan(&o.Kind, &o.Name, &o.Owner, &o.Inherited)
		return o, err
	})
	if err != nil {
		return rc, fmt.Errorf("check runtime role: %w", err)
	}
	if len(rc.Owned) == 0 {
		return rc, nil
	}
	return rc, ownedError(rc.User, rc.Owned)
}

// ownedError says which owner roles the runtime role reaches, and which of their objects (at most five
// named per owner).
func ownedError(user string, owned []OwnedObject) error {
	type ownerObjects struct {
		objects   []string
		inherited bool
	}
	var owners []string
	by := map[string]*ownerObjects{}
	for _, o := range owned {
		oo := by[o.Owner]
		if oo == nil {
			oo = &ownerObjects{}
			by[o.Owner] = oo
			owners = append(owners, o.Owner)
		}
		oo.objects = append(oo.objects, o.String())
		oo.inherited = oo.inherited || o.Inherited
	}
	var parts []string
	for _, name := range owners {
		oo := by[name]
		objs := oo.objects
		if len(objs) > 5 {
			objs = append(objs[:5:5], fmt.Sprintf("%d more", len(oo.objects)-5))
		}
		if name == user {
			parts = append(parts, fmt.Sprintf("it owns %s", strings.Join(objs, ", ")))
			continue
		}
		how := "can SET ROLE to it"
		if oo.inherited {
			how = "inherits its privileges"
		}
		parts = append(parts, fmt.Sprintf("it is a member of role %q (it %s), which owns %s", name, how, strings.Join(objs, ", ")))
	}
	return fmt.Errorf("role %q could switch row-level security off or drop and recreate mcpfleet's tables: %s; connect MCPFLEET_DATABASE_URL as the app role (cyberos_app), which owns nothing and is a member of no owner role, not as the migration owner or one of its members",
		user, strings.Join(parts, "; "))
}

// quoteList writes names as "a", "b".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// IsTransient reports whether err is worth retrying: the connection failed or was lost, the server is
// shutting down or overloaded, or a serialization conflict occurred. Constraint, privilege and syntax
// errors are permanent.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	// The store's own verdicts are permanent: a retry would get the same answer.
	for _, permanent := range []error{ErrNotFound, ErrConflict, ErrNotOwned, ErrServerLimit, ErrCatalogueSource, ErrFenced} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, ErrNoTenant) {
		return false
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

// serverLimitCode is the SQLSTATE the mcp_servers_count trigger (migration 0010) raises past the limit.
const serverLimitCode = "MF001"

func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	if errors.As(err, &pgErr) && pgErr.Code == serverLimitCode {
		return fmt.Errorf("%w: %s", ErrServerLimit, pgErr.Message)
	}
	return err
}
