package loadgen

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// series is a phase's heartbeat latency over time: one histogram per second of the run (the second
// since the run started), for the latency plot. Safe for concurrent use.
type series struct {
	mu    sync.Mutex
	first int // run second of slots[0]
	slots []*Histogram
}

// record adds one latency d of a request sent at run time at (since the run started).
func (s *series) record(at time.Duration, d time.Duration) {
	sec := int(at / time.Second)
	s.mu.Lock()
	if s.slots == nil {
		s.first = sec
	}
	i := sec - s.first
	if i < 0 {
		i = 0
	}
	if i < 4*3600 { // a phase longer than 4 h keeps its first 4 h in the plot
		for len(s.slots) <= i {
			s.slots = append(s.slots, nil)
		}
		if s.slots[i] == nil {
			s.slots[i] = &Histogram{}
		}
		h := s.slots[i]
		s.mu.Unlock()
		h.Record(d)
		return
	}
	s.mu.Unlock()
}

// point is one second of a latency series.
type point struct {
	Second   int // since the run started
	N        uint64
	P50, P99 time.Duration
}

func (s *series) points() []point {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []point
	for i, h := range s.slots {
		if h == nil || h.Count() == 0 {
			continue
		}
		out = append(out, point{Second: s.first + i, N: h.Count(), P50: h.Quantile(0.5), P99: h.Quantile(0.99)})
	}
	return out
}

// plotPhase is what the plots show of one heartbeat phase.
type plotPhase struct {
	Name   string
	Hist   *Histogram
	Points []point
}

// plotOf takes a finished phase's figures for the plots.
func plotOf(ph *phase) plotPhase {
	return plotPhase{Name: ph.name, Hist: &ph.lat, Points: ph.series.points()}
}

// plotColors are the phases' colours, in order.
var plotColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// svg dimensions: the plotting area sits inside margins for the axes' labels.
const (
	svgW, svgH              = 960, 390 // svgH without the legend, which adds a line per two phases
	marginL, marginR        = 70, 45
	marginT, marginB        = 30, 30
	plotW, plotH            = svgW - marginL - marginR, svgH - marginT - marginB
	latencyFloor, latencyUp = 0.1, 10000.0 // ms: the log axis of latencies
)

// logY maps a latency in ms to a y coordinate on the log axis from latencyFloor to latencyUp.
func logY(ms float64) float64 {
	ms = min(max(ms, latencyFloor), latencyUp)
	f := (math.Log10(ms) - math.Log10(latencyFloor)) / (math.Log10(latencyUp) - math.Log10(latencyFloor))
	return marginT + plotH*(1-f)
}

// writeLogAxis draws the latency axis (log scale, ms) as horizontal grid lines: vertical says whether
// it is the y axis (the over-time plot) or the x axis (the histogram).
func writeLogAxis(b *strings.Builder, vertical bool) {
	for ms := latencyFloor; ms <= latencyUp; ms *= 10 {
		label := strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", ms), "0"), ".")
		if vertical {
			y := logY(ms)
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end" font-size="11">%s ms</text>`+"\n",
				marginL, y, marginL+plotW, y, marginL-6, y+4, label)
			continue
		}
		x := logX(ms)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s ms</text>`+"\n",
			x, marginT, x, marginT+plotH, x, marginT+plotH+16, label)
	}
}

// logX maps a latency in ms to an x coordinate on the log axis.
func logX(ms float64) float64 {
	ms = min(max(ms, latencyFloor), latencyUp)
	f := (math.Log10(ms) - math.Log10(latencyFloor)) / (math.Log10(latencyUp) - math.Log10(latencyFloor))
	return marginL + plotW*f
}

// svgStart opens a plot of phases phases: the title on top, room for the legend below.
func svgStart(b *strings.Builder, title string, phases int) {
	h := svgH + 16*((phases+1)/2) + 8
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/><text x="%d" y="18" font-size="14">%s</text>`+"\n", svgW, h, marginL, xmlText(title))
}

// legend writes phase i's entry of the legend below the plot, two to a line.
func legend(b *strings.Builder, i int, color, label string) {
	x, y := marginL+(i%2)*(plotW/2), svgH+(i/2)*16
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" font-size="12">%s</text>`+"\n", x, y, color, x+16, y+10, xmlText(label))
}

