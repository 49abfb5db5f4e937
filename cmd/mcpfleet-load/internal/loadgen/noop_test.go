package loadgen_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestNoopHandler(t *testing.T) {
	gin.SetMode(gin.TestMode) // quiet; the real no-op process runs in release mode
	ts := httptest.NewServer(loadgen.NewNoopHandler())
	t.Cleanup(ts.Close)
	resp, err := http.Post(ts.URL+"/v1/mcp/servers/heartbeat", "application/json", strings.NewReader(`{"server_id":"abc"}`))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	var got struct {
		ServerID string `json:"server_id"`
		Status   string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer %d, decode err %v", resp.StatusCode, err)
	}
	if got.ServerID != "abc" || got.Status != "healthy" {
		t.Errorf("answer = %+v", got)
	}
	bad, err := http.Post(ts.URL+"/v1/mcp/servers/heartbeat", "application/json", strings.NewReader(`{`))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body answered %d, want 400", bad.StatusCode)
	}
}

// TestNoopServerStopsWhenStdinCloses runs the subcommand in-process: it must
// announce a loopback address first and return once its stdin is closed.
func TestNoopServerStopsWhenStdinCloses(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- loadgen.Main(t.Context(), []string{loadgen.NoopCommand}, func(string) string { return "" }, stdinR, stdoutW, io.Discard)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("read announcement: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening 127.0.0.1:")
	if !ok || addr == "" {
		t.Fatalf("announcement %q, want listening 127.0.0.1:PORT", line)
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	resp, err := http.Post("http://127.0.0.1:"+addr+"/v1/mcp/servers/heartbeat", "application/json", strings.NewReader(`{"server_id":"x"}`))
	if err != nil {
		t.Fatalf("POST to the no-op server: %v", err)
	}
	resp.Body.Close()
	stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("noop-server returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("noop-server did not stop after stdin closed")
	}

	err = loadgen.RunNoopServer(context.Background(), []string{"--addr", "0.0.0.0:0"}, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("non-loopback --addr: err = %v", err)
	}
}
