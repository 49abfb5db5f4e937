package ui_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
)

// rawClient is a browser as seen on the wire: cookies are sent only as the test says, and every
// Set-Cookie of the last answer is kept as the server wrote it.
type rawClient struct {
	t    testing.TB
	base string
	http *http.Client
}

func (c *rawClient) do(method, path string, form url.Values, cookies ...*http.Cookie) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, ck := range cookies {
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// setCookie returns the Set-Cookie header of resp that sets name, failing the test without one.
func setCookie(t testing.TB, resp *http.Response, name string) (*http.Cookie, string) {
	t.Helper()
	for _, line := range resp.Header.Values("Set-Cookie") {
		ck, err := http.ParseSetCookie(line)
		if err == nil && ck.Name == name {
			return ck, line
		}
	}
	t.Fatalf("no Set-Cookie %s in %q", name, resp.Header.Values("Set-Cookie"))
	return nil, ""
}

// MCPFLEET_UI_SECURE_COOKIES, parsed by the service's configuration, makes the dashboard's cookies
// Secure and __Host- named (Path=/, no Domain) on plain HTTP behind a TLS proxy, and then a plain-named
// session cookie — one a sibling host could have planted — opens nothing. Off, the cookies are the
// plain ones, not Secure.
func TestSecureCookiesFromEnv(t *testing.T) {
	env := map[string]string{"MCPFLEET_DATABASE_URL": "postgres://cyberos_app@127.0.0.1/x"}
	getenv := func(k string) string { return env[k] }
	for _, tt := range []struct {
		v    string
		want bool
	}{{"", false}, {"true", true}, {"1", true}, {"false", false}} {
		env["MCPFLEET_UI_SECURE_COOKIES"] = tt.v
		c, err := service.FromEnv(getenv)
		if err != nil || c.UISecureCookies != tt.want {
			t.Errorf("MCPFLEET_UI_SECURE_COOKIES=%q: %v, %v; want %v", tt.v, c.UISecureCookies, err, tt.want)
		}
	}
	env["MCPFLEET_UI_SECURE_COOKIES"] = "yes please"
	if _, err := service.FromEnv(getenv); err == nil || !strings.Contains(err.Error(), "MCPFLEET_UI_SECURE_COOKIES") {
		t.Errorf("a bad value: %v, want an error naming the variable", err)
	}

	e := newEnv(t)
	for _, secure := range []bool{false, true} {
		env["MCPFLEET_UI_SECURE_COOKIES"] = map[bool]string{false: "false", true: "true"}[secure]
		c, err := service.FromEnv(getenv)
		if err != nil {
			t.Fatal(err)
		}
		e.Cfg.UISecureCookies = c.UISecureCookies
		e.restart()
		name := map[bool]string{false: "session", true: "__Host-session"}[secure]
		t.Run(name, func(t *testing.T) {
			rc := &rawClient{t: t, base: e.url(), http: &http.Client{
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
			sessionName, signinName, signinPath := "mcpfleet_session", "mcpfleet_signin", "/ui/"
			if secure {
				sessionName, signinName, signinPath = "__Host-mcpfleet_session", "__Host-mcpfleet_signin", "/"
			}
			resp, page := rc.do("GET", "/ui/", nil)
			signin, line := setCookie(t, resp, signinName)
			if signin.Secure != secure || signin.Path != signinPath || signin.Domain != "" || !signin.HttpOnly {
				t.Errorf("sign-in cookie %q: want Secure=%v, Path=%s, no Domain, HttpOnly", line, secure, signinPath)
			}
			form := url.Values{"csrf_token": {token(t, page)}, "api_key": {e.Keys[persistence.RoleOperator]}}
			resp, body := rc.do("POST", "/ui/sign-in", form, signin)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign in: %d\n%s", resp.StatusCode, body)
			}
			sess, line := setCookie(t, resp, sessionName)
			if sess.Secure != secure || sess.Path != "/" || sess.Domain != "" || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode {
				t.Errorf("session cookie %q: want Secure=%v, Path=/, no Domain, HttpOnly, SameSite=Strict", line, secure)
			}
			if resp, page := rc.do("GET", "/ui/", nil, sess); resp.StatusCode != http.StatusOK || !strings.Contains(page, "<h1>Fleet</h1>") {
				t.Fatalf("the session cookie does not open the overview: %d", resp.StatusCode)
			}
			if !secure {
				return
			}
			// The same session id under the plain name (a sibling host can set that one) opens nothing,
			// and the plain sign-in cookie does not carry a sign-in either.
			planted := &http.Cookie{Name: "mcpfleet_session", Value: sess.Value}
			if resp, page := rc.do("GET", "/ui/", nil, planted); resp.StatusCode != http.StatusOK || strings.Contains(page, "<h1>Fleet</h1>") {
				t.Errorf("a plain-named session cookie opened the overview (%d)", resp.StatusCode)
			}
			resp, page = rc.do("GET", "/ui/", nil)
			signin, _ = setCookie(t, resp, signinName)
			form = url.Values{"csrf_token": {token(t, page)}, "api_key": {e.Keys[persistence.RoleOperator]}}
			if resp, _ := rc.do("POST", "/ui/sign-in", form, &http.Cookie{Name: "mcpfleet_signin", Value: signin.Value}); resp.StatusCode != http.StatusForbidden {
				t.Errorf("sign-in with a plain-named sign-in cookie: %d, want 403", resp.StatusCode)
			}
		})
	}
}