func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// writeLatencyPlot draws every phase's p50 (thin) and p99 (thick) latency per second over the run.
func writeLatencyPlot(w io.Writer, phases []plotPhase) error {
	var b strings.Builder
	svgStart(&b, "Heartbeat latency per second of the run: p99 (thick) and p50 (thin), log scale", len(phases))
	lastSecond := 1
	for _, p := range phases {
		if n := len(p.Points); n > 0 {
			lastSecond = max(lastSecond, p.Points[n-1].Second+1)
		}
	}
	x := func(sec int) float64 { return marginL + plotW*float64(sec)/float64(lastSecond) }
	writeLogAxis(&b, true)
	step := max(1, lastSecond/10)
	for sec := 0; sec <= lastSecond; sec += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%d s</text>`+"\n", x(sec), marginT+plotH+16, sec)
	}
	for i, p := range phases {
		color := plotColors[i%len(plotColors)]
		for _, q := range []struct {
			width float64
			v     func(point) time.Duration
		}{{1, func(p point) time.Duration { return p.P50 }}, {2.5, func(p point) time.Duration { return p.P99 }}} {
			var path strings.Builder
			for k, pt := range p.Points {
				cmd := "L"
				if k == 0 || pt.Second != p.Points[k-1].Second+1 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, x(pt.Second), logY(msOf(q.v(pt))))
			}
			if path.Len() > 0 {
				fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f"/>`+"\n", strings.TrimSpace(path.String()), color, q.width)
			}
		}
		legend(&b, i, color, p.Name)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHistogramPlot draws each phase's latency distribution: the share of its answers per histogram
// bucket (merged into 1/8 decades), on a log latency axis, one outline per phase.
func writeHistogramPlot(w io.Writer, phases []plotPhase) error {
	var b strings.Builder
	svgStart(&b, "Heartbeat latency histogram per phase: share of answers per 1/8 decade, log latency axis", len(phases))
	writeLogAxis(&b, false)
	const bins = 8 * 5 // 1/8 decades from latencyFloor to latencyUp
	type shares [bins]float64
	all := make([]shares, len(phases))
	peak := 0.0
	for i, p := range phases {
		n := p.Hist.Count()
		if n == 0 {
			continue
		}
		for k := range p.Hist.counts {
			c := p.Hist.counts[k].Load()
			if c == 0 {
				continue
			}
			lo, hi := bucketBounds(k)
			ms := float64(lo+hi) / 2 / 1000
			bin := int(math.Floor((math.Log10(max(ms, latencyFloor)) - math.Log10(latencyFloor)) * 8))
			bin = min(max(bin, 0), bins-1)
			all[i][bin] += float64(c) / float64(n)
		}
		for _, v := range all[i] {
			peak = max(peak, v)
		}
	}
	if peak == 0 {
		peak = 1
	}
	y := func(v float64) float64 { return marginT + plotH*(1-v/peak) }
	for _, v := range []float64{0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">%.0f %%</text>`+"\n", marginL-6, y(v*peak)+4, 100*v*peak)
	}
	for i, p := range phases {
		color := plotColors[i%len(plotColors)]
		var path strings.Builder
		fmt.Fprintf(&path, "M%.1f,%.1f ", logX(latencyFloor), y(0))
		for k, v := range all[i] {
			x0 := logX(latencyFloor * math.Pow(10, float64(k)/8))
			x1 := logX(latencyFloor * math.Pow(10, float64(k+1)/8))
			fmt.Fprintf(&path, "L%.1f,%.1f L%.1f,%.1f ", x0, y(v), x1, y(v))
		}
		fmt.Fprintf(&path, "L%.1f,%.1f", logX(latencyUp), y(0))
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", path.String(), color)
		legend(&b, i, color, fmt.Sprintf("%s (%s answers)", p.Name, thousands(int64(p.Hist.Count()))))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plotPaths are the SVG files written beside a report at path: REPORT-latency.svg, REPORT-histogram.svg.
func plotPaths(path string) (latency, histogram string) {
	base := strings.TrimSuffix(path, filepath.Ext(path))
	return base + "-latency.svg", base + "-histogram.svg"
}

// writePlots writes the two plots beside the report at path.
func writePlots(path string, phases []plotPhase) error {
	lat, hist := plotPaths(path)
	for _, f := range []struct {
		path  string
		write func(io.Writer, []plotPhase) error
	}{{lat, writeLatencyPlot}, {hist, writeHistogramPlot}} {
		out, err := os.Create(f.path)
		if err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
		if err := f.write(out, phases); err != nil {
			_ = out.Close()
			return fmt.Errorf("write plot %s: %w", f.path, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("write plot %s: %w", f.path, err)
		}
	}
	return nil
}
