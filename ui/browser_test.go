package ui_test

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// The dashboard in a real browser: headless Chromium (Debian's chromium package) driven over the
// DevTools protocol, against the running service with real PostgreSQL and real MCP servers on loopback.

// browser is one headless Chromium with one tab.
type browser struct {
	t   testing.TB
	ctx context.Context
}

// findChromium returns the path of a Chromium or Chrome binary, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	path := findChromium()
	if path == "" {
		if testing.Short() {
			t.Skip("no Chromium: the browser tests need Debian's chromium package (skipped under -short only)")
		}
		t.Fatal("no Chromium on PATH: the dashboard's browser tests need it — apt-get install -y chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("headless", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx (no timeout)
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	return &browser{t: t, ctx: ctx}
}

// do runs steps with a deadline.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// navigate runs a step that navigates (a link, a form) and waits for the new page to load.
func (b *browser) navigate(what string, step chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, step)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if resp == nil {
		return 0
	}
	return resp.Status
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until expr is truthy in the page.
func (b *browser) waitJS(what, expr string, within time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+5*time.Second)
	defer cancel()
	safe := `(function () { try { return (` + expr + `); } catch (e) { return false; } })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](safe, chromedp.WithPollingInterval(25*time.Millisecond),
		chromedp.WithPollingTimeout(within))); err != nil {
		body := eval[string](b, `document.body ? document.body.innerText.slice(0, 3000) : ""`)
		b.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, body)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifactDir(b.t), name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// signIn signs in on the sign-in form with key and waits for the overview.
func (b *browser) signIn(base, key string) {
	b.t.Helper()
	b.do("open the sign-in page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("api_key")))
	b.do("type the key", chromedp.SendKeys(chromedp.ID("api_key"), key))
	if st := b.navigate("sign in", chromedp.Submit(chromedp.ID("api_key"))); st != http.StatusOK {
		b.t.Fatalf("sign in: status %d", st)
	}
}

// markPage plants a marker in the page's JavaScript globals: a reload or a navigation loses it.
func (b *browser) markPage() float64 {
	b.t.Helper()
	return eval[float64](b, `window.__mcpfleetMarker = "still-here"; performance.timeOrigin`)
}

// samePage checks that the page has not been reloaded or left since markPage returned origin.
func (b *browser) samePage(origin float64) {
	b.t.Helper()
	marker := eval[string](b, `String(window.__mcpfleetMarker)`)
	now := eval[float64](b, `performance.timeOrigin`)
	navs := eval[int](b, `performance.getEntriesByType("navigation").length`)
	if marker != "still-here" || now != origin || navs != 1 {
		b.t.Fatalf("the page was reloaded or left: marker %q, time origin %v → %v, navigation entries %d", marker, origin, now, navs)
	}
}

func TestSignIn(t *testing.T) {
	e := newEnv(t)
	b := newBrowser(t)
	base := e.url()

	// A module key is refused, with a message, and no session.
	b.do("open the sign-in page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("api_key")))
	b.do("type a module key", chromedp.SendKeys(chromedp.ID("api_key"), e.Keys[persistence.RoleModule]))
	if st := b.navigate("sign in with a module key", chromedp.Submit(chromedp.ID("api_key"))); st != http.StatusForbidden {
		t.Fatalf("module key: status %d, want 403", st)
	}
	if got := b.text("#signin-problem"); !strings.Contains(got, "Module keys cannot sign in") {
		t.Fatalf("module key: problem %q", got)
	}
	// A wrong key is refused.
	b.do("type a wrong key", chromedp.SendKeys(chromedp.ID("api_key"), "mcpf_"+strings.Repeat("x", 43)))
	if st := b.navigate("sign in with a wrong key", chromedp.Submit(chromedp.ID("api_key"))); st != http.StatusUnauthorized {
		t.Fatalf("wrong key: status %d, want 401", st)
	}
	// An operator key opens the overview; the session cookie is HttpOnly and SameSite=Strict.
	b.signIn(base, e.Keys[persistence.RoleOperator])
	if h := b.text("h1"); h != "Fleet" {
		t.Fatalf("after sign-in: heading %q", h)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cookies.Cookies {
		if c.Name == "mcpfleet_session" {
			found = true
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/" {
				t.Fatalf("session cookie: HttpOnly %v, SameSite %v, Path %q", c.HTTPOnly, c.SameSite, c.Path)
			}
		}
	}
	if !found {
		t.Fatalf("no session cookie among %d cookies", len(cookies.Cookies))
	}
	if got := eval[string](b, `document.cookie`); strings.Contains(got, "mcpfleet_session") {
		t.Fatalf("the session cookie is readable by script: %q", got)
	}
	// Sign out: back to the sign-in form, and the old page's forms no longer work.
	if st := b.navigate("sign out", chromedp.Click(chromedp.CSS(`form[action="/ui/sign-out"] button`))); st != http.StatusOK {
		t.Fatalf("sign out: status %d", st)
	}
	b.do("the sign-in form is back", chromedp.WaitVisible(chromedp.ID("api_key")))
}

func TestLiveOverview(t *testing.T) {
	e := newEnv(t)
	quiet := e.register("quiet-module")
	e.register("chatty-module")
	b := newBrowser(t)
	base := e.url()
	b.signIn(base, e.Keys[persistence.RoleOperator])
	row := `tr[data-server-id="` + quiet + `"]`
	b.waitJS("the overview lists the module", `document.querySelector('`+row+` [data-status="healthy"]') !== null`, 10*time.Second)
	b.waitJS("the live feed is on", `document.querySelector("[data-live-state]").textContent.startsWith("Live: on")`, 10*time.Second)
	origin := b.markPage()

	// 2H of silence: degraded, shown without a reload (as a word and an icon, not a colour).
	e.monitor(20 * time.Second)
	b.waitJS("degraded on the overview", `document.querySelector('`+row+` [data-status="degraded"] .status-text').textContent === "Degraded"`, 10*time.Second)
	if icon := b.text(row + ` [data-status="degraded"] .status-icon`); icon != "▲" {
		t.Fatalf("degraded icon %q", icon)
	}
	// 3H: unhealthy.
	e.monitor(10 * time.Second)
	b.waitJS("unhealthy on the overview", `document.querySelector('`+row+` [data-status="unhealthy"] .status-text').textContent === "Unhealthy"`, 10*time.Second)
	b.waitJS("the counts follow", `document.querySelector('[data-count="unhealthy"] [data-count-value]').textContent === "2" &&
		document.querySelector('[data-count="healthy"] [data-count-value]').textContent === "0"`, 10*time.Second)
	b.samePage(origin)
	if got := b.text("#live-log"); !strings.Contains(got, "quiet-module: Degraded → Unhealthy") {
		t.Fatalf("live log: %q", got)
	}
	b.screenshot("ui-overview.png")

	// The service restarts: the browser reconnects by itself (same session, from the last event id)
	// and the next transition still arrives without a reload.
	e.restart()
	b.waitJS("the live feed is back", `document.querySelector("[data-live-state]").textContent.startsWith("Live: on")`, 20*time.Second)
	st, m := e.api("POST", "/v1/mcp/servers/heartbeat", e.Keys[persistence.RoleModule], map[string]string{"server_id": quiet})
	if st != http.StatusOK {
		t.Fatalf("heartbeat after restart: %d %v", st, m)
	}
	b.waitJS("recovered on the overview after the restart", `document.querySelector('`+row+` [data-status="healthy"]') !== null`, 15*time.Second)
	b.samePage(origin)

	// Narrow screens: readable at 360 px without sideways scrolling.
	b.do("emulate 360 px", chromedp.EmulateViewport(360, 800))
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Fatalf("at 360 px the overview is %d px wide", w)
	}
	b.screenshot("ui-overview-360.png")
}

// flaky is an MCP endpoint in front of a real server that can be told to hang, so a test can hold a
// connection test in flight.
type flaky struct {
	hang    atomic.Bool
	release chan struct{}
	proxy   *httputil.ReverseProxy
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.hang.Load() {
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		http.Error(w, "gone", http.StatusBadGateway)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

func TestServerCard(t *testing.T) {
	e := newEnv(t)
	modern := mcptest.Modern(t)
	target, err := url.Parse(modern.URL)
	if err != nil {
		t.Fatal(err)
	}
	fl := &flaky{release: make(chan struct{}), proxy: httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})}
	front := &http.Server{Handler: fl, ReadHeaderTimeout: 5 * time.Second}
	ln, err := newLoopbackListener()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() {
		close(fl.release)
		_ = front.Close()
	})
	id := e.configure("modern-server", "http://"+ln.Addr().String()+target.Path, "") // no data class yet
	hostileID := e.configure("hostile-server", mcptest.Hostile(t).URL, "internal")

	b := newBrowser(t)
	base := e.url()
	alerts := watchDialogs(b)
	b.signIn(base, e.Keys[persistence.RoleAdmin])
	if st := b.navigate("open the card", chromedp.Click(chromedp.CSS(`a[href="/ui/servers/`+id+`"]`))); st != http.StatusOK {
		t.Fatalf("card: status %d", st)
	}
	if got := b.text("[data-contact-line]"); !strings.HasPrefix(got, "Never") {
		t.Fatalf("contact line before any round trip: %q", got)
	}
	if got := b.text("#connection"); !strings.Contains(got, "Streamable HTTP") {
		t.Fatalf("transport not stated: %q", got)
	}
	requests := countRequests(b, "/test-connection")
	origin := b.markPage()

	// Test connection: the report appears in the card, the page is not reloaded.
	b.do("test connection", chromedp.Click(chromedp.CSS("[data-test-button]")))
	b.waitJS("the report", `document.querySelector("[data-report-head]").textContent.startsWith("Connection test succeeded")`, 15*time.Second)
	b.samePage(origin)
	version := reportValue(b, "Protocol version")
	if version == "" || len(version) != len("2025-11-25") {
		t.Fatalf("negotiated protocol version %q", version)
	}
	st, api := e.api("POST", "/v1/mcp/servers/"+id+"/test-connection", e.Keys[persistence.RoleAdmin], nil)
	if st != http.StatusOK || api["protocol_version"] != version {
		t.Fatalf("the card says %q, the API %d %v", version, st, api)
	}
	if got := reportValue(b, "Server name"); got != "modern" {
		t.Fatalf("server name %q", got)
	}
	contact := b.text("[data-contact-line]")
	if !strings.Contains(contact, "round trip") {
		t.Fatalf("contact line not refreshed in place: %q", contact)
	}
	// The same string a reload would show: composed once, server-side.
	b.screenshot("ui-card.png")

	// The server stops answering: the region is cleared before the request goes out, the button
	// cannot fire twice while it is in flight, and the failure replaces the success.
	fl.hang.Store(true)
	b.do("test connection again", chromedp.Click(chromedp.CSS("[data-test-button]")))
	b.waitJS("the button disabled in flight", `document.querySelector("[data-test-button]").disabled`, 5*time.Second)
	if n := eval[int](b, `document.getElementById("connection-report").children.length`); n != 0 {
		t.Fatalf("the previous report still stands while the test is in flight (%d children)", n)
	}
	b.do("try to fire it twice", chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-test-button]").click();
		document.querySelector("form[data-test-connection]").requestSubmit()`))
	b.waitJS("the failure", `document.querySelector("[data-report-head]").textContent.startsWith("Connection test failed")`, 15*time.Second)
	fl.hang.Store(false)
	if got := b.text("#connection-report"); strings.Contains(got, "Protocol version") || strings.Contains(got, "succeeded") {
		t.Fatalf("the success survived the failure: %q", got)
	}
	if got := reportValue(b, "Failure class"); !strings.HasPrefix(got, "timeout") {
		t.Fatalf("failure class %q", got)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d test-connection requests left the browser, want 2 (the in-flight one cannot be fired again)", n)
	}
	if got := b.text("[data-contact-line]"); got != contact {
		t.Fatalf("a failure moved the contact line: %q → %q", contact, got)
	}
	b.samePage(origin)

	// Import is refused while the server declares no data class (fail-closed); declaring one is a form.
	b.navigate("import without a data class", chromedp.Click(chromedp.CSS(`form[action$="/import"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "Import refused") || !strings.Contains(got, "no data class") {
		t.Fatalf("import without a data class: %q", got)
	}
	b.do("choose a data class", chromedp.SetValue(chromedp.ID("data-class"), "internal"))
	b.navigate("save the settings", chromedp.Click(chromedp.CSS(`form[action$="/settings"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "data class internal, approval required") {
		t.Fatalf("settings notice %q", got)
	}
	// Import (posts and reloads, and shows what it did), then enable a tool.
	b.navigate("import", chromedp.Click(chromedp.CSS(`form[action$="/import"] button`)))
	flash := b.text(".flash")
	for _, want := range []string{"Import succeeded", "Added", "Kept", "Orphaned", "Skipped"} {
		if !strings.Contains(flash, want) {
			t.Fatalf("import report lacks %q: %q", want, flash)
		}
	}
	if got := b.text(`tr[data-skill="echo"] td[data-label="Enabled"]`); got != "No" {
		t.Fatalf("an imported tool starts %q, want disabled", got)
	}
	b.navigate("enable echo", chromedp.Click(chromedp.CSS(`tr[data-skill="echo"] form button`)))
	if got := b.text(`tr[data-skill="echo"] td[data-label="Enabled"]`); got != "Yes" {
		t.Fatalf("echo after enabling: %q", got)
	}
	if got := b.text(".flash"); !strings.Contains(got, `Tool "echo" enabled.`) {
		t.Fatalf("enable notice %q", got)
	}
	if got := b.text(`tr[data-skill="echo"] td[data-label="Callable"]`); got != "Yes" {
		t.Fatalf("echo callable: %q", got)
	}
	// Approve a call parked by the gateway (the server requires approval, as every new one does), and
	// deny another: both through the card, against the real gateway.
	skill := skillID(t, e, id, "echo")
	approveCall := e.parkCall(skill, `{"text":"<b>approved</b>"}`)
	denyCall := e.parkCall(skill, `{"text":"denied"}`)
	b.navigate("reload the card", chromedp.Navigate(base+"/ui/servers/"+id))
	if got := b.text(`tr[data-call-id="` + approveCall + `"] td[data-label="Arguments"]`); got != `{"text": "<b>approved</b>"}` && got != `{"text":"<b>approved</b>"}` {
		t.Fatalf("parked call arguments shown as %q", got)
	}
	b.navigate("approve", chromedp.Click(chromedp.CSS(`form[action="/ui/calls/`+approveCall+`/approve"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "Call approved; it is now succeeded.") {
		t.Fatalf("after approving: %q", got)
	}
	b.navigate("deny", chromedp.Click(chromedp.CSS(`form[action="/ui/calls/`+denyCall+`/deny"] button`)))
	if got := b.text(".flash"); !strings.Contains(got, "Call denied (denied)") {
		t.Fatalf("after denying: %q", got)
	}
	if got := b.text("#approvals"); !strings.Contains(got, "No call is awaiting approval") {
		t.Fatalf("approvals after both decisions: %q", got)
	}
	if got := b.text("#calls"); !strings.Contains(got, "call.succeeded") || !strings.Contains(got, "call.failed") {
		t.Fatalf("recent calls: %q", got)
	}
	if st, m := e.api("GET", "/v1/mcp/calls/"+approveCall, e.Keys[persistence.RoleAdmin], nil); st != http.StatusOK || m["state"] != "succeeded" {
		t.Fatalf("the approved call through the API: %d %v", st, m)
	}
	b.screenshot("ui-card-tools.png")
	b.do("emulate 360 px", chromedp.EmulateViewport(360, 800))
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 360 {
		t.Fatalf("at 360 px the card is %d px wide", w)
	}
	b.screenshot("ui-card-360.png")
	b.do("back to the desktop width", chromedp.EmulateViewport(1280, 1000))
	// Approving a call: TestApprovals, against a stand-in gateway until issue 4's exists.

	// A hostile server's self-description is text, and runs nothing.
	b.navigate("open the hostile card", chromedp.Navigate(base+"/ui/servers/"+hostileID))
	b.do("arm the alert trap", chromedp.Evaluate[chromedp.Void](`window.__alerted = false; window.alert = function () { window.__alerted = true; }`))
	// From the keyboard: Tab reaches the button, Enter fires it.
	reached := false
	for range 40 {
		b.do("press Tab", chromedp.KeyEvent(kb.Tab))
		if eval[bool](b, `document.activeElement && document.activeElement.matches("[data-test-button]")`) {
			reached = true
			break
		}
	}
	if !reached {
		t.Fatal("Tab never reaches the Test connection button")
	}
	b.do("press Enter", chromedp.KeyEvent(kb.Enter))
	b.waitJS("the hostile report", `document.querySelector("[data-report-head]").textContent.startsWith("Connection test succeeded")`, 15*time.Second)
	if got := reportValue(b, "Server name"); got != mcptest.HostileName {
		t.Fatalf("hostile name shown as %q, want the text %q", got, mcptest.HostileName)
	}
	if n := eval[int](b, `document.querySelectorAll("img").length`); n != 0 {
		t.Fatalf("the hostile self-description became %d <img> element(s)", n)
	}
	if eval[bool](b, `window.__alerted`) || alerts.Load() != 0 {
		t.Fatal("the hostile self-description ran script")
	}
}

// reportValue is the text of the report line labelled label.
func reportValue(b *browser, label string) string {
	b.t.Helper()
	return eval[string](b, `(function () {
		var dts = document.querySelectorAll("#connection-report dt");
		for (var i = 0; i < dts.length; i++) {
			if (dts[i].textContent === `+jsString(label)+`) { return dts[i].nextElementSibling.textContent; }
		}
		return "";
	})()`)
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// countRequests counts the requests the page sends whose URL contains part.
func countRequests(b *browser, part string) *atomic.Int64 {
	var n atomic.Int64
	evs := chromedp.Events(b.ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range evs {
			if err != nil {
				return
			}
			if ev.Request.Method == http.MethodPost && strings.Contains(ev.Request.URL, part) {
				n.Add(1)
			}
		}
	}()
	return &n
}

// watchDialogs counts and dismisses every JavaScript dialog the page opens.
func watchDialogs(b *browser) *atomic.Int64 {
	var n atomic.Int64
	evs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range evs {
			if err != nil {
				return
			}
			n.Add(1)
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return &n
}
