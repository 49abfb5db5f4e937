package loadgen

import (
	"math/rand/v2"
)

// Wheel schedules periodic heartbeats for many modules without a timer per
// module: a ring of slots, one per tick, each holding the modules due at that
// tick. Module i has a fixed phase, i·P/n ticks into every period of P ticks,
// which spreads n modules evenly over the period; each beat lands at its
// nominal tick plus a uniform jitter in [-J, +J] ticks that does not
// accumulate from beat to beat.
//
// Time is whatever the caller says it is: Advance(t) for t = 1, 2, 3, … in
// order. A Wheel is not safe for concurrent use; one goroutine owns it.
type Wheel struct {
	n      int64
	period int64
	jitter int64
	slots  [][]int32
	size   int64
	rng    *rand.Rand
}

// NewWheel returns a wheel for modules 0..n-1 with a period of period ticks
// (at least 2) and a jitter of at most period/4 ticks (larger is clamped).
// seed makes the jitter reproducible.
func NewWheel(n int, period, jitter int64, seed uint64) *Wheel {
	period = max(period, 2)
	jitter = min(max(jitter, 0), period/4)
	size := 2 * period // a beat is never scheduled more than P+2J < 2P ahead
	return &Wheel{
		n:      int64(max(n, 1)),
		period: period,
		jitter: jitter,
		slots:  make([][]int32, size),
		size:   size,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Period returns the period in ticks.
func (w *Wheel) Period() int64 { return w.period }

// offset is module i's phase within the period.
func (w *Wheel) offset(i int32) int64 { return int64(i) * w.period / w.n }

// jittered places a nominal tick, never at or before now.
func (w *Wheel) jittered(nominal, now int64) int64 {
	t := nominal
	if w.jitter > 0 {
		t += w.rng.Int64N(2*w.jitter+1) - w.jitter
	}
	return max(t, now+1)
}

// Add schedules module i, first due at its next nominal tick after now (so
// within one period, plus jitter).
func (w *Wheel) Add(i int32, now int64) {
	off := w.offset(i)
	k := (now - off) / w.period
	nominal := off + k*w.period
	for nominal <= now {
		nominal += w.period
	}
	w.put(i, w.jittered(nominal, now))
}

func (w *Wheel) put(i int32, tick int64) {
	s := tick % w.size
	w.slots[s] = append(w.slots[s], i)
}

// Advance calls due(i) for every module due at tick, in the order they were
// scheduled, and schedules each one's next beat. tick must be one more than
// the previous call's (or the first call's now+1 after Add). due may block.
func (w *Wheel) Advance(tick int64, due func(i int32)) {
	s := tick % w.size
	list := w.slots[s]
	for _, i := range list {
		// The nominal tick of this beat is the one nearest to tick (the jitter
		// is less than half a period); the next beat is one period after it.
		off := w.offset(i)
		k := (tick - off + w.period/2) / w.period
		nominal := off + k*w.period
		w.put(i, w.jittered(nominal+w.period, tick))
		due(i)
	}
	// Rescheduled beats land P-2J ≥ P/2 ticks ahead, never in this slot, so
	// the slot can be emptied in place and its memory reused.
	w.slots[s] = list[:0]
}
