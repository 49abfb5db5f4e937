package ui_test

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpfleet/mcpfleet/persistence"
	"github.com/mcpfleet/mcpfleet/service"
	"github.com/mcpfleet/mcpfleet/service/servicetest"
)

const traceTemplate = "http://jaeger.test:16686/trace/{trace_id}"

// stripRect is one shape of a strip as Chromium laid it out.
type stripRect struct {
	Status string  `json:"status"`
	Fill   string  `json:"fill"` // the computed fill, rgb(…)
	Width  float64 `json:"width"`
	Title  string  `json:"title"`
}

func stripRects(b *browser, strip string) []stripRect {
	b.t.Helper()
	raw := eval[string](b, `JSON.stringify(Array.from(document.querySelectorAll('[data-strip="`+strip+`"] svg.strip-svg rect')).map(function (r) {
		return {status: r.dataset.status, fill: getComputedStyle(r).fill, width: r.getBoundingClientRect().width,
			title: r.querySelector('title').textContent};
	}))`)
	var out []stripRect
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		b.t.Fatal(err)
	}
	return out
}

// TestStatusStrips renders a server with a day of transitions in Chromium: its card's strip shows
// each status as a span of the right colour and width, with its times in the span's title; the fleet
// page's strip stacks the tenant's counts; the overview's last heartbeat moves without a reload; and
// every trace id links to the tracing UI (MCPFLEET_TRACE_URL). Screenshots go to artifacts/.
func TestStatusStrips(t *testing.T) {
	e := &env{servicetest.Start(t, servicetest.MCPClient, func(c *service.Config, _ *service.Options) { c.TraceURL = traceTemplate })}
	mod := e.Keys[persistence.RoleModule]
	const regTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := e.Do("POST", "/v1/mcp/servers/register", mod, map[string]any{"module_name": "striped", "version": "1.0.0",
		"supported_protocols": []string{"2025-11-25"}}, "traceparent", "00-"+regTrace+"-00f067aa0ba902b7-01")
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	var reg struct {
		ServerID string `json:"server_id"`
	}
	_ = json.Unmarshal(r.Body, &reg)
	id := reg.ServerID
	steady := e.register("steady")
	beat := func(ids ...string) {
		t.Helper()
		for _, s := range ids {
			if st, m := e.api("POST", "/v1/mcp/servers/heartbeat", mod, map[string]string{"server_id": s}); st != http.StatusOK {
				t.Fatalf("heartbeat %s: %d %v", s, st, m)
			}
		}
	}
	// 10:00 registered; healthy for 6 h 20 s; degraded 4 h; unhealthy 4 h; healthy 4 h; deregistered 2 h.
	e.Clock.Advance(6 * time.Hour)
	beat(id, steady)
	e.Clock.Advance(20 * time.Second)
	beat(steady)
	e.RunMonitor() // striped: degraded at 16:00:20
	for _, step := range []func(){
		func() { beat(steady); e.RunMonitor() }, // striped: unhealthy at 20:00:20
		func() { beat(id, steady) },             // striped: recovered at 00:00:20
		func() {
			beat(steady)
			if st, m := e.api("POST", "/v1/mcp/servers/deregister", mod, map[string]string{"server_id": id}); st != http.StatusOK {
				t.Fatalf("deregister: %d %v", st, m)
			}
		},
	} {
		e.Clock.Advance(4 * time.Hour)
		step()
	}
	e.Clock.Advance(2 * time.Hour)
	beat(steady)
	e.RunMonitor()

	b := newBrowser(t)
	b.signIn(e.url(), e.Keys[persistence.RoleOperator])
	b.do("open the card", chromedp.Navigate(e.url()+"/ui/servers/"+id), chromedp.WaitVisible(chromedp.CSS(`[data-strip="server"]`)))

	// The card's strip: the window starts 3 h 59 min 40 s before the registration (not known), then each
	// status for as long as it held, in the order it held, coloured by status.
	rects := stripRects(b, "server")
	want := []struct {
		status string
		secs   float64
		fill   string
	}{
		{"unknown", 14380, "rgb(234, 238, 242)"}, {"healthy", 21620, "rgb(26, 127, 55)"}, {"degraded", 14400, "rgb(212, 167, 44)"},
		{"unhealthy", 14400, "rgb(207, 34, 46)"}, {"healthy", 14400, "rgb(26, 127, 55)"}, {"deregistered", 7200, "rgb(110, 119, 129)"},
	}
	if len(rects) != len(want) {
		t.Fatalf("card strip has %d spans, want %d: %+v", len(rects), len(want), rects)
	}
	var total float64
	for _, r := range rects {
		total += r.Width
	}
	if total < 500 {
		t.Fatalf("the strip is %v px wide", total)
	}
	for i, w := range want {
		got := rects[i]
		share := got.Width / total
		if got.Status != w.status || got.Fill != w.fill || math.Abs(share-w.secs/86400) > 0.005 {
			t.Errorf("span %d: %s %s %.4f of the strip, want %s %s %.4f", i, got.Status, got.Fill, share, w.status, w.fill, w.secs/86400)
		}
	}
	if title := rects[2].Title; title != "Degraded from May 17 16:00:20 to May 17 20:00:20 UTC (4 h)" {
		t.Errorf("degraded span's title %q", title)
	}
	if lbl := eval[string](b, `document.querySelector('[data-strip="server"] svg').getAttribute('aria-label')`); !strings.Contains(lbl, "Unhealthy from May 17 20:00:20 to May 18 00:00:20 UTC") {
		t.Errorf("strip summary %q", lbl)
	}
	// The registration's trace id links to the tracing UI.
	href := eval[string](b, `(document.querySelector('#timeline a.trace[data-trace-id="`+regTrace+`"]') || {href: ""}).href`)
	if href != strings.ReplaceAll(traceTemplate, "{trace_id}", regTrace) {
		t.Errorf("registration trace link %q", href)
	}
	b.screenshot("ui-strip-card.png")

	// The fleet page: 96 columns of 15 minutes; the last holds one healthy and one deregistered server,
	// the first none (before either registered).
	b.do("open the overview", chromedp.Navigate(e.url()+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`[data-strip="fleet"]`)))
	fleet := stripRects(b, "fleet")
	if len(fleet) < 96 {
		t.Fatalf("fleet strip has %d shapes, want a column of at least one for each of 96 buckets", len(fleet))
	}
	if first := fleet[0]; first.Status != "unknown" || !strings.Contains(first.Title, "0 healthy, 0 degraded, 0 unhealthy, 0 deregistered") {
		t.Errorf("first column %+v", first)
	}
	last := fleet[len(fleet)-2:]
	if last[0].Status != "healthy" || last[1].Status != "deregistered" || !strings.Contains(last[1].Title, "1 healthy, 0 degraded, 0 unhealthy, 1 deregistered") ||
		math.Abs(last[0].Width-last[1].Width) > 0.5 {
		t.Errorf("last column %+v", last)
	}
	unhealthy := 0
	for _, r := range fleet {
		if r.Status == "unhealthy" {
			unhealthy++
			if r.Fill != "rgb(207, 34, 46)" || !strings.Contains(r.Title, "1 healthy, 0 degraded, 1 unhealthy, 0 deregistered") {
				t.Errorf("unhealthy column %+v", r)
			}
		}
	}
	if unhealthy != 16 { // 4 hours of 15-minute columns
		t.Errorf("%d unhealthy columns, want 16", unhealthy)
	}
	b.screenshot("ui-strip-fleet.png")

	// The last heartbeat column follows the stream's heartbeat frames, without a reload.
	b.waitJS("the live feed is on", `document.querySelector("[data-live-state]").textContent.startsWith("Live: on")`, 10*time.Second)
	origin := b.markPage()
	e.Clock.Advance(7 * time.Second)
	beat(steady)
	wantText := e.Clock.Now().UTC().Format("2006-01-02 15:04:05") + " UTC"
	b.waitJS("the last heartbeat moves", `document.querySelector('tr[data-server-id="`+steady+`"] [data-field="last-heartbeat"]').textContent === "`+wantText+`"`, 10*time.Second)
	// The live feed links each event's trace.
	const lateTrace = "5cf92f3577b34da6a3ce929d0e0e4737"
	if r := e.Do("POST", "/v1/mcp/servers/register", mod, map[string]any{"module_name": "late", "version": "1.0.0",
		"supported_protocols": []string{"2025-11-25"}}, "traceparent", "00-"+lateTrace+"-00f067aa0ba902b7-01"); r.Status != http.StatusCreated {
		t.Fatalf("register late: %d %s", r.Status, r.Body)
	}
	b.waitJS("the live feed links the registration's trace", `document.querySelector('#live-log a.trace[data-trace-id="`+lateTrace+`"]').href === "`+
		strings.ReplaceAll(traceTemplate, "{trace_id}", lateTrace)+`"`, 10*time.Second)
	b.samePage(origin)
}
