// Package pgtest gives every test its own freshly migrated PostgreSQL database.
//
// The first New in a test binary finds a server, creates a template database and applies the migrations to
// it, once; every New then clones that template with CREATE DATABASE ... TEMPLATE, which takes
// milliseconds, and drops the clone WITH (FORCE) when the test ends. Tests may call New in parallel.
//
// The server is, in order: the superuser URL in MCPFLEET_TEST_DATABASE_URL if that variable is set (and
// then nothing else); the server at postgres://postgres@127.0.0.1:5432/postgres; a postgres:15 container
// through Docker, which the engine kills 30 minutes after it started (nothing else stops it). When none is
// found, New fails the test with what every attempt found, or skips it under -short: a suite must not pass
// by silently testing nothing. The server must be PostgreSQL 13 or later (DROP DATABASE ... WITH (FORCE))
// and must let the runtime role cyberos_app log in without a password (trust), as the private cluster and
// the container do: AppURL carries no password.
//
// Template and clone names carry the creation time as a unix timestamp (mcpfleet_tpl_<hash>_<unix>_<pid>,
// mcpfleet_t_<hash>_<unix>_<pid>_<n>). A process cannot drop its template when it exits, so the first New
// of each process drops such databases older than an hour that nobody is connected to; a test binary that
// runs longer than an hour therefore risks losing its template to another process.
package pgtest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/migrations"
	"github.com/mcpfleet/mcpfleet/pgserver"
)

// EnvURL names the environment variable holding a superuser URL of the server to test against.
const EnvURL = "MCPFLEET_TEST_DATABASE_URL"

// Name prefixes of the databases this package creates; the sweep drops stale ones by these.
const (
	templatePrefix = "mcpfleet_tpl_"
	clonePrefix    = "mcpfleet_t_"
)

const (
	staleAfter   = time.Hour        // age past which a leftover database is dropped
	dockerExpiry = 30 * time.Minute // the engine kills a container we started after this
	setupTimeout = 5 * time.Minute  // finding a server (maybe pulling an image) and migrating
	opTimeout    = time.Minute      // creating or dropping one clone
)

// migrateLockKey is a PostgreSQL advisory lock taken in the maintenance database while migrating a
// template. The migrations create the cluster-wide role cyberos_app if it is missing, which two test
// binaries migrating their own templates at once would otherwise race on.
const migrateLockKey int64 = 0x6d6370666c656574 // "mcpfleet"

// DB is one test's database, a clone of the migrated template.
type DB struct {
	Name     string // the database's name
	AdminURL string // connects as the superuser: no RLS applies
	AppURL   string // connects as migrations.AppRole without a password: RLS applies as in production
}

// shared is what the first New of the process prepared; it never changes afterwards.
type shared struct {
	server   *pgserver.Server // never closed: it outlives every test
	template string
	err      error
	noServer bool // err says no server was found, the only case -short skips
}

var (
	setupOnce sync.Once
	setup     shared

	// cloneMu serialises clone creation: CREATE DATABASE ... TEMPLATE fails while another session is
	// connected to the template, and nothing is gained by copying in parallel.
	cloneMu  sync.Mutex
	cloneSeq int // guarded by cloneMu
)

// prepared makes sure the first use of the process has prepared the server and the template, and fails
// tb (or skips it, with -short, when no server is found) if that did not work.
func prepared(tb testing.TB) {
	tb.Helper()
	setupOnce.Do(func() { setup = prepare(tb) })
	if setup.err != nil {
		if setup.noServer && testing.Short() {
			tb.Skipf("pgtest: skipped under -short: %v", setup.err)
		}
		tb.Fatalf("pgtest: %v", setup.err)
	}
}

