package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpfleet/mcpfleet/pgserver"
)

// dirPrefix names the suite's working directories under os.TempDir(): the private cluster's data
// directory and the owner's pid live there, so a later run can clean up after a run that was killed.
const dirPrefix = "mcpfleet-chaos-"

// ModuleRoot returns the directory holding go.mod of this module, searching up from dir.
func ModuleRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for range 64 {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/mcpfleet/mcpfleet\n")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	return "", fmt.Errorf("no go.mod of github.com/mcpfleet/mcpfleet above %s", dir)
}

// BuildBinary builds the service with the chaos hooks (go build -tags chaos ./cmd/mcpfleet) from the
// module at root into out. race adds the race detector to the service.
func BuildBinary(ctx context.Context, root, out string, race bool) error {
	args := []string{"build", "-tags", "chaos", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/mcpfleet")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = root
	cmd.WaitDelay = 5 * time.Second
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the service (go %s): %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(b))
	}
	return nil
}

func goTool() string {
	if gr := os.Getenv("GOROOT"); gr != "" {
		if p := filepath.Join(gr, "bin", "go"); isFile(p) {
			return p
		}
	}
	return "go"
}

func isFile(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() }

// workDir is the suite's own directory under os.TempDir(), traversable by the postgres OS user (the
// private cluster runs as that user when the suite runs as root).
type workDir struct {
	path string
}

