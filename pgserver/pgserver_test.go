package pgserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/pgserver"
)

// unreachableURL points at a port nothing listens on (port 1 is reserved).
const unreachableURL = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"

// queryOne connects to url and scans one value of query.
func queryOne[T any](tb testing.TB, url, query string) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, query).Scan(&v); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return v
}

// connectErr returns the error of a connection attempt to url.
func connectErr(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// clusterParent returns a fresh directory the postgres OS user can traverse (t.TempDir is 0700, which
// that user cannot enter when the tests run as root), removed at the end of the test.
func clusterParent(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pgserver-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// startPrivate starts a private cluster in dataDir and closes it at the end of the test. It skips the test
// when no PostgreSQL binaries are installed.
func startPrivate(tb testing.TB, dataDir string) *pgserver.Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgserver.StartPrivate(ctx, dataDir, 0)
	if err != nil && strings.Contains(err.Error(), "no PostgreSQL binaries") {
		tb.Skipf("no local PostgreSQL binaries: %v", err)
	}
	if err != nil {
		tb.Fatalf("StartPrivate: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return c
}

func TestFindExternal(t *testing.T) {
	if err := connectErr(pgserver.DefaultURL); err != nil {
		t.Skipf("no server at %s: %v", pgserver.DefaultURL, err)
	}
	var log strings.Builder
	s, err := pgserver.Find(t.Context(), pgserver.Options{NoDocker: true, Log: &log})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	defer s.Close()
	if s.Kind() != pgserver.KindExternal {
		t.Errorf("Kind = %q, want %q", s.Kind(), pgserver.KindExternal)
	}
	if !strings.Contains(log.String(), "using PostgreSQL at") {
		t.Errorf("log = %q, want a 'using PostgreSQL at' line", log.String())
	}
	if got := queryOne[string](t, s.AdminURL("template1"), "SELECT current_database()"); got != "template1" {
		t.Errorf("AdminURL(template1) connects to %q", got)
	}
	if got := queryOne[bool](t, s.AdminURL(""), "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"); !got {
		t.Error("AdminURL user is not a superuser")
	}
	if got, want := s.URLFor("someone", "db1"), "postgres://someone@127.0.0.1:5432/db1"; got != want {
		t.Errorf("URLFor = %q, want %q", got, want)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := connectErr(s.AdminURL("")); err != nil {
		t.Errorf("Close of an external server stopped it: %v", err)
	}
}

func TestFindNothing(t *testing.T) {
	_, err := pgserver.Find(t.Context(), pgserver.Options{
		URL:            unreachableURL,
		DockerEndpoint: "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"),
	})
	if !errors.Is(err, pgserver.ErrNoServer) {
		t.Fatalf("Find = %v, want ErrNoServer", err)
	}
	for _, want := range []string{"external server at postgres://postgres@127.0.0.1:1/", "private cluster: not tried", "docker: no Docker engine answers at unix://"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestFindNeedsSuperuser(t *testing.T) {
	if err := connectErr(pgserver.DefaultURL); err != nil {
		t.Skipf("no server at %s: %v", pgserver.DefaultURL, err)
	}
	role := "pgserver_test_" + strconv.Itoa(os.Getpid())
	conn, err := pgx.Connect(t.Context(), pgserver.DefaultURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) // after the role is dropped
	if _, err := conn.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN NOSUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := conn.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	_, err = pgserver.Find(t.Context(), pgserver.Options{URL: "postgres://" + role + "@127.0.0.1:5432/postgres", NoDocker: true})
	if !errors.Is(err, pgserver.ErrNotSuperuser) || !errors.Is(err, pgserver.ErrNoServer) {
		t.Fatalf("Find = %v, want ErrNoServer wrapping ErrNotSuperuser", err)
	}
}

func TestFindRejectsKeyValueDSN(t *testing.T) {
	_, err := pgserver.Find(t.Context(), pgserver.Options{URL: "host=127.0.0.1 user=postgres", NoDocker: true})
	if err == nil || !strings.Contains(err.Error(), "postgres://") {
		t.Fatalf("Find = %v, want an error asking for a postgres:// URL", err)
	}
}

func TestEnsureDatabase(t *testing.T) {
	if err := connectErr(pgserver.DefaultURL); err != nil {
		t.Skipf("no server at %s: %v", pgserver.DefaultURL, err)
	}
	ctx := t.Context()
	name := "pgserver_ensure_" + strconv.Itoa(os.Getpid())
	drop := func() {
		conn, err := pgx.Connect(context.Background(), pgserver.DefaultURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop: %v", err)
		}
	}
	drop()
	t.Cleanup(drop)

	for i := range 2 { // the second call finds it
		if err := pgserver.EnsureDatabase(ctx, pgserver.DefaultURL, name); err != nil {
			t.Fatalf("EnsureDatabase #%d: %v", i+1, err)
		}
	}
	url := strings.TrimSuffix(pgserver.DefaultURL, "/postgres") + "/" + name
	if got := queryOne[string](t, url, "SELECT current_database()"); got != name {
		t.Errorf("connected to %q, want %q", got, name)
	}

	for _, bad := range []string{"", "1abc", "a-b", `x"; DROP DATABASE postgres; --`, strings.Repeat("a", 64)} {
		if err := pgserver.EnsureDatabase(ctx, pgserver.DefaultURL, bad); !errors.Is(err, pgserver.ErrInvalidName) {
			t.Errorf("EnsureDatabase(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

// TestPrivateCluster shares one initdb across the lifecycle checks: they run in order.
func TestPrivateCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("initdb and restarts take seconds")
	}
	dataDir := filepath.Join(clusterParent(t), "nested", "pg") // parents created traversable
	c := startPrivate(t, dataDir)
	url := c.AdminURL("postgres")

	t.Run("accepts connections", func(t *testing.T) {
		if c.Port() == 0 || c.DataDir() != dataDir {
			t.Errorf("Port = %d, DataDir = %q", c.Port(), c.DataDir())
		}
		if got := queryOne[int](t, url, "SELECT 1"); got != 1 {
			t.Errorf("SELECT 1 = %d", got)
		}
		if got := queryOne[string](t, c.URLFor("postgres", "template1"), "SELECT current_database()"); got != "template1" {
			t.Errorf("URLFor connects to %q", got)
		}
		if _, err := os.Stat(filepath.Join(dataDir, ".s.PGSQL."+strconv.Itoa(c.Port()))); err != nil {
			t.Errorf("unix socket not in the data directory: %v", err)
		}
	})

	t.Run("stop refuses connections, start brings it back", func(t *testing.T) {
		ctx := t.Context()
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := connectErr(url); err == nil {
			t.Fatal("connected to a stopped cluster")
		}
		if err := c.Stop(ctx); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := connectErr(url); err != nil {
			t.Fatalf("after Start: %v", err)
		}
		if err := c.Start(ctx); err != nil {
			t.Errorf("Start of a running cluster: %v", err)
		}
	})

	t.Run("restart cuts sessions and keeps the port", func(t *testing.T) {
		ctx := t.Context()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		port := c.Port()
		if err := c.Restart(ctx); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		if err := conn.Ping(ctx); err == nil {
			t.Error("a session survived Restart")
		}
		if c.Port() != port {
			t.Errorf("port %d after Restart, want %d", c.Port(), port)
		}
		if err := connectErr(url); err != nil {
			t.Errorf("after Restart: %v", err)
		}
	})

	t.Run("stop and start under load", func(t *testing.T) {
		ctx := t.Context()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var ok, failed atomic.Int64
		var wg sync.WaitGroup
		loadCtx, stopLoad := context.WithCancel(ctx)
		for range 4 {
			wg.Go(func() {
				for loadCtx.Err() == nil {
					qctx, cancel := context.WithTimeout(loadCtx, time.Second)
					if _, err := pool.Exec(qctx, "SELECT 1"); err != nil {
						failed.Add(1)
					} else {
						ok.Add(1)
					}
					cancel()
				}
			})
		}
		wait.For(t, "queries before Stop", 10*time.Second, func() bool { return ok.Load() > 0 })
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop under load: %v", err)
		}
		wait.For(t, "queries failing while stopped", 10*time.Second, func() bool { return failed.Load() > 0 })
		if err := c.Start(ctx); err != nil {
			t.Fatalf("Start under load: %v", err)
		}
		after := ok.Load()
		wait.For(t, "queries succeeding after Start", 10*time.Second, func() bool { return ok.Load() > after })
		stopLoad()
		wg.Wait()
	})

	t.Run("reuse a running cluster", func(t *testing.T) {
		again := startPrivate(t, dataDir)
		if again.Port() != c.Port() {
			t.Errorf("port %d, want the running %d", again.Port(), c.Port())
		}
		if err := again.Close(); err != nil { // it did not start the server, so it must not stop it
			t.Fatalf("Close: %v", err)
		}
		if err := connectErr(url); err != nil {
			t.Errorf("closing a reusing Cluster stopped the server: %v", err)
		}
		_, err := pgserver.StartPrivate(t.Context(), dataDir, c.Port()+1)
		if err == nil || !strings.Contains(err.Error(), "already runs on port") {
			t.Errorf("StartPrivate on another port = %v, want an 'already runs on port' error", err)
		}
	})

	t.Run("stale postmaster.pid", func(t *testing.T) {
		ctx := t.Context()
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// A pid that is certainly not a postmaster: this test process.
		stale := strconv.Itoa(os.Getpid()) + "\n" + dataDir + "\n0\n" + strconv.Itoa(c.Port()) + "\n"
		pidFile := filepath.Join(dataDir, "postmaster.pid")
		if err := os.WriteFile(pidFile, []byte(stale), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatalf("Start over a stale postmaster.pid: %v", err)
		}
		if got := queryOne[int](t, url, "SELECT 1"); got != 1 {
			t.Errorf("SELECT 1 = %d", got)
		}
	})

	t.Run("reuse a stopped cluster keeps its port", func(t *testing.T) {
		if err := c.Stop(t.Context()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		again := startPrivate(t, dataDir)
		if again.Port() != c.Port() {
			t.Errorf("port %d, want the previous %d", again.Port(), c.Port())
		}
		if err := again.Close(); err != nil { // it started the server, so it stops it
			t.Fatalf("Close: %v", err)
		}
		if err := connectErr(url); err == nil {
			t.Error("Close did not stop the server it started")
		}
		if err := c.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
	})

	t.Run("Find falls back to the private cluster", func(t *testing.T) {
		if err := c.Stop(t.Context()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		var log strings.Builder
		s, err := pgserver.Find(t.Context(), pgserver.Options{URL: unreachableURL, DataDir: dataDir, NoDocker: true, Log: &log})
		if err != nil {
			t.Fatalf("Find: %v", err)
		}
		if s.Kind() != pgserver.KindPrivate {
			t.Errorf("Kind = %q, want %q", s.Kind(), pgserver.KindPrivate)
		}
		if !strings.Contains(log.String(), "using private PostgreSQL cluster in "+dataDir) {
			t.Errorf("log = %q", log.String())
		}
		if got := queryOne[string](t, s.URLFor("postgres", "template1"), "SELECT current_database()"); got != "template1" {
			t.Errorf("URLFor connects to %q", got)
		}
		if err := pgserver.EnsureDatabase(t.Context(), s.AdminURL(""), "demo"); err != nil {
			t.Fatalf("EnsureDatabase: %v", err)
		}
		if got := queryOne[string](t, s.AdminURL("demo"), "SELECT current_database()"); got != "demo" {
			t.Errorf("AdminURL(demo) connects to %q", got)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := connectErr(url); err == nil {
			t.Error("Server.Close did not stop the cluster Find started")
		}
	})
}

func TestStartPrivateRefusesForeignDirectory(t *testing.T) {
	dataDir := filepath.Join(clusterParent(t), "pg")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "precious.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pgserver.StartPrivate(t.Context(), dataDir, 0)
	if err == nil {
		t.Fatal("StartPrivate initialised a non-empty directory")
	}
	if strings.Contains(err.Error(), "no PostgreSQL binaries") {
		t.Skip(err)
	}
	if !strings.Contains(err.Error(), "not empty") {
		t.Errorf("StartPrivate = %v, want a 'not empty' error", err)
	}
}

func TestStartPrivateUntraversableParent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to the postgres OS user")
	}
	parent := t.TempDir() // 0700, owned by root
	_, err := pgserver.StartPrivate(t.Context(), filepath.Join(parent, "pg"), 0)
	if err != nil && strings.Contains(err.Error(), "no PostgreSQL binaries") {
		t.Skip(err)
	}
	if err == nil || !strings.Contains(err.Error(), "cannot traverse") {
		t.Fatalf("StartPrivate = %v, want a 'cannot traverse' error", err)
	}
}

// TestFindDocker runs only where a Docker engine answers (it may pull postgres:15).
func TestFindDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container")
	}
	var log strings.Builder
	s, err := pgserver.Find(t.Context(), pgserver.Options{URL: unreachableURL, DockerExpiry: 10 * time.Minute, Log: &log})
	if err != nil && strings.Contains(err.Error(), "no Docker engine answers") {
		t.Skipf("no Docker engine: %v", err)
	}
	if err != nil {
		t.Fatalf("Find: %v\nlog:\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if s.Kind() != pgserver.KindDocker {
		t.Fatalf("Kind = %q, want %q", s.Kind(), pgserver.KindDocker)
	}
	if got := queryOne[bool](t, s.AdminURL(""), "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"); !got {
		t.Error("the container's AdminURL user is not a superuser")
	}
	if err := pgserver.EnsureDatabase(t.Context(), s.AdminURL(""), "demo"); err != nil {
		t.Fatalf("EnsureDatabase: %v", err)
	}
	if got := queryOne[string](t, s.URLFor("postgres", "demo"), "SELECT current_database()"); got != "demo" {
		t.Errorf("URLFor connects to %q", got)
	}
}
