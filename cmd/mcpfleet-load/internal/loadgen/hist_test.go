package loadgen_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/cmd/mcpfleet-load/internal/loadgen"
)

func TestHistogramQuantilesAreWithinThreePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h loadgen.Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		// Log-normal around 2 ms with a long tail, 1 µs resolution.
		d := time.Duration(math.Exp(rng.NormFloat64()*1.2+math.Log(2e6))) / time.Microsecond * time.Microsecond
		vals[i] = d
		h.Record(d)
	}
	slices.Sort(vals)
	if got := h.Count(); got != uint64(len(vals)) {
		t.Fatalf("Count = %d, want %d", got, len(vals))
	}
	if h.Max() != vals[len(vals)-1] {
		t.Errorf("Max = %s, want exactly %s", h.Max(), vals[len(vals)-1])
	}
	for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/32+float64(time.Microsecond) {
			t.Errorf("Quantile(%v) = %s, exact %s: want ≥ exact and within 1/32", q, got, exact)
		}
	}
	var sum time.Duration
	for _, v := range vals {
		sum += v
	}
	mean := sum / time.Duration(len(vals))
	if diff := h.Mean() - mean; diff < -time.Microsecond || diff > time.Microsecond {
		t.Errorf("Mean = %s, want %s", h.Mean(), mean)
	}
}

func TestHistogramEdges(t *testing.T) {
	var empty loadgen.Histogram
	if empty.Quantile(0.99) != 0 || empty.Max() != 0 || empty.Mean() != 0 || empty.Count() != 0 {
		t.Error("an empty histogram must report zeros")
	}

	tests := []struct {
		name string
		rec  []time.Duration
		q    float64
		want time.Duration
	}{
		{"small values are exact", []time.Duration{3 * time.Microsecond, 7 * time.Microsecond, 31 * time.Microsecond}, 0.5, 7*time.Microsecond + 999},
		{"one value: p50 capped at max", []time.Duration{1234567 * time.Nanosecond}, 0.5, 1234567 * time.Nanosecond},
		{"negative counts as zero", []time.Duration{-time.Second}, 1, 0},
		{"beyond range lands in the top bucket, max exact", []time.Duration{time.Millisecond, 30 * 24 * time.Hour}, 1, 30 * 24 * time.Hour},
		{"sub-microsecond", []time.Duration{500 * time.Nanosecond, 700 * time.Nanosecond}, 1, 700 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h loadgen.Histogram
			for _, d := range tt.rec {
				h.Record(d)
			}
			if got := h.Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %s, want %s", tt.q, got, tt.want)
			}
		})
	}
}

func TestHistogramConcurrentRecordAndMerge(t *testing.T) {
	var a, b loadgen.Histogram
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				a.Record(time.Duration(w*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	b.Record(time.Hour)
	b.Merge(&a)
	if a.Count() != 8000 || b.Count() != 8001 {
		t.Fatalf("counts = %d, %d; want 8000, 8001", a.Count(), b.Count())
	}
	if a.Max() != 7999*time.Microsecond || b.Max() != time.Hour {
		t.Errorf("max = %s, %s", a.Max(), b.Max())
	}
	if p := b.Quantile(0.5); p < 3999*time.Microsecond || p > 4200*time.Microsecond {
		t.Errorf("merged p50 = %s, want about 4ms", p)
	}
}
