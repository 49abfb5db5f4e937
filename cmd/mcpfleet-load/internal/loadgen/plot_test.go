package loadgen

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// syntheticPlots are phases with latencies around center, one series point per second from first.
func syntheticPlots(names ...string) []plotPhase {
	var out []plotPhase
	for i, name := range names {
		ph := newPhase(name)
		center := time.Duration(i+1) * time.Millisecond
		for sec := range 20 {
			for k := range 50 {
				d := center + time.Duration(k)*center/25
				ph.lat.Record(d)
				ph.series.record(time.Duration(i*20+sec)*time.Second, d)
			}
		}
		out = append(out, plotOf(ph))
	}
	return out
}

func TestPlotsDrawEveryPhase(t *testing.T) {
	phases := syntheticPlots("registration heartbeats", "steady", "peak, tracing 1 % parent-based <&>")
	for name, write := range map[string]func(io.Writer, []plotPhase) error{"latency": writeLatencyPlot, "histogram": writeHistogramPlot} {
		var b bytes.Buffer
		if err := write(&b, phases); err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s plot is not well-formed XML: %v\n%s", name, err, b.String())
			}
		}
		svg := b.String()
		perPhase := map[string]int{"latency": 2, "histogram": 1}[name] // p50 and p99 lines, or one outline
		if n := strings.Count(svg, "<path "); n != perPhase*len(phases) {
			t.Errorf("%s plot: %d paths for %d phases", name, n, len(phases))
		}
		for _, p := range phases {
			if !strings.Contains(svg, xmlText(p.Name)) {
				t.Errorf("%s plot has no legend for %q", name, p.Name)
			}
		}
	}
}

func TestSeriesPointsPerSecond(t *testing.T) {
	var s series
	s.record(3*time.Second+time.Millisecond, time.Millisecond)
	s.record(3*time.Second+900*time.Millisecond, 3*time.Millisecond)
	s.record(5*time.Second, 10*time.Millisecond)
	pts := s.points()
	if len(pts) != 2 || pts[0].Second != 3 || pts[0].N != 2 || pts[1].Second != 5 || pts[1].N != 1 {
		t.Fatalf("points %+v", pts)
	}
	if pts[0].P99 < 3*time.Millisecond || pts[0].P50 > 2*time.Millisecond {
		t.Fatalf("second 3: p50 %s p99 %s", pts[0].P50, pts[0].P99)
	}
}
