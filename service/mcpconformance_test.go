package service_test

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

// conformanceTool finds the official MCP conformance suite (npm @modelcontextprotocol/conformance, with
// Node 22 from npm's node@22 package) where .ci/run installs it, .data/npm of the repository, or as
// MCPFLEET_CONFORMANCE. It returns the command and the directory to put first on PATH (for node).
func conformanceTool(t *testing.T) (string, string) {
	t.Helper()
	if p := os.Getenv("MCPFLEET_CONFORMANCE"); p != "" {
		return p, filepath.Dir(p)
	}
	bin, err := filepath.Abs("../.data/npm/node_modules/.bin")
	if err == nil {
		if _, err := os.Stat(filepath.Join(bin, "conformance")); err == nil {
			return filepath.Join(bin, "conformance"), bin
		}
	}
	if testing.Short() {
		t.Skip("the MCP conformance suite is not installed (.ci/run installs it into .data/npm)")
	}
	t.Fatal("the MCP conformance suite is not installed: npm install --prefix .data/npm node@22 @modelcontextprotocol/conformance@0.1.16")
	return "", ""
}

// TestMCPConformance runs the official MCP conformance suite's server scenarios against /mcp, through a
// proxy that adds the administrator's key (the suite sends none) and keeps the Host and Origin it sends.
// The scenarios mcpfleet answers differently by design are in testdata/conformance-baseline.yml, each
// explained in docs/mcp-endpoint.md; any other failure, and any baseline entry that passes, fails the test.
func TestMCPConformance(t *testing.T) {
	tool, path := conformanceTool(t)
	h := newHarness(t, withMCPEndpoint(""))
	h.gatewayServer("tools", mcptest.Tools(t).URL, false, "echo") // the suite wants every listed tool described
	target, _ := url.Parse(h.Svc.URL())
	key := h.adminKey()
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+key)
		},
		FlushInterval: -1,
	})
	t.Cleanup(proxy.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outDir := os.Getenv("MCPFLEET_CONFORMANCE_OUT") // keep the suite's checks.json files there
	if outDir == "" {
		outDir = t.TempDir()
	}
	cmd := exec.CommandContext(ctx, tool, "server", "--url", proxy.URL+"/mcp",
		"--expected-failures", "testdata/conformance-baseline.yml", "-o", outDir)
	cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("conformance suite:\n%s", out)
	if err != nil {
		t.Fatalf("the conformance suite failed against /mcp: %v", err)
	}
}
