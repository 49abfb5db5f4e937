package service_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/service"
)

// A module key learns nothing of where names resolve from the service's side: an endpoint it gives at
// registration that is refused for its address (or because the name does not resolve) is answered with
// one generic detail, whatever the reason, and the reason is logged under the request's trace id. An
// administrator registering the same endpoint keeps the specific detail, and how a URL is written
// (scheme, user name) stays specific for everyone.
func TestEndpointRefusedIsGenericForModuleKeys(t *testing.T) {
	var logs logBuffer
	h := newHarness(t, withMCP, withLogs(&logs), func(c *service.Config, _ *service.Options) { c.EndpointAllowlist = nil })
	addressed := []struct{ endpoint, secret string }{
		{"http://localhost:8080/mcp", "127.0.0.1"},          // a name resolving to loopback: which address it resolves to
		{"http://10.1.2.3/mcp", "private"},                  // a private literal
		{"http://no-such-host.invalid/mcp", "could not be"}, // a name that does not resolve
		{"http://[2002:c0a8:101::1]/mcp", "6to4"},           // a tunnelling prefix
	}
	generic := ""
	for i, tt := range addressed {
		body := registration(sprintf("mod%d", i))
		body["endpoint"] = tt.endpoint
		r := h.do("POST", "/v1/mcp/servers/register", h.module(), body)
		p := wantProblem(t, r, 400, "endpoint_refused")
		detail, _ := p["detail"].(string)
		if strings.Contains(r.string(), tt.secret) || strings.Contains(detail, "loopback") {
			t.Errorf("module key, %s: the problem says where the host resolves: %s", tt.endpoint, r.string())
		}
		if generic == "" {
			generic = detail
		} else if detail != generic {
			t.Errorf("module key, %s: detail %q differs from %q: the difference tells the reason", tt.endpoint, detail, generic)
		}
		traceID, _ := p["trace_id"].(string)
		if traceID == "" || p["field"] != "endpoint" {
			t.Fatalf("module key, %s: problem %v, want field endpoint and a trace_id", tt.endpoint, p)
		}
		// Logged before the answer was written.
		logged := false
		for _, line := range strings.Split(logs.String(), "\n") {
			logged = logged || strings.Contains(line, traceID) && strings.Contains(line, "registration endpoint refused") && strings.Contains(line, tt.secret)
		}
		if !logged {
			t.Errorf("module key, %s: no log line with trace id %s and the reason", tt.endpoint, traceID)
		}

		// The administrator keeps the reason.
		r = h.do("POST", "/v1/mcp/servers/register", h.adminKey(), body)
		if p := wantProblem(t, r, 400, "endpoint_refused"); !strings.Contains(p["detail"].(string), tt.secret) {
			t.Errorf("admin key, %s: detail %q does not say why (%s)", tt.endpoint, p["detail"], tt.secret)
		}
	}

	// How the URL is written is not a secret: the module key is told.
	body := registration("modscheme")
	body["endpoint"] = "ftp://example.com/mcp"
	if p := wantProblem(t, h.do("POST", "/v1/mcp/servers/register", h.module(), body), 400, "endpoint_refused"); !strings.Contains(p["detail"].(string), "scheme") {
		t.Errorf("module key, bad scheme: detail %q does not say scheme", p["detail"])
	}
}

// headerRecorder is a loopback HTTP server that records the headers of every request and answers 401:
// the host an attacker would move a credential to.
type headerRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newHeaderRecorder(t *testing.T) *headerRecorder {
	r := &headerRecorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Header.Clone())
		r.mu.Unlock()
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(r.Close)
	return r
}

// carrying returns how many requests it received, and how many of them carried secret in any header.
func (r *headerRecorder) carrying(secret string) (requests, carried int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.seen {
		for _, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, secret) {
					carried++
				}
			}
		}
	}
	return len(r.seen), carried
}

func (r *headerRecorder) authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, h := range r.seen {
		out = append(out, h.Values("Authorization")...)
	}
	return out
}

