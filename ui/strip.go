package ui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// The status strips: a server's last 24 hours as coloured spans (the card), the tenant's counts by
// status over the same window (the fleet page). Both are server-rendered SVG with a <title> per
// shape, so the times show on hover without script, and a text summary for screen readers. The spans
// and buckets are computed by the pure functions below (strip_test.go), the pages only draw them.

// stripWindow is the time a strip covers, ending now.
const stripWindow = 24 * time.Hour

// stripWidth is the width of a strip's viewBox: x and width are in these units (the SVG is scaled to
// the page's width).
const stripWidth = 1000.0

// fleetBuckets is the number of columns of the fleet strip (15 minutes each over 24 hours).
const fleetBuckets = 96

// maxStripEvents bounds the events one server's strip reads: a server with more transitions in the
// window (one every 86 s, all day) shows its newest ones, and the time before them as not known.
const maxStripEvents = 1000

// statusFill is the colour of each status in a strip; unknown (before the server registered, or not
// shown) is a pale grey. Status is never told by colour alone: each shape has a title, and the strip a
// legend and a summary.
var statusFill = map[health.Status]string{
	health.Healthy:      "#1a7f37",
	health.Degraded:     "#d4a72c",
	health.Unhealthy:    "#cf222e",
	health.Deregistered: "#6e7781",
	"":                  "#eaeef2",
}

// statusChange is a server's status from At on.
type statusChange struct {
	At     time.Time
	Status health.Status
}

// span is a stretch of time [From, To) in one status ("" for not known: before the server
// registered, or older than the events read).
type span struct {
	From, To time.Time
	Status   health.Status
}

// serverSpans returns the spans of [from, to): initial holds at from ("" when not known), each change
// from its time on. Changes must be oldest first; those at or before from only set the status at from,
// those at or after to are ignored. Adjacent spans of one status are merged, and no span is empty, so
// the spans tile [from, to) exactly. A window that is empty (to not after from) has no spans.
func serverSpans(initial health.Status, changes []statusChange, from, to time.Time) []span {
	if !to.After(from) {
		return nil
	}
	cur, start := initial, from
	var out []span
	for _, c := range changes {
		if !c.At.After(start) {
			cur = c.Status // at or before the current span's start: it holds from there
			continue
		}
		if !c.At.Before(to) {
			break
		}
		if c.Status != cur {
			out = append(out, span{From: start, To: c.At, Status: cur})
			start, cur = c.At, c.Status
		}
	}
	return append(out, span{From: start, To: to, Status: cur})
}

// windowChanges turns a server's status window into the initial status and the changes serverSpans
// takes.
func windowChanges(w persistence.StatusWindow) (health.Status, []statusChange) {
	var initial health.Status
	if w.Before != nil {
		initial = w.Before.Status
	}
	out := make([]statusChange, len(w.Events))
	for i, e := range w.Events {
		out[i] = statusChange{At: e.OccurredAt, Status: e.Status}
	}
	return initial, out
}

// stripRect is one shape of a strip, in viewBox units.
type stripRect struct {
	X, Y, W, H string // formatted for the SVG attributes
	Fill       string
	Status     string // data-status: healthy, …, or "unknown"
	Title      string // shown on hover
}

// stripView is a strip as a page draws it.
type stripView struct {
	Kind    string // "server" or "fleet" (data-strip)
	Height  int    // of the viewBox and the drawing, in CSS pixels
	Rects   []stripRect
	Summary string // the text alternative
	From    string // the window's start and end, for the axis
	To      string
	Legend  []legendItem
}

// legendItem names a colour of a strip by icon and word.
type legendItem struct {
	statusLabel
	Fill string
}

func stripLegend(unknown string) []legendItem {
	var out []legendItem
	for _, st := range statusOrder {
		out = append(out, legendItem{statusLabel: statusLabels[st], Fill: statusFill[st]})
	}
	return append(out, legendItem{statusLabel: statusLabel{Label: unknown, Icon: "·"}, Fill: statusFill[""]})
}

// maxSummarySpans is how many spans a strip's text alternative names (the newest).
const maxSummarySpans = 12

