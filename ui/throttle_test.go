package ui_test

import (
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/internal/wait"
	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

// The sign-in form and session cookies are checked under the API's failed-authentication throttle:
// unknown keys posted to the form, and unknown session ids, use up the address's budget as unknown
// bearer keys do; past it both are answered 429 with Retry-After and nothing is looked up. A session
// the service confirmed keeps working meanwhile, and a good key signs in once the budget refills.
func TestSignInAndSessionsAreThrottledPerAddress(t *testing.T) {
	e := &env{servicetest.Start(t, servicetest.MCPClient, func(c *service.Config, _ *service.Options) {
		c.AuthFailureBurst, c.AuthFailureRate = 3, 0.2 // a token every 5 s: the steps below fit in one
	})}
	base := e.url()
	admin := newClient(t, base)
	admin.signIn(e.Keys[persistence.RoleAdmin]) // its session is now one the service confirmed

	flood := newClient(t, base)
	_, page := flood.get("/ui/")
	form := url.Values{"csrf_token": {token(t, page)}}
	var throttled *http.Response
	for i := range 10 {
		bad, _, err := persistence.GenerateAPIKey()
		if err != nil {
			t.Fatal(err)
		}
		form.Set("api_key", bad)
		resp := postForm(t, flood, "/ui/sign-in", form)
		if i < 3 && resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unknown key %d within the burst: %d, want 401", i, resp.StatusCode)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			throttled = resp
			break
		}
	}
	if throttled == nil {
		t.Fatal("10 unknown keys on the sign-in form from one address were never throttled")
	}
	if ra := throttled.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("a throttled sign-in without Retry-After: %q", ra)
	}
	if body := readBody(throttled); !strings.Contains(body, "Too many sign-in attempts") || !strings.Contains(body, `id="api_key"`) {
		t.Fatalf("the throttled sign-in page:\n%s", body)
	}

	// The confirmed session is not held up; an unknown session id is refused without a lookup.
	if st, body := admin.get("/ui/"); st != http.StatusOK || !strings.Contains(body, "<h1>Fleet</h1>") {
		t.Fatalf("a confirmed session from a throttled address: %d", st)
	}
	forged := newClient(t, base)
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	forged.http.Jar.SetCookies(mustURL(t, base+"/"), []*http.Cookie{{Name: "mcpfleet_session", Value: base64.RawURLEncoding.EncodeToString(id), Path: "/"}})
	if st, _ := forged.get("/ui/"); st != http.StatusTooManyRequests {
		t.Fatalf("an unknown session id from a throttled address: %d, want 429", st)
	}
	if st, _ := forged.get("/ui/session"); st != http.StatusTooManyRequests {
		t.Fatalf("/ui/session with an unknown session id from a throttled address: %d, want 429", st)
	}

	// Once the budget refills, a good key signs in.
	op := newClient(t, base)
	wait.For(t, "an operator key to sign in after the window", 20*time.Second, func() bool {
		_, page := op.get("/ui/")
		resp := postForm(t, op, "/ui/sign-in", url.Values{"csrf_token": {token(t, page)}, "api_key": {e.Keys[persistence.RoleOperator]}})
		readBody(resp)
		return resp.StatusCode == http.StatusSeeOther
	})
	if st, body := op.get("/ui/"); st != http.StatusOK || !strings.Contains(body, "<h1>Fleet</h1>") {
		t.Fatalf("the operator after signing in: %d", st)
	}
}

// postForm posts form to path and returns the answer (its body unread).
func postForm(t testing.TB, c *client, path string, form url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readBody(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
