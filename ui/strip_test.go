package ui

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpfleet/mcpfleet/health"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// The strips' arithmetic, without a database or a browser (the Chromium test in browser_test.go draws
// them from a real history).

var t0 = time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func TestServerSpans(t *testing.T) {
	const (
		H = health.Healthy
		D = health.Degraded
		U = health.Unhealthy
		X = health.Deregistered
	)
	from, to := at(0), at(100)
	for _, c := range []struct {
		name    string
		initial health.Status
		changes []statusChange
		want    []span
	}{
		{"no changes: the initial status all along", H, nil, []span{{at(0), at(100), H}}},
		{"registered within the window: not known before", "", []statusChange{{at(30), H}},
			[]span{{at(0), at(30), ""}, {at(30), at(100), H}}},
		{"a degraded, unhealthy and recovered episode", H, []statusChange{{at(10), D}, {at(20), U}, {at(50), H}},
			[]span{{at(0), at(10), H}, {at(10), at(20), D}, {at(20), at(50), U}, {at(50), at(100), H}}},
		{"a re-registration in the same status merges", H, []statusChange{{at(10), H}, {at(40), X}, {at(60), H}, {at(70), H}},
			[]span{{at(0), at(40), H}, {at(40), at(60), X}, {at(60), at(100), H}}},
		{"a change at the window's start sets the initial status", H, []statusChange{{at(0), U}, {at(5), H}},
			[]span{{at(0), at(5), U}, {at(5), at(100), H}}},
		{"changes before the window only set where it starts", "", []statusChange{{at(-50), D}, {at(-10), U}, {at(20), H}},
			[]span{{at(0), at(20), U}, {at(20), at(100), H}}},
		{"changes at or after the end are ignored", H, []statusChange{{at(90), D}, {at(100), U}, {at(120), H}},
			[]span{{at(0), at(90), H}, {at(90), at(100), D}}},
		{"two changes at one instant: the later one holds", H, []statusChange{{at(10), D}, {at(10), U}},
			[]span{{at(0), at(10), H}, {at(10), at(100), U}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := serverSpans(c.initial, c.changes, from, to)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Fatalf("spans (-want +got):\n%s", d)
			}
			// The spans tile the window: no gap, no overlap, none empty.
			for i, s := range got {
				if !s.To.After(s.From) || (i > 0 && !got[i-1].To.Equal(s.From)) || (i > 0 && got[i-1].Status == s.Status) {
					t.Fatalf("span %d %+v does not tile: %+v", i, s, got)
				}
			}
			if !got[0].From.Equal(from) || !got[len(got)-1].To.Equal(to) {
				t.Fatalf("spans do not cover the window: %+v", got)
			}
		})
	}
	if got := serverSpans(H, nil, to, from); got != nil {
		t.Fatalf("an empty window has spans: %+v", got)
	}
}

func TestWindowChanges(t *testing.T) {
	w := persistence.StatusWindow{Before: &persistence.AuditEvent{Status: health.Degraded, OccurredAt: at(-5)},
		Events: []persistence.AuditEvent{{Status: health.Unhealthy, OccurredAt: at(3)}, {Status: health.Healthy, OccurredAt: at(9)}}}
	initial, changes := windowChanges(w)
	want := []statusChange{{at(3), health.Unhealthy}, {at(9), health.Healthy}}
	if initial != health.Degraded || cmp.Diff(want, changes) != "" {
		t.Fatalf("initial %q, changes %+v", initial, changes)
	}
	if initial, _ := windowChanges(persistence.StatusWindow{Truncated: true}); initial != "" {
		t.Fatalf("a truncated window starts %q, want not known", initial)
	}
}