// New returns a new database migrated to the latest schema, dropped when tb ends. The first call of the
// process also finds the server and migrates the template (see the package comment); its progress goes
// to that test's log. New fails tb (or skips it, with -short, when no server is found) rather than
// returning an error. It is safe for parallel tests.
func New(tb testing.TB) *DB {
	tb.Helper()
	prepared(tb)

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cloneMu.Lock()
	cloneSeq++
	name := fmt.Sprintf("%s%s_%d_%d_%d", clonePrefix, binaryHash(), time.Now().Unix(), os.Getpid(), cloneSeq)
	err := exec(ctx, setup.server.AdminURL(""),
		"CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{setup.template}.Sanitize())
	cloneMu.Unlock()
	if err != nil {
		tb.Fatalf("pgtest: clone template %s: %v", setup.template, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := exec(ctx, setup.server.AdminURL(""), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	return &DB{
		Name:     name,
		AdminURL: setup.server.AdminURL(name),
		AppURL:   setup.server.URLFor(migrations.AppRole, name),
	}
}

// NewAt returns a new database migrated up to and including version only, dropped when tb ends: the
// schema an earlier release left, to test a later migration on (migrations.Up then applies the rest).
// It is slower than New (it migrates instead of cloning).
func NewAt(tb testing.TB, version int64) *DB {
	tb.Helper()
	prepared(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	cloneMu.Lock()
	cloneSeq++
	name := fmt.Sprintf("%s%s_%d_%d_%d", clonePrefix, binaryHash(), time.Now().Unix(), os.Getpid(), cloneSeq)
	cloneMu.Unlock()
	admin := setup.server.AdminURL("")
	if err := exec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		tb.Fatalf("pgtest: create %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := exec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	if err := migrateTo(ctx, admin, setup.server.AdminURL(name), version); err != nil {
		tb.Fatalf("pgtest: migrate %s to %d: %v", name, version, err)
	}
	return &DB{Name: name, AdminURL: setup.server.AdminURL(name), AppURL: setup.server.URLFor(migrations.AppRole, name)}
}

// AdminPool returns a pool on AdminURL, closed when tb ends; it fails tb if the database does not answer.
func (d *DB) AdminPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return newPool(tb, d.AdminURL)
}

// AppPool returns a pool on AppURL (the runtime role), closed when tb ends; it fails tb if the database
// does not answer.
func (d *DB) AppPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return newPool(tb, d.AppURL)
}

func newPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("pgtest: pool: ping %s: %v", redact(url), err)
	}
	return pool
}

// prepare finds the server, sweeps stale databases and creates the migrated template. It reports
// failure in its result, never through tb, so the sync.Once around it always completes.
func prepare(tb testing.TB) shared {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var log strings.Builder
	defer func() {
		if log.Len() > 0 {
			tb.Logf("pgtest: first use in this process:\n%s", strings.TrimSpace(log.String()))
		}
	}()

	opt := pgserver.Options{URL: pgserver.DefaultURL, DockerExpiry: dockerExpiry, Log: &log}
	hint := "set " + EnvURL + " to a superuser URL, run PostgreSQL on 127.0.0.1:5432, or start Docker"
	if u := os.Getenv(EnvURL); u != "" {
		opt.URL, opt.NoDocker = u, true
		hint = EnvURL + " is set, so only that server is tried"
	}
	srv, err := pgserver.Find(ctx, opt)
	if err != nil {
		return shared{
			err:      fmt.Errorf("no database to test against (%s): %w", hint, err),
			noServer: errors.Is(err, pgserver.ErrNoServer),
		}
	}
	admin := srv.AdminURL("")

	if err := sweep(ctx, admin, time.Now()); err != nil {
		fmt.Fprintf(&log, "sweep stale test databases: %v\n", err) // not fatal: leftovers only cost disk
	}

	tpl := fmt.Sprintf("%s%s_%d_%d", templatePrefix, binaryHash(), time.Now().Unix(), os.Getpid())
	if err := exec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{tpl}.Sanitize()+" TEMPLATE template0"); err != nil {
		return shared{err: fmt.Errorf("create template %s: %w", tpl, err)}
	}
	if err := migrate(ctx, admin, srv.AdminURL(tpl)); err != nil {
		return shared{err: fmt.Errorf("migrate template %s: %w", tpl, err)}
	}
	// Nobody may connect to the template from now on, or cloning it would fail.
	if err := exec(ctx, admin, "ALTER DATABASE "+pgx.Identifier{tpl}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		return shared{err: fmt.Errorf("lock template %s: %w", tpl, err)}
	}
	fmt.Fprintf(&log, "template %s migrated on the %s server\n", tpl, srv.Kind())
	return shared{server: srv, template: tpl}
}

// migrate applies the migrations to tplURL while holding migrateLockKey on a session to adminURL.
func migrate(ctx context.Context, adminURL, tplURL string) error {
	return migrateTo(ctx, adminURL, tplURL, 0)
}

// migrateTo is migrate up to version (0: all).
func migrateTo(ctx context.Context, adminURL, tplURL string, version int64) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) // closing the session releases the lock
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if version > 0 {
		_, err = migrations.UpTo(ctx, tplURL, version)
	} else {
		_, err = migrations.Up(ctx, tplURL)
	}
	return err
}

// sweep drops databases this package created more than staleAfter before now (by the timestamp in their
// names) that nobody is connected to. It goes on past a database it cannot drop and returns those errors.
func sweep(ctx context.Context, adminURL string, now time.Time) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT d.datname FROM pg_database d
		WHERE (d.datname LIKE 'mcpfleet\_tpl\_%' OR d.datname LIKE 'mcpfleet\_t\_%')
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var errs []error
	for _, name := range names {
		created, ok := createdAt(name)
		if !ok || now.Sub(created) < staleAfter {
			continue
		}
		// Without FORCE: a database someone connected to meanwhile is left alone.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// createdAt parses the unix timestamp in a template or clone name.
func createdAt(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, templatePrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(name, clonePrefix); !ok {
			return time.Time{}, false
		}
	}
	parts := strings.Split(rest, "_") // hash, unix, pid[, n]
	if len(parts) < 3 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// binaryHash names the test binary in database names: 8 hex digits of a hash of its path.
func binaryHash() string {
	sum := sha256.Sum256([]byte(cmp.Or(os.Args[0], "unknown")))
	return hex.EncodeToString(sum[:4])
}

// exec runs one statement on a fresh session to url.
func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}

func redact(url string) string {
	if cfg, err := pgx.ParseConfig(url); err == nil {
		return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	}
	return "(unparseable URL)"
}