func newWorkDir() (*workDir, error) {
	p, err := os.MkdirTemp("", dirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	return &workDir{path: p}, nil
}

func (w *workDir) pgDir() string { return filepath.Join(w.path, "pg") }

// sweepStale stops the private clusters of earlier runs whose owner process is gone and removes their
// directories: a suite killed with -9 cannot clean up after itself. At most 8 directories per call,
// each bounded by a minute.
func sweepStale(ctx context.Context, logf func(string, ...any)) {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	n := 0
	for _, dir := range matches {
		if n >= 8 {
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		n++
		pg := filepath.Join(dir, "pg")
		if isFile(filepath.Join(pg, "postmaster.pid")) {
			c, cerr := func() (*pgserver.Cluster, error) {
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				return pgserver.StartPrivate(cctx, pg, 0) // reuses the running postmaster
			}()
			if cerr == nil {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := c.Stop(sctx); err != nil {
					logf("sweep: stop stale cluster in %s: %v", pg, err)
				}
				cancel()
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("sweep: remove %s: %v", dir, err)
		} else {
			logf("sweep: removed the leftovers of an earlier run in %s", dir)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// database is the suite's private PostgreSQL cluster with the mcpfleet database migrated.
type database struct {
	cluster  *pgserver.Cluster
	adminURL string // superuser, database mcpfleet
	appURL   string // cyberos_app, database mcpfleet
}

func startDatabase(ctx context.Context, dir string) (*database, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := pgserver.StartPrivate(sctx, dir, 0)
	if err != nil {
		return nil, err
	}
	if err := pgserver.EnsureDatabase(sctx, c.AdminURL("postgres"), "mcpfleet"); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return &database{cluster: c, adminURL: c.AdminURL("mcpfleet"), appURL: c.URLFor("cyberos_app", "mcpfleet")}, nil
}

// runCLI runs the service binary with args and the admin database URL, and decodes its JSON output
// into out (if not nil).
func runCLI(ctx context.Context, binary, adminURL string, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(baseEnv(), "MCPFLEET_ADMIN_DATABASE_URL="+adminURL)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mcpfleet %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("mcpfleet %s: output %q: %w", strings.Join(args, " "), stdout.String(), err)
	}
	return nil
}

// baseEnv is the environment of the service's processes: ours without any MCPFLEET_ or OTEL_ setting.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MCPFLEET_") || strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// service runs the mcpfleet binary as a child process: started, killed with -9, stopped and continued,
// and finally shut down with SIGTERM. One incarnation runs at a time.
type service struct {
	binary string
	env    []string
	addr   string
	logDir string

	// Cluster schedules: the node slot, and the database URL its incarnations get with the setting
	// mcpfleet.node = "<name>.<incarnation>" on every connection (read by the suite's audit trigger).
	node  int
	name  string
	dbURL string
	netns *netns // the node runs in this network namespace (nil: the host's)

	mu   sync.Mutex
	cur  *exec.Cmd
	inc  *Incarnation
	done chan struct{} // closed when cur has exited
	all  []*Incarnation
	n    int
}

func (s *service) url() string { return "http://" + s.addr }

// start execs a new incarnation and waits (up to limit) until /readyz says the database is ok.
func (s *service) start(ctx context.Context, limit time.Duration) (*Incarnation, error) {
	s.mu.Lock()
	if s.cur != nil {
		s.mu.Unlock()
		return nil, errors.New("start: an incarnation is running")
	}
	s.n++
	inc := &Incarnation{N: s.n, Node: s.node, Log: filepath.Join(s.logDir, fmt.Sprintf("service-%02d.log", s.n))}
	env := s.env
	if s.name != "" {
		inc.Log = filepath.Join(s.logDir, fmt.Sprintf("%s-%02d.log", s.name, s.n))
		env = append(slices.Clone(s.env), "MCPFLEET_DATABASE_URL="+s.dbURL+"&options="+strings.ReplaceAll(url.QueryEscape(fmt.Sprintf("-c mcpfleet.node=%s.%d", s.name, s.n)), "+", "%20"))
	}
	logf, err := os.Create(inc.Log)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	cmd := exec.Command(s.binary, "serve")
	if s.netns != nil {
		cmd = s.netns.command(s.binary, "serve") // ip netns exec: the same process, in the namespace
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The service dies with the suite even if the suite is killed: no orphan keeps the port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	inc.Start = time.Now()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		logf.Close()
		return nil, fmt.Errorf("start the service: %w", err)
	}
	inc.PID = cmd.Process.Pid
	done := make(chan struct{})
	s.cur, s.inc, s.done = cmd, inc, done
	s.all = append(s.all, inc)
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		inc.End = time.Now()
		inc.ExitCode = cmd.ProcessState.ExitCode()
		inc.Exit = "exit status 0"
		if err != nil {
			inc.Exit = err.Error()
		}
		if s.cur == cmd {
			s.cur = nil
		}
		s.mu.Unlock()
		close(done)
	}()
	if err := s.waitReady(ctx, inc, done, limit); err != nil {
		return inc, err
	}
	return inc, nil
}

func (s *service) waitReady(ctx context.Context, inc *Incarnation, done chan struct{}, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("the service exited while starting (%s); see %s:\n%s", inc.Exit, inc.Log, tail(inc.Log, 2048))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if st, code := readyz(ctx, client, s.url()); code == http.StatusOK && st == "ready" {
			s.mu.Lock()
			inc.Ready = time.Now()
			s.mu.Unlock()
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("the service was not ready within %s; see %s:\n%s", limit, inc.Log, tail(inc.Log, 2048))
}

func readyz(ctx context.Context, client *http.Client, base string) (status string, code int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return "", 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
	return body.Status, resp.StatusCode
}

// current returns the running incarnation's number (0 when none runs).
func (s *service) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.inc.N
}

// signal sends sig to the running incarnation (only ever the process this suite started).
func (s *service) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return errors.New("no service process is running")
	}
	return s.cur.Process.Signal(sig)
}

// stop ends the running incarnation with sig and waits (up to limit) for it to exit. It returns how
// long the exit took; an incarnation still running after limit is killed.
func (s *service) stop(sig syscall.Signal, limit time.Duration) (time.Duration, error) {
	s.mu.Lock()
	cmd, inc, done := s.cur, s.inc, s.done
	if cmd == nil {
		s.mu.Unlock()
		return 0, errors.New("no service process is running")
	}
	inc.StopSent = time.Now()
	inc.Signal = sig.String()
	s.mu.Unlock()
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
		return inc.End.Sub(inc.StopSent), nil
	case <-t.C:
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
		return inc.End.Sub(inc.StopSent), fmt.Errorf("the service did not exit within %s of %s; killed", limit, sig)
	}
}

// incarnations returns copies of every incarnation so far.
func (s *service) incarnations() []Incarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Incarnation, len(s.all))
	for i, inc := range s.all {
		out[i] = *inc
	}
	return out
}

// askedToStop reports whether the suite sent inc the signal that ended it.
func (s *service) askedToStop(inc *Incarnation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !inc.StopSent.IsZero()
}

// running returns the running incarnation and a channel closed when it exits; nil when none runs.
func (s *service) running() (*Incarnation, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil, nil
	}
	return s.inc, s.done
}

// kill ends any running incarnation at once (cleanup).
func (s *service) kill() {
	s.mu.Lock()
	cmd, done := s.cur, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