func TestViewServerStrip(t *testing.T) {
	from, to := at(0), at(100)
	v := viewServerStrip([]span{{at(0), at(25), ""}, {at(25), at(75), health.Healthy}, {at(75), at(100), health.Unhealthy}}, from, to)
	type rect struct{ X, W, Fill, Status string }
	var got []rect
	for _, r := range v.Rects {
		got = append(got, rect{r.X, r.W, r.Fill, r.Status})
	}
	want := []rect{{"0.00", "250.00", "#eaeef2", "unknown"}, {"250.00", "500.00", "#1a7f37", "healthy"}, {"750.00", "250.00", "#cf222e", "unhealthy"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("rects (-want +got):\n%s", d)
	}
	if title := v.Rects[1].Title; title != "Healthy from May 17 10:25:00 to May 17 11:15:00 UTC (50 min)" {
		t.Fatalf("title %q", title)
	}
	if !strings.Contains(v.Summary, "Unhealthy from May 17 11:15:00") {
		t.Fatalf("summary %q", v.Summary)
	}
}

func TestFleetCounts(t *testing.T) {
	const (
		H = health.Healthy
		D = health.Degraded
		U = health.Unhealthy
		X = health.Deregistered
	)
	type counts = map[health.Status]int
	for _, c := range []struct {
		name  string
		now   counts
		flows []persistence.StatusFlow
		n     int
		want  []counts
	}{
		{"no flows: the counts now all along", counts{H: 3, X: 1}, nil, 2,
			[]counts{{H: 3, D: 0, U: 0, X: 1}, {H: 3, D: 0, U: 0, X: 1}}},
		{"a server registered in the last bucket was not there before", counts{H: 2}, []persistence.StatusFlow{{Bucket: 2, From: "", To: H, N: 1}}, 3,
			[]counts{{H: 1, D: 0, U: 0, X: 0}, {H: 1, D: 0, U: 0, X: 0}, {H: 2, D: 0, U: 0, X: 0}}},
		{"degraded then unhealthy then recovered", counts{H: 4}, []persistence.StatusFlow{
			{Bucket: 0, From: H, To: D, N: 2}, {Bucket: 1, From: D, To: U, N: 2}, {Bucket: 2, From: U, To: H, N: 2}}, 3,
			[]counts{{H: 2, D: 2, U: 0, X: 0}, {H: 2, D: 0, U: 2, X: 0}, {H: 4, D: 0, U: 0, X: 0}}},
		{"a deregistration and a revival in one bucket cancel out", counts{H: 1}, []persistence.StatusFlow{
			{Bucket: 1, From: H, To: X, N: 1}, {Bucket: 1, From: X, To: H, N: 1}}, 2,
			[]counts{{H: 1, D: 0, U: 0, X: 0}, {H: 1, D: 0, U: 0, X: 0}}},
		{"flows the counts do not cover are clipped at zero", counts{H: 0}, []persistence.StatusFlow{{Bucket: 1, From: "", To: H, N: 3}}, 2,
			[]counts{{H: 0, D: 0, U: 0, X: 0}, {H: 0, D: 0, U: 0, X: 0}}},
		{"a flow stamped at the window's end counts in the last bucket", counts{U: 1}, []persistence.StatusFlow{{Bucket: 2, From: H, To: U, N: 1}}, 2,
			[]counts{{H: 1, D: 0, U: 0, X: 0}, {H: 0, D: 0, U: 1, X: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := cmp.Diff(c.want, fleetCounts(c.now, c.flows, c.n)); d != "" {
				t.Fatalf("counts (-want +got):\n%s", d)
			}
		})
	}
}

func TestViewFleetStrip(t *testing.T) {
	counts := []map[health.Status]int{{health.Healthy: 4}, {health.Healthy: 2, health.Unhealthy: 2}, {}}
	v := viewFleetStrip(counts, at(0), at(30))
	if len(v.Rects) != 4 {
		t.Fatalf("rects %+v", v.Rects)
	}
	// The first column is all healthy and full height; the second half healthy (bottom), half unhealthy.
	if r := v.Rects[0]; r.Status != "healthy" || r.Y != "0.00" || r.H != "48.00" || r.X != "0.00" {
		t.Fatalf("first column %+v", r)
	}
	if h, u := v.Rects[1], v.Rects[2]; h.Status != "healthy" || h.Y != "24.00" || u.Status != "unhealthy" || u.Y != "0.00" || u.H != "24.00" {
		t.Fatalf("second column %+v %+v", h, u)
	}
	if r := v.Rects[3]; r.Status != "unknown" || r.X != "666.67" || !strings.Contains(r.Title, "0 healthy") {
		t.Fatalf("a column without servers is the background with its title: %+v", r)
	}
	w, _ := strconv.ParseFloat(v.Rects[0].W, 64)
	if w*3 < 999 || w*3 > 1001 {
		t.Fatalf("column width %v for 3 columns", w)
	}
	if !strings.Contains(v.Rects[1].Title, "2 healthy, 0 degraded, 2 unhealthy, 0 deregistered") {
		t.Fatalf("title %q", v.Rects[1].Title)
	}
}
