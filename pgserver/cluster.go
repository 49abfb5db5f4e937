package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Files the package writes into a private cluster's data directory.
const (
	confFile    = "mcpfleet.conf" // settings rewritten on every start; included from postgresql.conf
	includeLine = "include_if_exists = '" + confFile + "'"
	logFile     = "server.log" // the postmaster's stdout and stderr (pg_ctl -l)
)

// superuser is the bootstrap superuser initdb creates (-U), whatever the OS user.
const superuser = "postgres"

// readyLimit bounds how long Start waits for a started server to accept connections when ctx has no
// earlier deadline.
const readyLimit = 60 * time.Second

// maxSocketPath is the longest unix socket path Linux accepts (sun_path is 108 bytes with the NUL).
const maxSocketPath = 107

// Cluster is a private PostgreSQL cluster in a data directory, run from the local binaries and listening
// on 127.0.0.1 with trust authentication. Its superuser is "postgres". Methods are safe for concurrent
// use; Start, Stop, Restart and Close are serialised.
type Cluster struct {
	dataDir string
	binDir  string
	port    int
	runAs   *osUser // nil: run commands as the current user

	mu      sync.Mutex
	started bool // this Cluster started the running postmaster, so Close stops it
}

// StartPrivate creates (initdb) or reuses the cluster in dataDir and starts it unless it is running. A
// relative dataDir is made absolute. port 0 keeps the port the cluster used last if it is free, else picks
// a free one; a non-zero port must match the port of a cluster that is already running.
//
// An existing cluster is reused with binaries of its own major version; a new one uses the highest
// version found under /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin, `pg_config --bindir` or PATH. A
// postmaster.pid whose process is gone is removed. Settings (port, listen_addresses = 127.0.0.1, the unix
// socket inside the data directory when its path is short enough, otherwise none) are rewritten to
// mcpfleet.conf in the data directory on every start. See the package comment for running as root.
//
// StartPrivate returns once the server accepts connections. The caller must Close the Cluster.
func StartPrivate(ctx context.Context, dataDir string, port int) (*Cluster, error) {
	return startPrivate(ctx, dataDir, port, nil)
}

func startPrivate(ctx context.Context, dataDir string, port int, log io.Writer) (*Cluster, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: start private: %w", err)
	}
	runAs, err := currentRunAs()
	if err != nil {
		return nil, fmt.Errorf("pgserver: start private: %w", err)
	}
	version, err := clusterVersion(dir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: start private: %w", err)
	}
	binDir, binVersion, err := findBinDir(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("pgserver: start private: %w", err)
	}
	c := &Cluster{dataDir: dir, binDir: binDir, runAs: runAs}

	if version == "" {
		if err := c.prepareDir(); err != nil {
			return nil, fmt.Errorf("pgserver: start private: %w", err)
		}
		logf(log, "initdb %s (PostgreSQL %s from %s%s)", dir, binVersion, binDir, runAs.describe())
		if err := c.initdb(ctx); err != nil {
			return nil, fmt.Errorf("pgserver: start private: %w", err)
		}
	}

	running, err := c.runningPort()
	if err != nil {
		return nil, fmt.Errorf("pgserver: start private: %w", err)
	}
	switch {
	case running != 0 && port != 0 && running != port:
		return nil, fmt.Errorf("pgserver: start private: cluster in %s already runs on port %d, not %d", dir, running, port)
	case running != 0:
		c.port = running
	case port != 0:
		c.port = port
	default:
		if c.port, err = c.choosePort(); err != nil {
			return nil, fmt.Errorf("pgserver: start private: %w", err)
		}
	}
	if running != 0 {
		logf(log, "reusing running cluster in %s on port %d", dir, running)
	} else {
		logf(log, "starting cluster in %s on port %d", dir, c.port)
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// DataDir returns the cluster's absolute data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Port returns the TCP port the cluster listens on; it does not change across Stop and Start.
func (c *Cluster) Port() int { return c.port }

// AdminURL returns a superuser URL for database dbname over TCP.
func (c *Cluster) AdminURL(dbname string) string { return c.URLFor(superuser, dbname) }

// URLFor returns a URL for user on database dbname over TCP, with no password (the cluster trusts
// every local user).
func (c *Cluster) URLFor(user, dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, c.port, dbname)
}