// A stored credential is bound to its endpoint's origin (finding 6): an administrator who moves a
// server to another origin cannot send its credential there with one test connection — the move drops
// it unless a new one comes with it; another path on the same origin keeps it. A credential moved under
// the API (its row's endpoint rewritten in the database) does not open at the new origin.
func TestCredentialBoundToEndpointOrigin(t *testing.T) {
	const token = "origin-bound-7f3a"
	h := newHarness(t, withMCP)
	a := mcptest.Bearer(t, token)
	b := newHeaderRecorder(t)
	body := configureBody("bound", a.URL)
	body["data_class"] = "internal"
	body["auth"] = map[string]any{"mode": "bearer", "credential": token}
	id := h.configureID(body)
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("test connection with the right credential: %v", rep)
	}

	// Another path on the same origin (and the default spelling of the same host) keeps it.
	h.patch(id, map[string]any{"endpoint": a.URL + "/another/path"})
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("same origin, another path: %v", rep)
	}

	// Moving with an auth but no credential is refused, and changes nothing.
	r := h.do("PATCH", "/v1/mcp/servers/"+id, h.adminKey(), map[string]any{"endpoint": b.URL, "auth": map[string]any{"mode": "bearer"}})
	if p := wantProblem(t, r, 400, "invalid_field"); p["field"] != "auth.credential" {
		t.Errorf("move with auth and no credential: %v", p)
	}
	if got := h.fetchServer(id); got["endpoint"] != a.URL+"/another/path" {
		t.Fatalf("a refused PATCH moved the endpoint to %v", got["endpoint"])
	}

	// Moving to another origin drops the credential: the test connection sends nothing to the new host.
	got := h.patch(id, map[string]any{"endpoint": b.URL})
	if auth := got["auth"].(map[string]any); auth["mode"] != "bearer" || auth["credential_configured"] != false {
		t.Fatalf("after a move to another origin: auth %v, want bearer without a credential", auth)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 409, "credential_missing")
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/import", h.adminKey(), nil), 409, "credential_missing")
	if n, carried := b.carrying(token); n != 0 || carried != 0 {
		t.Fatalf("the new host received %d requests, %d carrying the credential", n, carried)
	}
	// Moving back does not bring it back: it is gone, not hidden.
	h.patch(id, map[string]any{"endpoint": a.URL})
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 409, "credential_missing")

	// A move that brings a new credential seals it for the new origin, and only it reaches the new host.
	h.patch(id, map[string]any{"endpoint": b.URL, "auth": map[string]any{"mode": "bearer", "credential": "for-b"}})
	if rep := h.testConnection(id); rep["reachable"] != false || rep["failure_class"] != "auth" {
		t.Fatalf("test connection against the recorder: %v", rep)
	}
	if auths := b.authorizations(); len(auths) == 0 || auths[0] != "Bearer for-b" {
		t.Errorf("the new host saw Authorization %q, want the new credential", auths)
	}
	if _, carried := b.carrying(token); carried != 0 {
		t.Errorf("the old credential reached the new host %d times", carried)
	}

	// Under the API: the endpoint rewritten in the database, the sealed credential left in place.
	body = configureBody("moved", a.URL)
	body["auth"] = map[string]any{"mode": "header", "header_name": "X-Api-Key", "credential": token}
	moved := h.configureID(body)
	if _, err := h.DB.AdminPool(t).Exec(context.Background(), `UPDATE server_config SET endpoint = $1 WHERE server_id = $2`, b.URL+"/mcp", moved); err != nil {
		t.Fatal(err)
	}
	before, _ := b.carrying(token)
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+moved+"/test-connection", h.adminKey(), nil), 409, "credential_unreadable")
	if n, carried := b.carrying(token); n != before || carried != 0 {
		t.Errorf("a credential moved in the database reached the new host (%d requests, %d with it)", n-before, carried)
	}
}

// A credential sealed before credentials were bound to their origin (format 1, tenant and server only)
// is not opened as it is; the next start seals it again for the origin its row has then, and it works.
func TestLegacyCredentialResealedAtStart(t *testing.T) {
	const token = "legacy-9c2e"
	h := newHarness(t, withMCP)
	a := mcptest.Bearer(t, token)
	body := configureBody("legacy", a.URL)
	body["auth"] = map[string]any{"mode": "bearer", "credential": "placeholder"}
	id := h.configureID(body)

	// Format 1 as it was written: 0x01 ‖ nonce ‖ AES-256-GCM under the key, bound to tenant and server.
	raw, _ := hex.DecodeString(testSecretKey)
	block, _ := aes.NewCipher(raw)
	aead, _ := cipher.NewGCM(block)
	nonce := make([]byte, aead.NonceSize())
	legacy := aead.Seal(append([]byte{1}, nonce...), nonce, []byte(token), []byte("mcpfleet/server_config.credential/"+h.Tenant.String()+"/"+id))
	pool := h.DB.AdminPool(t)
	if _, err := pool.Exec(context.Background(), `UPDATE server_config SET credential = $1 WHERE server_id = $2`, legacy, id); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, h.do("POST", "/v1/mcp/servers/"+id+"/test-connection", h.adminKey(), nil), 409, "credential_unreadable")

	h.Restart(withMCP)
	if rep := h.testConnection(id); rep["reachable"] != true {
		t.Fatalf("after the restart the legacy credential does not work: %v", rep)
	}
	var stored []byte
	if err := pool.QueryRow(context.Background(), `SELECT credential FROM server_config WHERE server_id = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 || stored[0] != 2 || bytes.Contains(stored, []byte(token)) {
		t.Errorf("stored credential after the restart: format %v, want 2, sealed", stored[:1])
	}
}
