package actors

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mcpfleet/mcpfleet/health"
)

// burstLogInterval is how often a burstLog logs one message at most.
const burstLogInterval = 10 * time.Second

// A burstLog logs a warning that every server actor may raise at once — a write failing for the whole
// fleet while PostgreSQL is away or the writer is saturated — at most once per interval per message: the
// first of an interval is logged with its own attributes and "suppressed", how many of the same message
// were not logged since the last one. A fleet of 100,000 servers retrying a transition every monitor
// period otherwise writes a line per server per period (1.27 million lines in four minutes of an
// overloaded benchmark), spending the CPU the service needs to recover on its own log. Safe for
// concurrent use.
type burstLog struct {
	log      *slog.Logger
	clock    health.Clock
	interval time.Duration

	mu    sync.Mutex
	state map[string]*burstState // by message
}

type burstState struct {
	last       time.Time
	suppressed int
}

func newBurstLog(log *slog.Logger, clock health.Clock, interval time.Duration) *burstLog {
	return &burstLog{log: log, clock: clock, interval: interval, state: map[string]*burstState{}}
}

// Warn logs msg with args unless msg was logged less than the interval ago, in which case it is counted.
func (b *burstLog) Warn(ctx context.Context, msg string, args ...any) {
	now := b.clock.Now()
	b.mu.Lock()
	st := b.state[msg]
	if st == nil {
		st = &burstState{}
		b.state[msg] = st
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
