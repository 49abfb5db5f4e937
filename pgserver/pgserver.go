// Package pgserver finds or starts a PostgreSQL server for the demo, the test database helper
// (persistence/pgtest) and the chaos suite.
//
// Find tries, in order, an existing server reachable at a URL, a private cluster in a data directory
// created from the local PostgreSQL binaries (StartPrivate), and a container run through Docker. Every
// server it returns lets the caller connect as a superuser, which is what creating databases and the
// runtime role needs.
//
// # Running as root
//
// initdb and postgres refuse to run as root. When the process runs as root (CI does), every command of a
// private cluster (initdb, pg_ctl and so the postmaster it starts) runs as the OS user "postgres" through
// SysProcAttr.Credential; that user must exist. The data directory is created owned by that user, and
// every directory above it must be traversable by it: StartPrivate names the first one that is not
// instead of letting initdb fail obscurely. Note that testing.T.TempDir creates 0700 directories, which
// the postgres user cannot enter; create the parent with os.MkdirTemp and chmod it 0755 instead. When the
// process does not run as root, the commands run as the current user.
package pgserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultURL is where Find looks for an existing server when Options.URL is empty.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// Kinds of server, as reported by Server.Kind.
const (
	KindExternal = "external" // a server Find did not start; Close leaves it alone
	KindPrivate  = "private"  // a private cluster in a data directory, run from the local binaries
	KindDocker   = "docker"   // a container started through the Docker engine
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrNoServer is returned by Find when no attempt produced a usable server; the error also carries
	// what each attempt found.
	ErrNoServer = errors.New("no PostgreSQL server found")
	// ErrNotSuperuser means a server answered but the URL's user is not a superuser.
	ErrNotSuperuser = errors.New("not a superuser")
	// ErrInvalidName is returned by EnsureDatabase for a name that is not a plain identifier.
	ErrInvalidName = errors.New("invalid database name")
)

// externalTimeout bounds the check of an existing server, so an address that drops packets does not stall Find.
const externalTimeout = 3 * time.Second

// Options tells Find where to look. The zero value tries DefaultURL, skips the private cluster and then
// tries Docker.
type Options struct {
	// URL of an existing server whose user is a superuser. Empty means DefaultURL. It must be a URL
	// (postgres:// or postgresql://), not a key=value string, because Server derives other URLs from it.
	URL string
	// DataDir is the private cluster's data directory (for example ".data/pg"); empty skips that attempt.
	DataDir string
	// Port is the private cluster's TCP port; 0 keeps the port the cluster used last if it is free, or
	// picks a free one.
	Port int
	// NoDocker skips the Docker attempt.
	NoDocker bool
	// DockerEndpoint is the Docker engine's address; empty uses DOCKER_HOST or the platform default.
	DockerEndpoint string
	// DockerExpiry, when positive, has the engine kill the container after that long even if Close is
	// never called (a test process that exits without cleaning up). Zero keeps it until Close.
	DockerExpiry time.Duration
	// Log receives one line per step ("using PostgreSQL at ...", "initdb ..."); nil discards them.
	Log io.Writer
}

// Server is a PostgreSQL server Find found or started. Its methods are safe for concurrent use.
type Server struct {
	kind  string
	base  *url.URL     // a superuser URL; its path names the default database
	close func() error // stops what Find started; nil for an external server

	closeOnce sync.Once
	closeErr  error
}

// Kind reports how the server was obtained: KindExternal, KindPrivate or KindDocker.
func (s *Server) Kind() string { return s.kind }

// AdminURL returns a superuser URL for database dbname; an empty dbname keeps the server's default
// database (the one in Options.URL, or "postgres" for a server Find started).
func (s *Server) AdminURL(dbname string) string { return rewriteURL(s.base, "", dbname) }

// URLFor returns a URL for user on database dbname, with no password: it works where the server trusts
// that user (a private cluster or a container trusts every user). An empty user keeps the superuser.
func (s *Server) URLFor(user, dbname string) string { return rewriteURL(s.base, user, dbname) }

// Close stops what Find started (the private cluster, if Find started it, or the container); for an
// external server it does nothing. Calls after the first return the first result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.close != nil {
			s.closeErr = s.close()
		}
	})
	return s.closeErr
}