// Start starts the server unless it is running, then waits until it accepts connections (up to ctx's
// deadline, or a minute). It keeps the port the Cluster was created with; if that port has been taken
// meanwhile, Start fails with the server log's last lines.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(ctx); err != nil {
		return fmt.Errorf("pgserver: start %s: %w", c.dataDir, err)
	}
	return nil
}

// Stop shuts the server down with pg_ctl stop -m fast (open sessions are cut, transactions rolled back)
// and returns once the postmaster has exited; after it, connections are refused. Stopping a stopped
// cluster does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("pgserver: stop %s: %w", c.dataDir, err)
	}
	return nil
}

// Restart stops the server (if running) and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("pgserver: restart %s: %w", c.dataDir, err)
	}
	if err := c.start(ctx); err != nil {
		return fmt.Errorf("pgserver: restart %s: %w", c.dataDir, err)
	}
	return nil
}

// Close stops the server if this Cluster started it (by StartPrivate, Start or Restart) and leaves a
// server that was already running alone. It waits up to a minute.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyLimit)
	defer cancel()
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("pgserver: close %s: %w", c.dataDir, err)
	}
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	port, err := c.runningPort()
	if err != nil {
		return err
	}
	if port == 0 {
		if err := c.writeConf(); err != nil {
			return err
		}
		logPath := filepath.Join(c.dataDir, logFile)
		before := fileSize(logPath)
		if err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.dataDir, "-l", logPath); err != nil {
			return fmt.Errorf("%w\nserver log:\n%s", err, logTail(logPath, before))
		}
		c.started = true
	} else if port != c.port {
		return fmt.Errorf("already running on port %d, not %d", port, c.port)
	}
	return waitAccepting(ctx, c.AdminURL("postgres"), readyLimit)
}

