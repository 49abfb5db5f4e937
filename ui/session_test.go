package ui_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// client is a browser without script: a cookie jar and forms.
type client struct {
	t    testing.TB
	base string
	http *http.Client
}

func newClient(t testing.TB, base string) *client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get returns the status and body of GET path.
func (c *client) get(path string) (int, string) {
	c.t.Helper()
	resp, err := c.http.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post posts a form with extra headers (name, value pairs) and returns status, Location and body.
func (c *client) post(path string, form url.Values, hdr ...string) (int, string, string) {
	c.t.Helper()
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

var tokenRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func token(t testing.TB, page string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf_token in the page:\n%s", page)
	}
	return m[1]
}

// signIn signs in with key and returns the overview page.
func (c *client) signIn(key string) string {
	c.t.Helper()
	_, page := c.get("/ui/")
	st, loc, body := c.post("/ui/sign-in", url.Values{"csrf_token": {token(c.t, page)}, "api_key": {key}})
	if st != http.StatusSeeOther || loc != "/ui/" {
		c.t.Fatalf("sign in: %d %q\n%s", st, loc, body)
	}
	st, page = c.get("/ui/")
	if st != http.StatusOK || !strings.Contains(page, "<h1>Fleet</h1>") {
		c.t.Fatalf("overview after sign-in: %d\n%s", st, page)
	}
	return page
}

func TestSessionsAndCSRF(t *testing.T) {
	e := newEnv(t)
	id := e.configure("modern", mcptest.Modern(t).URL, "internal")
	base := e.url()

	// The sign-in form has its own token: a post without the form's cookie and token is refused.
	anon := newClient(t, base)
	if st, _, _ := anon.post("/ui/sign-in", url.Values{"api_key": {e.Keys[persistence.RoleAdmin]}}); st != http.StatusForbidden {
		t.Fatalf("sign-in without the form's token: %d", st)
	}
	if st, loc := getStatus(t, anon, "/ui"); st != http.StatusMovedPermanently || loc != "/ui/" {
		t.Fatalf("/ui: %d → %q", st, loc)
	}
	if st, loc := getStatus(t, anon, "/ui/servers/"+id); st != http.StatusSeeOther || loc != "/ui/" {
		t.Fatalf("a card without a session: %d → %q", st, loc)
	}

	admin := newClient(t, base)
	page := admin.signIn(e.Keys[persistence.RoleAdmin])
	csrf := token(t, page)
	// Pages are served with a policy that allows no inline script.
	resp, err := admin.http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("CSP %q", csp)
	}

	// A state-changing request needs the session's token, and to come from this origin.
	if st, _, _ := admin.post("/ui/servers/"+id+"/disable", url.Values{}); st != http.StatusForbidden {
		t.Fatalf("without a token: %d", st)
	}
	wrong := "x" + csrf[1:] // one character off the real token
	if csrf[0] == 'x' {
		wrong = "y" + csrf[1:]
	}
	if st, _, _ := admin.post("/ui/servers/"+id+"/disable", url.Values{"csrf_token": {wrong}}); st != http.StatusForbidden {
		t.Fatalf("with a wrong token: %d", st)
	}
	if st, _, _ := admin.post("/ui/servers/"+id+"/disable", url.Values{"csrf_token": {csrf}}, "Origin", "http://evil.example"); st != http.StatusForbidden {
		t.Fatalf("from another origin: %d", st)
	}
	if st, loc, body := admin.post("/ui/servers/"+id+"/disable", url.Values{"csrf_token": {csrf}}, "Origin", base); st != http.StatusSeeOther {
		t.Fatalf("with the token: %d %q %s", st, loc, body)
	}
	_, card := admin.get("/ui/servers/" + id)
	if !strings.Contains(card, "Server disabled") || !strings.Contains(card, "Enable server") {
		t.Fatalf("after disabling, the card:\n%s", card)
	}
	if st, m := e.api("GET", "/v1/mcp/servers/"+id, e.Keys[persistence.RoleAdmin], nil); st != http.StatusOK || m["enabled"] != false {
		t.Fatalf("the API after disabling in the dashboard: %d %v", st, m["enabled"])
	}

	// Without script, the connection test answers with the card and the report in it.
	st, _, card := admin.post("/ui/servers/"+id+"/test-connection", url.Values{"csrf_token": {csrf}})
	if st != http.StatusOK || !strings.Contains(card, "Connection test succeeded") || !strings.Contains(card, "<dt>Protocol version</dt>") {
		t.Fatalf("test connection without script: %d\n%s", st, card)
	}

	// An operator may switch tools but not reach a remote server.
	op := newClient(t, base)
	opPage := op.signIn(e.Keys[persistence.RoleOperator])
	opToken := token(t, opPage)
	for _, action := range []string{"test-connection", "import", "enable"} {
		if st, _, _ := op.post("/ui/servers/"+id+"/"+action, url.Values{"csrf_token": {opToken}}); st != http.StatusForbidden {
			t.Fatalf("operator %s: %d", action, st)
		}
	}
	// One session's token is not another's.
	if st, _, _ := op.post("/ui/servers/"+id+"/disable", url.Values{"csrf_token": {csrf}}); st != http.StatusForbidden {
		t.Fatalf("another session's token: %d", st)
	}

	// The event stream accepts the session cookie, and sends an import as it commits.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/mcp/events", nil)
	stream, err := op.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("events with a session: %d", stream.StatusCode)
	}
	if st, m := e.api("PATCH", "/v1/mcp/servers/"+id, e.Keys[persistence.RoleAdmin], map[string]any{"enabled": true}); st != http.StatusOK {
		t.Fatalf("enable: %d %v", st, m)
	}
	if st, m := e.api("POST", "/v1/mcp/servers/"+id+"/import", e.Keys[persistence.RoleAdmin], nil); st != http.StatusOK || m["import_status"] != "succeeded" {
		t.Fatalf("import: %d %v", st, m)
	}
	sc := bufio.NewScanner(stream.Body)
	var id0, data string
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "id: ") {
			id0 = line[4:]
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, "mcp.server.imported") {
			data = line[6:]
			break
		}
	}
	cur, err := persistence.ParseEventCursor(id0) // the server's configuration changes are numbered in the fourth part
	if !strings.Contains(data, `"server_id":"`+id+`"`) || !strings.Contains(data, `"status":"succeeded"`) ||
		!strings.Contains(data, `"from":"never_imported"`) || err != nil || cur.Import != 1 || cur.Tool != 0 {
		t.Fatalf("import event id %q data %s", id0, data)
	}

	// Sign-out ends the session server-side: the old cookie opens nothing any more.
	oldCookies := admin.http.Jar.Cookies(mustURL(t, base+"/ui/"))
	if st, loc, _ := admin.post("/ui/sign-out", url.Values{"csrf_token": {csrf}}); st != http.StatusSeeOther || loc != "/ui/" {
		t.Fatalf("sign out: %d %q", st, loc)
	}
	replay := newClient(t, base)
	replay.http.Jar.SetCookies(mustURL(t, base+"/"), oldCookies)
	if st, body := replay.get("/ui/"); st != http.StatusOK || !strings.Contains(body, `id="api_key"`) {
		t.Fatalf("the signed-out cookie still opens the dashboard: %d", st)
	}
	if st, _ := replay.get("/ui/session"); st != http.StatusUnauthorized {
		t.Fatalf("the signed-out cookie on /ui/session: %d", st)
	}

	// A session survives a restart of the service (it is stored, not held in memory).
	e.restart()
	if st, body := op.get("/ui/servers/" + id); st != http.StatusOK || !strings.Contains(body, "modern") {
		t.Fatalf("the operator's session after a restart: %d", st)
	}
}

func getStatus(t testing.TB, c *client, path string) (int, string) {
	t.Helper()
	resp, err := c.http.Get(c.base + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