// Find returns the first usable server among: the server at opt.URL, if it answers within a few seconds
// and its user is a superuser; a private cluster in opt.DataDir, created or reused and started (see
// StartPrivate); a postgres:15 container through Docker. When every attempt fails the error wraps
// ErrNoServer and says what each attempt found. The caller owns the Server and must Close it.
func Find(ctx context.Context, opt Options) (*Server, error) {
	rawURL := cmp.Or(opt.URL, DefaultURL)
	var errs []error

	s, err := findExternal(ctx, rawURL)
	if err == nil {
		logf(opt.Log, "using PostgreSQL at %s", s.base.Redacted())
		return s, nil
	}
	errs = append(errs, fmt.Errorf("external server at %s: %w", redact(rawURL), err))

	switch {
	case ctx.Err() != nil:
		errs = append(errs, fmt.Errorf("private cluster, docker: not tried: %w", ctx.Err()))
		return nil, noServer(errs)
	case opt.DataDir == "":
		errs = append(errs, errors.New("private cluster: not tried, no data directory given"))
	default:
		s, err := findPrivate(ctx, opt)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Errorf("private cluster in %s: %w", opt.DataDir, err))
	}

	switch {
	case ctx.Err() != nil:
		errs = append(errs, fmt.Errorf("docker: not tried: %w", ctx.Err()))
	case opt.NoDocker:
		errs = append(errs, errors.New("docker: not tried, disabled"))
	default:
		s, err := startDocker(ctx, opt)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Errorf("docker: %w", err))
	}
	return nil, noServer(errs)
}

func noServer(errs []error) error {
	return fmt.Errorf("pgserver: find: %w:\n%w", ErrNoServer, errors.Join(errs...))
}

// findExternal connects to rawURL and checks that its user is a superuser.
func findExternal(ctx context.Context, rawURL string) (*Server, error) {
	base, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, externalTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var user string
	var super bool
	err = conn.QueryRow(ctx, `SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &super)
	if err != nil {
		return nil, fmt.Errorf("check role: %w", err)
	}
	if !super {
		return nil, fmt.Errorf("connected as %q: %w", user, ErrNotSuperuser)
	}
	return &Server{kind: KindExternal, base: base}, nil
}

func findPrivate(ctx context.Context, opt Options) (*Server, error) {
	c, err := startPrivate(ctx, opt.DataDir, opt.Port, opt.Log)
	if err != nil {
		return nil, err
	}
	base, err := parseURL(c.AdminURL("postgres"))
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	logf(opt.Log, "using private PostgreSQL cluster in %s at %s", c.DataDir(), base.Redacted())
	return &Server{kind: KindPrivate, base: base, close: c.Close}, nil
}

// dbNameRE accepts plain identifiers: PostgreSQL's limit is 63 bytes.
var dbNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// EnsureDatabase creates database name on the server at adminURL unless it exists. name must be a plain
// identifier (letters, digits and underscores, not starting with a digit, at most 63 bytes), else the
// error wraps ErrInvalidName; it is used exactly as given (quoted), so case matters. Two callers creating
// the same database at once both succeed. adminURL's user needs the CREATEDB privilege.
func EnsureDatabase(ctx context.Context, adminURL string, name string) error {
	if !dbNameRE.MatchString(name) {
		return fmt.Errorf("pgserver: ensure database %q: %w", name, ErrInvalidName)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("pgserver: ensure database: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("pgserver: ensure database %s: lookup: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42P04" { // duplicate_database: a concurrent creator won
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgserver: ensure database %s: create: %w", name, err)
	}
	return nil
}

// parseURL accepts only URL-form connection strings, since the other URLs are derived from it.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("parse url %s: scheme must be postgres:// or postgresql://", u.Redacted())
	}
	return u, nil
}

// rewriteURL returns base with user and database replaced where non-empty. The password is kept only when
// the user is unchanged.
func rewriteURL(base *url.URL, user, dbname string) string {
	u := *base
	if user != "" && (base.User == nil || user != base.User.Username()) {
		u.User = url.User(user)
	}
	if dbname != "" {
		u.Path = "/" + dbname
		u.RawPath = ""
	}
	return u.String()
}

// redact hides the password of a URL for messages; a string that does not parse is not echoed.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "pgserver: "+format+"\n", args...)
	}
}

// waitAccepting polls url until a connection succeeds, ctx ends or limit passes.
func waitAccepting(ctx context.Context, rawURL string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ping(ctx, rawURL)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w", err)
		case <-tick.C:
		}
	}
}

func ping(ctx context.Context, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}
