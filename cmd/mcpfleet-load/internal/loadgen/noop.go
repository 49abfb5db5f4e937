package loadgen

import (
	"bytes"
	"context"
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

	if err := serveAnnounced(ctx, *addr, NewNoopHandler(), stdout); err != nil {
		return fmt.Errorf("noop server: %w", err)
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

// startChild runs exe with args as a server child named name (for errors), which must print
// "listening 127.0.0.1:PORT" first on stdout, and returns that address and its pid. stop closes the
// child's stdin (which makes it exit), waits up to 5 s, then kills it.
func startChild(ctx context.Context, name, exe string, args []string, stderr io.Writer) (addr string, pid int, stop func(), err error) {
	if exe == "" {
		return "", 0, nil, fmt.Errorf("no executable to run the %s from", name)
	}
	cmd := exec.Command(exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, fmt.Errorf("%s: %w", name, err)
	}
	first := &firstLine{ch: make(chan string, 1)}
	cmd.Stdout = first
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("start %s: %w", name, err)
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
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line := <-first.ch:
		a, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		host, _, serr := net.SplitHostPort(a)
		if !ok || serr != nil || !isLoopback(host) {
			stop()
			return "", 0, nil, fmt.Errorf("%s announced %q, want \"listening 127.0.0.1:PORT\"", name, line)
		}
		return a, cmd.Process.Pid, stop, nil
	case err := <-exited:
		exited <- err // let stop see it
		stop()
		return "", 0, nil, fmt.Errorf("%s exited before listening: %v", name, err)
	case <-t.C:
		stop()
		return "", 0, nil, fmt.Errorf("%s did not announce its address within 30s", name)
	case <-ctx.Done():
		stop()
		return "", 0, nil, ctx.Err()
	}
}