func fmtX(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// shortTime is a time on a strip's axis and titles: the day and the time, UTC.
func shortTime(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05") }

// viewServerStrip draws spans over [from, to): each span's width is its share of the window.
func viewServerStrip(spans []span, from, to time.Time) stripView {
	v := stripView{Kind: "server", Height: 24, From: shortTime(from) + " UTC", To: shortTime(to) + " UTC", Legend: stripLegend("Not known")}
	total := to.Sub(from).Seconds()
	if total <= 0 {
		return v
	}
	var parts []string
	for _, s := range spans {
		x := s.From.Sub(from).Seconds() / total * stripWidth
		w := s.To.Sub(s.From).Seconds() / total * stripWidth
		name, status := "Not known", "unknown"
		if s.Status != "" {
			name, status = viewStatus(s.Status).Label, string(s.Status)
		}
		title := fmt.Sprintf("%s from %s to %s UTC (%s)", name, shortTime(s.From), shortTime(s.To), fmtDuration(s.To.Sub(s.From)))
		v.Rects = append(v.Rects, stripRect{X: fmtX(x), Y: "0", W: fmtX(w), H: "24", Fill: statusFill[s.Status], Status: status, Title: title})
		parts = append(parts, title)
	}
	if n := len(parts) - maxSummarySpans; n > 0 {
		parts = append([]string{fmt.Sprintf("%d earlier spans", n)}, parts[n:]...)
	}
	v.Summary = "Status over the last 24 hours: " + strings.Join(parts, "; ") + "."
	return v
}

// fleetCounts rebuilds a tenant's counts by status at the end of each of n buckets of the window from
// the counts now (at the end of the last bucket) and the window's flows: walking back through the
// buckets, each bucket's net flow (to +N, from −N; a first registration, From "", had no status before)
// is undone to get the counts before it. A count never goes below zero: flows the counts do not cover
// (an event committed after the counts were read) are clipped, not shown as negative servers. A bucket
// shows its counts at its end: a flap within 15 minutes shows in the server's strip, not here.
func fleetCounts(now map[health.Status]int, flows []persistence.StatusFlow, n int) []map[health.Status]int {
	if n <= 0 {
		return nil
	}
	// Each bucket's net change by status, so the order of its flows does not matter.
	delta := make([]map[health.Status]int, n)
	for _, f := range flows {
		b := f.Bucket
		if b < 0 {
			continue
		}
		if b >= n {
			b = n - 1 // an event stamped at the very end of the window
		}
		if delta[b] == nil {
			delta[b] = map[health.Status]int{}
		}
		delta[b][f.To] += f.N
		if f.From != "" {
			delta[b][f.From] -= f.N
		}
	}
	cur := map[health.Status]int{}
	for _, st := range statusOrder {
		cur[st] = now[st]
	}
	out := make([]map[health.Status]int, n)
	for b := n - 1; b >= 0; b-- {
		end := make(map[health.Status]int, len(statusOrder))
		for _, st := range statusOrder {
			end[st] = cur[st]
			cur[st] = max(0, cur[st]-delta[b][st])
		}
		out[b] = end
	}
	return out
}

func total(c map[health.Status]int) int {
	n := 0
	for _, st := range statusOrder {
		n += c[st]
	}
	return n
}

// viewFleetStrip draws the counts of each bucket as a stacked column, the statuses in statusOrder from
// the bottom, scaled to the largest total of the window.
func viewFleetStrip(counts []map[health.Status]int, from, to time.Time) stripView {
	v := stripView{Kind: "fleet", Height: 48, From: shortTime(from) + " UTC", To: shortTime(to) + " UTC", Legend: stripLegend("No servers")}
	n := len(counts)
	if n == 0 {
		return v
	}
	most := 0
	for _, c := range counts {
		most = max(most, total(c))
	}
	width := stripWidth / float64(n)
	step := to.Sub(from) / time.Duration(n)
	const height = 48.0
	for i, c := range counts {
		start, end := from.Add(time.Duration(i)*step), from.Add(time.Duration(i+1)*step)
		var words []string
		for _, st := range statusOrder {
			words = append(words, fmt.Sprintf("%d %s", c[st], strings.ToLower(viewStatus(st).Label)))
		}
		title := fmt.Sprintf("%s to %s UTC: %s", shortTime(start), shortTime(end), strings.Join(words, ", "))
		if total(c) == 0 { // no server then: the background, still with its title
			v.Rects = append(v.Rects, stripRect{X: fmtX(float64(i) * width), Y: "0", W: fmtX(width), H: fmtX(height),
				Fill: statusFill[""], Status: "unknown", Title: title})
			continue
		}
		y := height
		for _, st := range statusOrder {
			if c[st] == 0 {
				continue
			}
			h := float64(c[st]) / float64(most) * height
			y -= h
			v.Rects = append(v.Rects, stripRect{X: fmtX(float64(i) * width), Y: fmtX(y), W: fmtX(width), H: fmtX(h),
				Fill: statusFill[st], Status: string(st), Title: title})
		}
	}
	last := counts[n-1]
	var words []string
	for _, st := range statusOrder {
		words = append(words, fmt.Sprintf("%d %s", last[st], strings.ToLower(viewStatus(st).Label)))
	}
	v.Summary = fmt.Sprintf("Servers by status over the last 24 hours, in %d columns of %s: at most %d servers; now %s.",
		n, fmtDuration(step), most, strings.Join(words, ", "))
	return v
}
