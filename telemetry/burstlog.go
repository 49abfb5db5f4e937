package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// BurstLogInterval is how often a BurstLog logs one burst's warning at most: the interval every
// BurstLog in the service is made with.
const BurstLogInterval = 10 * time.Second

// A BurstLog logs a warning that many requests or actors may raise at once — a write failing for the
// whole fleet while PostgreSQL is away, a saturated node refusing every registration that reaches it —
// at most once per interval per burst, a burst being the warnings made with one key: the first of an
// interval is logged with its own message and attributes and "suppressed", how many of the burst were
// not logged since the last line. A fleet of 100,000 servers retrying a transition every monitor
// period otherwise writes a line per server per period (1.27 million lines in four minutes of an
// overloaded benchmark), spending the CPU the service needs to recover on its own log. Safe for
// concurrent use.
type BurstLog struct {
	log      *slog.Logger
	now      func() time.Time
	interval time.Duration

	mu    sync.Mutex
	state map[string]*burstState // by key
}

type burstState struct {
	last       time.Time
	suppressed int
}

// NewBurstLog returns a BurstLog writing to log, telling time with now.
func NewBurstLog(log *slog.Logger, now func() time.Time, interval time.Duration) *BurstLog {
	return &BurstLog{log: log, now: now, interval: interval, state: map[string]*burstState{}}
}

// Warn logs msg with args unless the burst key was logged less than the interval ago, in which case
// it is counted. The keys should be few (a message, a problem type): each is remembered for good.
func (b *BurstLog) Warn(ctx context.Context, key, msg string, args ...any) {
	now := b.now()
	b.mu.Lock()
	st := b.state[key]
	if st == nil {
		st = &burstState{}
		b.state[key] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < b.interval {
		st.suppressed++
		b.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	b.mu.Unlock()
	b.log.WarnContext(ctx, msg, append(args, "suppressed", suppressed)...)
}