func (c *Cluster) stop(ctx context.Context) error {
	port, err := c.runningPort()
	if err != nil || port == 0 {
		return err
	}
	err = c.run(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", c.dataDir)
	if err != nil {
		// A postmaster that exited on its own between the check and pg_ctl is stopped all the same.
		if port, perr := c.runningPort(); perr == nil && port == 0 {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	c.started = false
	return nil
}

// runningPort returns the port of the live postmaster that owns the data directory, or 0 when none runs.
// A postmaster.pid whose process is gone is removed so the next start does not trip over it.
func (c *Cluster) runningPort() (int, error) {
	pidPath := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidPath)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	// Lines: pid, data directory, start time, port, socket directory, listen address, shmem key, status.
	lines := strings.Split(string(b), "\n")
	pid, perr := strconv.Atoi(strings.TrimSpace(lines[0]))
	if perr != nil || pid <= 0 || !postmasterAlive(pid) {
		if err := os.Remove(pidPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("remove stale postmaster.pid: %w", err)
		}
		return 0, nil
	}
	if len(lines) < 4 {
		return 0, fmt.Errorf("postmaster.pid of live pid %d has no port line", pid)
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: bad port line %q", lines[3])
	}
	return port, nil
}

var confPortRE = regexp.MustCompile(`(?m)^port = (\d+)$`)

// choosePort returns the port of the last start if it is free, else a free port.
func (c *Cluster) choosePort() (int, error) {
	if b, err := os.ReadFile(filepath.Join(c.dataDir, confFile)); err == nil {
		if m := confPortRE.FindSubmatch(b); m != nil {
			if p, _ := strconv.Atoi(string(m[1])); p > 0 && portFree(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// prepareDir creates the data directory (owned by the user the cluster runs as) or checks that an existing
// one is empty, and checks that the directories above it can be traversed.
func (c *Cluster) prepareDir() error {
	entries, err := os.ReadDir(c.dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Parents must stay traversable by the cluster's OS user; the data directory itself is private.
		if err := os.MkdirAll(filepath.Dir(c.dataDir), 0o755); err != nil {
			return fmt.Errorf("create data dir parent: %w", err)
		}
		if err := os.Mkdir(c.dataDir, 0o700); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read data dir: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty and holds no PostgreSQL cluster (no PG_VERSION)", c.dataDir)
	}
	if err := c.runAs.own(c.dataDir); err != nil {
		return err
	}
	return c.runAs.checkTraverse(filepath.Dir(c.dataDir))
}

func (c *Cluster) initdb(ctx context.Context) error {
	err := c.run(ctx, "initdb", "-D", c.dataDir, "-U", superuser, "--auth=trust", "--no-locale", "-E", "UTF8")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# Added by mcpfleet pgserver: port, addresses and socket, rewritten on every start.\n%s\n", includeLine)
	return errors.Join(err, f.Close())
}

// writeConf rewrites mcpfleet.conf for the next start and makes sure postgresql.conf includes it (a
// cluster created by something else gets the include line appended).
func (c *Cluster) writeConf() error {
	pgConf := filepath.Join(c.dataDir, "postgresql.conf")
	b, err := os.ReadFile(pgConf)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	if !bytes.Contains(b, []byte(includeLine)) {
		f, err := os.OpenFile(pgConf, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("open postgresql.conf: %w", err)
		}
		_, err = fmt.Fprintf(f, "\n%s\n", includeLine)
		if err := errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("append include: %w", err)
		}
	}
	socketDir := c.dataDir
	if len(socketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		socketDir = "" // too long for a unix socket path: TCP only
	}
	conf := fmt.Sprintf("# Written by mcpfleet pgserver before every start; edits are overwritten.\n"+
		"port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n",
		c.port, strings.ReplaceAll(socketDir, "'", "''"))
	path := filepath.Join(c.dataDir, confFile)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", confFile, err)
	}
	return c.runAs.own(path)
}

// run runs one of the PostgreSQL binaries as the cluster's OS user, with the data directory as working
// directory and no PG* variables from our environment. Its output is returned in the error.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dataDir
	cmd.Env = commandEnv()
	cmd.WaitDelay = 5 * time.Second // never hang on a pipe held by a stray child
	c.runAs.apply(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

func commandEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=")
	})
	return append(env, "LC_ALL=C")
}

// clusterVersion returns the major version in dataDir/PG_VERSION, or "" when the directory holds no cluster.
func clusterVersion(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read PG_VERSION: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

var pgCtlVersionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// findBinDir returns a directory holding initdb and pg_ctl, and its major version: of major version want
// if want is not empty, else the highest found.
func findBinDir(ctx context.Context, want string) (dir, version string, err error) {
	var candidates []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}

	type found struct {
		dir, version string
		major        int
	}
	var all []found
	seen := map[string]bool{}
	for _, d := range candidates {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = real
		}
		if seen[d] || !isExecutable(filepath.Join(d, "initdb")) || !isExecutable(filepath.Join(d, "pg_ctl")) {
			continue
		}
		seen[d] = true
		// pg_ctl answers --version before its refusal to run as root.
		out, err := exec.CommandContext(ctx, filepath.Join(d, "pg_ctl"), "--version").Output()
		if err != nil {
			continue
		}
		m := pgCtlVersionRE.FindStringSubmatch(string(out))
		if m == nil {
			continue
		}
		major, _ := strconv.Atoi(m[1])
		v := m[1]
		if major < 10 { // 9.6 and older: the major version has two parts, as in PG_VERSION
			v += "." + m[2]
		}
		all = append(all, found{d, v, major})
	}
	if len(all) == 0 {
		return "", "", errors.New("no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin, /usr/local/pgsql/bin, pg_config --bindir or PATH")
	}
	if want != "" {
		for _, f := range all {
			if f.version == want {
				return f.dir, f.version, nil
			}
		}
		var have []string
		for _, f := range all {
			have = append(have, f.version+" in "+f.dir)
		}
		return "", "", fmt.Errorf("cluster is version %s but only binaries of %s were found", want, strings.Join(have, ", "))
	}
	best := slices.MaxFunc(all, func(a, b found) int { return a.major - b.major })
	return best.dir, best.version, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns what was appended to the log after offset, at most its last 4 KiB.
func logTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if offset > 0 && offset <= int64(len(b)) {
		b = b[offset:]
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}
