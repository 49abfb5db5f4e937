package loadgen

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// NoopCommand is the hidden subcommand that runs the no-op ceiling server.
const NoopCommand = "noop-server"

type noopAnswer struct {
	ServerID        string    `json:"server_id"`
	Status          string    `json:"status"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// NewNoopHandler returns the ceiling's target: gin.New() with one handler,
// POST /v1/mcp/servers/heartbeat, that decodes the JSON body and answers a
// heartbeat-shaped JSON. It does nothing else: no auth, no logging, no state.
func NewNoopHandler() http.Handler {
	r := gin.New()
	r.POST("/v1/mcp/servers/heartbeat", func(c *gin.Context) {
		var req struct {
			ServerID string `json:"server_id"`
		}
		if err := c.ShouldBindJSON(&req); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"title": "invalid JSON"})
			return
		}
		c.JSON(http.StatusOK, noopAnswer{ServerID: req.ServerID, Status: "healthy", LastHeartbeatAt: time.Now().UTC()})
	})
	return r
}

// RunNoopServer runs the no-op server of the ceiling phase in this process
// (the load generator starts it as a child: `mcpfleet-load noop-server`).
// It listens on --addr (loopback only, default 127.0.0.1:0), prints
// "listening HOST:PORT" as its first line on stdout, and serves until ctx
// ends, stdin reaches EOF (the parent closed it or died), or --max-lifetime
// passes; then it shuts down within 2 s.
func RunNoopServer(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(NoopCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	lifetime := fs.Duration("max-lifetime", 30*time.Minute, "exit after this long in any case")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !isLoopback(host) {
		return fmt.Errorf("noop server: %q is not a loopback address", *addr)
	}
	gin.SetMode(gin.ReleaseMode) // this process only serves the no-op; keep gin quiet
	ctx, cancel := context.WithTimeout(ctx, *lifetime)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("noop server: %w", err)
	}
	srv := &http.Server{Handler: NewNoopHandler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "listening %s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("noop server: announce address: %w", err)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("noop server: %w", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

// firstLine is an io.Writer that delivers the first line written to it on
// a channel and discards everything after.
type firstLine struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
	ch   chan string
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return len(p), nil
	}
	f.buf.Write(p)
	if line, _, ok := bytes.Cut(f.buf.Bytes(), []byte("\n")); ok {
		f.sent = true
		f.ch <- string(line)
	} else if f.buf.Len() > 4096 {
		f.sent = true
		f.ch <- f.buf.String()
	}
	return len(p), nil
}

// startNoop runs exe as a no-op server child and returns its loopback
// address. stop closes the child's stdin (which makes it exit), waits up to
// 5 s, then kills it.
func startNoop(ctx context.Context, exe string, stderr io.Writer) (addr string, stop func(), err error) {
	if exe == "" {
		return "", nil, errors.New("no executable to run the no-op server from")
	}
	cmd := exec.Command(exe, NoopCommand, "--addr", "127.0.0.1:0", "--max-lifetime", "30m")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, fmt.Errorf("no-op server: %w", err)
	}
	first := &firstLine{ch: make(chan string, 1)}
	cmd.Stdout = first
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start no-op server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = stdin.Close()
			t := time.NewTimer(5 * time.Second)
			defer t.Stop()
			select {
			case <-exited:
			case <-t.C:
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case line := <-first.ch:
		a, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		host, _, serr := net.SplitHostPort(a)
		if !ok || serr != nil || !isLoopback(host) {
			stop()
			return "", nil, fmt.Errorf("no-op server announced %q, want \"listening 127.0.0.1:PORT\"", line)
		}
		return a, stop, nil
	case err := <-exited:
		exited <- err // let stop see it
		stop()
		return "", nil, fmt.Errorf("no-op server exited before listening: %v", err)
	case <-t.C:
		stop()
		return "", nil, errors.New("no-op server did not announce its address within 10s")
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}
