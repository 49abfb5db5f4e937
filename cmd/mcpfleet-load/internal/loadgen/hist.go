package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in a log-linear layout like HdrHistogram:
// values are kept in microseconds, exactly below 2^subBits µs, and above
// that in 2^subBits linear sub-buckets per power of two, so every recorded
// value is known to within 1/2^subBits (about 3 %). Values from 0 to about
// 12 days are kept; longer ones count in the top bucket (Max stays exact).
//
// Record, Count, Max and the quantiles are safe for concurrent use; a
// quantile read while others record sees some consistent-enough snapshot.
// The zero value is ready to use.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	n      atomic.Uint64
	sumUS  atomic.Uint64
	maxNS  atomic.Int64
}

const (
	subBits    = 5
	subCount   = 1 << subBits
	maxExp     = 40 // 2^40 µs ≈ 12.7 days
	numBuckets = (maxExp-subBits+1)*subCount + subCount
)

// bucketOf returns the bucket index of v microseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	k := bits.Len64(v) - 1 // v in [2^k, 2^(k+1))
	if k > maxExp {
		return numBuckets - 1
	}
	return (k-subBits+1)*subCount + int(v>>(k-subBits)) - subCount
}

// bucketBounds returns the smallest and largest microsecond values of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	k := i/subCount + subBits - 1
	sub := uint64(i%subCount) + subCount
	lo = sub << (k - subBits)
	return lo, lo + 1<<(k-subBits) - 1
}

// Record adds one duration. Negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	d = max(d, 0)
	us := uint64(d / time.Microsecond)
	h.counts[bucketOf(us)].Add(1)
	h.n.Add(1)
	h.sumUS.Add(us)
	for {
		m := h.maxNS.Load()
		if int64(d) <= m || h.maxNS.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max returns the largest duration recorded, exactly, or 0.
func (h *Histogram) Max() time.Duration { return time.Duration(h.maxNS.Load()) }

// Mean returns the mean duration (to the microsecond), or 0.
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sumUS.Load()/n) * time.Microsecond
}

// Quantile returns the q-quantile (0 < q ≤ 1) as the upper bound of the
// bucket holding the value of that rank, never above Max: a value at least
// as large as the true quantile and within about 3 % of it (or 1 µs). It
// returns 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			if i == numBuckets-1 {
				return h.Max() // the top bucket also holds everything beyond range
			}
			_, hi := bucketBounds(i)
			d := time.Duration(hi+1)*time.Microsecond - 1
			return min(d, h.Max())
		}
	}
	return h.Max()
}

// Merge adds every count of o into h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sumUS.Add(o.sumUS.Load())
	if m := o.maxNS.Load(); m > h.maxNS.Load() {
		h.maxNS.Store(m)
	}
}
